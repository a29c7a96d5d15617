"""The driver's /proc/driver/nvidia files the procfs view copies (libnvc-spec §2.4). Read only.

Stage: discover. `params`, `version` and `registry` of the driver root's proc tree, each
opened without following symlinks or blocking, checked to be a regular file, and bounded.
"""

from __future__ import annotations

import os

from nvmount.errors import DriverError, strerror
from nvmount.log import get_logger
from nvmount.records import record

log = get_logger(__name__)


@record
class ProcFile:
    """A host /proc/driver/nvidia file copied into the procfs view (read before planning)."""

    name: str  # "params", "version", "registry"
    data: bytes
    mode: int  # permission bits of the host file

PROC_FILE_LIMIT = 1 << 20  # bytes read of one /proc/driver/nvidia file


def read_proc_files(proc_driver_dir: str) -> tuple[ProcFile, ...]:
    """The host's params, version and registry (a missing one is skipped, as NVIDIA does)."""
    import stat

    files: list[ProcFile] = []
    for name in ("params", "version", "registry"):
        path = f"{proc_driver_dir}/{name}"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            log.warning("%s not found; skipping", path)
            continue
        except OSError as err:
            raise DriverError(f"read {path}: {strerror(err)} "
                              "(check the driver root)") from err
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise DriverError(f"read {path}: not a regular file (check the driver root)")
            data = os.read(fd, PROC_FILE_LIMIT)
        finally:
            os.close(fd)
        files.append(ProcFile(name, data, stat.S_IMODE(st.st_mode)))
    return tuple(files)
