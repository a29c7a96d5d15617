"""Errors of the mount engine. Each stage translates OS errors once, with `from err`.

    NvmountError                root
    ├── DriverError             driver discovery: ld.so.cache, libraries, device nodes
    │   └── NvmlError           an NVML call failed (function, code name)
    ├── SelectionError          an unknown device id in the request
    ├── RequirementError        a NVIDIA_REQUIRE_* condition is not met (or is malformed)
    ├── ContainerError          the target process / namespace / rootfs
    ├── PathError               a path inside the container root could not be resolved safely
    ├── TrustError              a host path root would use is not root's alone (nvmount.fs.trusted)
    ├── MountError              a mount step failed (op, source, target, flags)
    ├── LdcacheError            the container's ldcache update
    ├── CgroupError             the device cgroup update
    └── SystemdError            registering the devices with the container's systemd unit

Messages follow "<op> <subject>: <cause> (<hint>)": lowercase, no trailing period. An
`OSError` becomes `<cause>` through `strerror` (the one errno formatter). Effect errors carry
their fields: `MountError` (op, source, target, link, flags, cause, hint) prints like the step
that failed, e.g. `mount library /usr/lib/libcuda.so.1 -> /usr/lib/libcuda.so.1 (ro,nosuid,
nodev): no such file or directory`.
"""

from __future__ import annotations

import os


def strerror(err: OSError, causes: dict[int, str] | None = None) -> str:
    """The cause text of an OSError: lowercase errno text ("no such file or directory"),
    `causes[errno]` when given, or str(err) when it carries no errno."""
    if not err.errno:
        return str(err)
    if causes is not None and err.errno in causes:
        return causes[err.errno]
    return os.strerror(err.errno).lower()


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


class TrustError(NvmountError):
    """A host path that config or a user names fails the trusted-path rules
    (`nvmount.fs.trusted`): "<subject>: <detail>", the detail naming the component."""

    def __init__(self, subject: str, detail: str) -> None:
        self.subject, self.detail = subject, detail
        super().__init__(f"{subject}: {detail}")


class MountError(NvmountError):
    """A mount step failed: `op` ("mount library", "open source", "attach mount at", ...),
    `source` (host path), `target` (container path), `link` (a symlink's text), `flags`
    ("ro,nosuid,nodev"), `cause` and `hint`; the message is built from them."""

    def __init__(self, op: str, target: str = "", cause: str = "", *, source: str = "",
                 link: str = "", flags: str = "", hint: str = "") -> None:
        self.op, self.target, self.cause, self.source = op, target, cause, source
        self.link, self.flags, self.hint = link, flags, hint
        super().__init__(step_text(op, target, source=source, link=link, flags=flags)
                         + (f": {cause}" if cause else "") + (f" ({hint})" if hint else ""))


def step_text(op: str, target: str = "", *, source: str = "", link: str = "",
              flags: str = "") -> str:
    """`<op> [<source> -> ]<target>[ -> <link>][ (<flags>)]`: a step's name in logs, errors and
    fault points."""
    subject = f"{source} -> {target}" if source else target
    if link:
        subject += f" -> {link}"
    text = f"{op} {subject}" if subject else op
    return f"{text} ({flags})" if flags else text


class LdcacheError(NvmountError):
    pass


class CgroupError(NvmountError):
    pass



class SystemdError(NvmountError):
    """Registering devices with systemd failed (the hook warns; a container still starts)."""
