"""Records describing the target container: what `container.inspect_container` returns."""

from __future__ import annotations

from nvmount.records import record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount.cgroup.common import CgroupTarget


@record
class ContainerLayout:
    """Where files land in this rootfs (libnvc-spec §2.2), detected from the rootfs."""

    bins_dir: str  # "/usr/bin"
    libs_dir: str  # "/usr/lib/x86_64-linux-gnu" (Debian family) or "/usr/lib64"
    libs32_dir: str  # "/usr/lib/i386-linux-gnu" or "/usr/lib32" / "/usr/lib"
    cuda_compat_libs: tuple[str, ...] = ()  # container paths of /usr/local/cuda/compat/lib*.so.*


@record
class Container:
    """The container as the engine found it from its pid."""

    pid: int
    rootfs: str  # host path of the rootfs as given (absolute, lexically clean)
    uid: int  # owner of /proc/<pid> (the container's root on the host)
    gid: int
    mntns: tuple[int, int]  # (st_dev, st_ino) of /proc/<pid>/ns/mnt
    cgroup: CgroupTarget | None  # None when cgroups are not to be touched
    in_userns: bool
    layout: ContainerLayout
