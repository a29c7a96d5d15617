"""The container's rootfs layout: where driver files land (libnvc-spec §2.2). Read stage.

`choose_layout` decides from facts (pure); `detect_layout` reads those facts, and the CUDA
forward-compat libraries the image ships, through an opened `Root` (fd-based, in-root).
"""

from __future__ import annotations

import os
import stat

from nvmount.errors import ContainerError, PathError
from nvmount.log import get_logger
from nvmount.plan.types import ContainerLayout

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount.fs.rootfs import Root

log = get_logger(__name__)

DEBIAN_DIRS = {
    "x86_64": ("/usr/lib/x86_64-linux-gnu", "/usr/lib/i386-linux-gnu"),
    "aarch64": ("/usr/lib/aarch64-linux-gnu", "/var/empty"),
    "ppc64le": ("/usr/lib/powerpc64le-linux-gnu", "/var/empty"),
}


def choose_layout(
    machine: str,
    *,
    debian: bool,
    has_usr_lib32: bool,
    has_usr_lib: bool,
    usr_lib_is_lib64: bool,
    cuda_compat_libs: tuple[str, ...] = (),
) -> ContainerLayout:
    """libnvc-spec §2.2 target directories from facts about the rootfs (pure).

    Difference: aarch64's libs_dir has no trailing slash (libnvc keeps one).
    """
    if machine not in DEBIAN_DIRS:
        raise ContainerError(
            f"choose library directories: unsupported architecture {machine!r} "
            f"(supported: {', '.join(DEBIAN_DIRS)})"
        )
    if debian:
        libs, libs32 = DEBIAN_DIRS[machine]
    else:
        libs = "/usr/lib64"
        if has_usr_lib32 or not has_usr_lib or usr_lib_is_lib64:
            libs32 = "/usr/lib32"
        else:
            libs32 = "/usr/lib"
    return ContainerLayout("/usr/bin", libs, libs32, cuda_compat_libs)


def is_compat_lib_name(name: str) -> bool:
    """Whether a directory entry name matches the compat glob `lib*.so.*`."""
    return name.startswith("lib") and name.find(".so.", 3) >= 0  # fnmatch "lib*.so.*"


# -- reads --------------------------------------------------------------------------------
COMPAT_DIR = "/usr/local/cuda/compat"
MAX_COMPAT_ENTRIES = 4096


def detect_layout(root: Root, machine: str | None = None) -> ContainerLayout:
    """Read the facts `choose_layout` needs from `root` and the CUDA compat libs list.

    Compat libs: /usr/local/cuda/compat/lib*.so.*, each resolved inside the root; only
    regular files count; the result is their resolved container paths, deduplicated, sorted.
    """
    return choose_layout(
        machine or os.uname().machine,
        debian=root.exists("/etc/debian_version"),
        has_usr_lib32=_is_dir(root, "/usr/lib32"),
        has_usr_lib=_is_dir(root, "/usr/lib"),
        usr_lib_is_lib64=_same_file(root, "/usr/lib", "/usr/lib64"),
        cuda_compat_libs=find_compat_libs(root),
    )


def find_compat_libs(root: Root) -> tuple[str, ...]:
    """Resolved container paths of the regular files matching the compat glob."""
    try:
        dfd = root.open_path(COMPAT_DIR, os.O_RDONLY | os.O_DIRECTORY)
    except PathError:
        return ()
    try:
        names = sorted(n for n in _first_names(dfd, MAX_COMPAT_ENTRIES) if is_compat_lib_name(n))
    finally:
        os.close(dfd)
    found: set[str] = set()
    for name in names:
        try:
            fd = root.open_path(f"{COMPAT_DIR}/{name}", os.O_PATH)
        except PathError as err:
            log.info("skip compat lib %s/%s: %s", COMPAT_DIR, name, err)
            continue
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                found.add(root.real_path(fd))
            else:
                log.info("skip compat lib %s/%s: not a regular file", COMPAT_DIR, name)
        finally:
            os.close(fd)
    return tuple(sorted(found))


def _first_names(dfd: int, limit: int) -> list[str]:
    """The names of the first `limit` entries of directory `dfd`: a huge image directory is
    not read to the end (os.listdir would list all of it before any cut)."""
    names: list[str] = []
    with os.scandir(dfd) as entries:
        for entry in entries:
            if len(names) >= limit:
                log.info("compat dir %s has more than %d entries: the rest is ignored",
                         COMPAT_DIR, limit)
                break
            names.append(entry.name)
    return names


def _is_dir(root: Root, path: str) -> bool:
    st = _stat(root, path)
    return st is not None and stat.S_ISDIR(st.st_mode)


def _same_file(root: Root, a: str, b: str) -> bool:
    sa, sb = _stat(root, a), _stat(root, b)
    return sa is not None and sb is not None and (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _stat(root: Root, path: str) -> os.stat_result | None:
    try:
        fd = root.open_path(path, os.O_PATH)
    except PathError:
        return None
    try:
        return os.fstat(fd)
    finally:
        os.close(fd)

