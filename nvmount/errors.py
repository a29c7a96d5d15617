"""Errors of the mount engine. Each stage translates OS errors once, with `from err`.

    NvmountError                root
    ├── DriverError             driver discovery: ld.so.cache, libraries, device nodes
    │   └── NvmlError           an NVML call failed (function, code name)
    ├── SelectionError          an unknown device id in the request
    ├── RequirementError        a NVIDIA_REQUIRE_* condition is not met (or is malformed)
    ├── ContainerError          the target process / namespace / rootfs
    ├── PathError               a path inside the container root could not be resolved safely
    ├── MountError              a mount step failed (op, source, target, flags)
    ├── LdcacheError            the container's ldcache update
    ├── CgroupError             the device cgroup update
    └── SimError                building the simulated driver (nvhook.sim)

Messages follow "<op> <subject>: <cause> (<hint>)": lowercase, no trailing period.
"""

from __future__ import annotations


class NvmountError(Exception):
    """Root of the engine's errors."""

    exit_code = 1


class DriverError(NvmountError):
    pass


class NvmlError(DriverError):
    def __init__(self, function: str, code: int, text: str, hint: str = "") -> None:
        self.function = function
        self.code = code
        self.text = text
        msg = f"nvml {function} failed: {text} (code {code})"
        if hint:
            msg += f" ({hint})"
        super().__init__(msg)


class SelectionError(NvmountError):
    pass


class RequirementError(NvmountError):
    pass


class ContainerError(NvmountError):
    pass


class PathError(NvmountError):
    pass


class MountError(NvmountError):
    pass


class LdcacheError(NvmountError):
    pass


class CgroupError(NvmountError):
    pass


class SimError(NvmountError):
    pass
