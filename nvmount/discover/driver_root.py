"""Confined path resolution inside the driver root (libnvc-spec §9.1, *resolve-in*).

Discovery reads the driver root (`/` on a normal host, `/run/nvidia/driver` with a driver
container). The root is trusted, but a symlink in it must not send discovery outside it: every
lookup walks the path one component at a time with `readlink`, an absolute link target restarts
at the root, `..` never climbs above the root (it is an error, as in libnvc, not a clamp), and
at most 40 links are followed. A missing component switches to libnvc's "missing" mode (the
rest is appended literally) and the result says the path does not exist.

Read-only: this module only calls readlink, so a `DriverRoot` is cheap to build per discovery.
The readlink results are memoised in the instance (one discovery resolves the same directories
many times); there is no module-level state.
"""

from __future__ import annotations

import errno
import os

from nvmount.bounds import shorten
from nvmount.errors import DriverError, strerror
from nvmount.records import record

MAX_LINKS = 40
MAX_STEPS = 1024  # components per resolution, link texts included (40 x 4 KiB of "../" = 80k)
_NOT_A_LINK = ""  # memo value: the component exists and is not a symlink


@record
class Resolved:
    """A path resolved inside the driver root, and whether it exists."""

    path: str  # root-relative absolute path with every symlink resolved ("/usr/lib/...")
    exists: bool


class DriverRoot:
    """A driver root directory and a confined resolver for paths inside it."""

    def __init__(self, root: str) -> None:
        real = os.path.realpath(root or "/")
        self.root = real
        self._prefix = "" if real == "/" else real
        self._links: dict[str, str | None] = {}  # host path -> target, "" (not a link), None

    def host(self, path: str) -> str:
        """The host path of a root-relative absolute path (root + path)."""
        return self._prefix + path if path.startswith("/") else f"{self._prefix}/{path}"

    def _readlink(self, host: str) -> str | None:
        """The link target, "" when not a link, None when missing; other errors raise."""
        if host in self._links:
            return self._links[host]
        try:
            target: str | None = os.readlink(host)
        except OSError as err:
            if err.errno == errno.EINVAL:
                target = _NOT_A_LINK
            elif err.errno == errno.ENOENT:
                target = None
            else:
                raise
        self._links[host] = target
        return target

    def resolve(self, path: str) -> Resolved:
        """Resolve `path` (interpreted inside the root) to its real root-relative path.

        Raises `DriverError` when it leaves the root, loops, or a component cannot be read.
        """
        pending = list(reversed(path.split("/")))
        parts: list[str] = []
        missing = False
        links = steps = 0
        while pending:
            name = pending.pop()
            steps += 1
            if steps > MAX_STEPS:
                raise DriverError(f"path error: {self.host(shorten(path))}: more than {MAX_STEPS} "
                                  "path components, symlink texts included (fix the symlinks "
                                  "in the driver root)")
            if name in ("", "."):
                continue
            if name == "..":
                if not parts:
                    raise DriverError(f"path error: {path} resolves outside of {self.root} "
                                      f"(fix the symlinks in the driver root)")
                parts.pop()
                continue
            if missing:
                parts.append(name)
                continue
            target = self._target(path, "/" + "/".join([*parts, name]))
            if target is None:
                missing = True
                parts.append(name)
            elif target == _NOT_A_LINK:
                parts.append(name)
            else:
                links += 1
                if links > MAX_LINKS:
                    raise DriverError(f"path error: {self.host(path)}: too many levels of "
                                      f"symbolic links (fix the symlinks in the driver root)")
                if target.startswith("/"):
                    parts = []
                pending.extend(reversed(target.split("/")))
        return Resolved("/" + "/".join(parts), not missing)

    def _target(self, path: str, rel: str) -> str | None:
        try:
            return self._readlink(self.host(rel))
        except OSError as err:
            cause = strerror(err)
            raise DriverError(f"path error: {self.host(path)}: {cause}") from err
