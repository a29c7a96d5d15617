"""Errors of the hook. Every failure the user sees is one of these, printed as one line.

    NvhookError                 root: `cli` prints str(err) and exits 1
    ├── UsageError              bad command line: exit 2
    ├── ConfigError             config.toml: names the key, the value and what is allowed
    ├── StateError              OCI state on stdin
    ├── SpecError               the bundle's config.json: names the file and field
    ├── RequestError            the container's NVIDIA_* environment: names the variable
    ├── WrapperError            the runtime wrapper: the bundle, the low-level runtime
    ├── ConfigureError          `nvhook runtime configure`: names the file and what to do
    ├── CdiError                a CDI spec (names the file and the field) or a CDI hook
    └── SimError                building the simulated driver (nvhook.dev.sim)

Errors from the engine (`nvmount.errors.NvmountError`) are printed the same way.
"""

from __future__ import annotations


class NvhookError(Exception):
    """Root of the hook's errors; the message is one line, lowercase start allowed."""

    exit_code = 1


class UsageError(NvhookError):
    exit_code = 2


class ConfigError(NvhookError):
    pass


class StateError(NvhookError):
    pass


class SpecError(NvhookError):
    pass


class RequestError(NvhookError):
    pass


class SimError(NvhookError):
    pass


class WrapperError(NvhookError):
    pass


class ConfigureError(NvhookError):
    pass


class CdiError(NvhookError):
    pass
