"""The ldconfig sandbox: the forked side of `nvmount.ldcache.ldconfig.run_ldconfig`.

Stage: ldcache. Runs only in forked children of the hook; touches the container's mount
namespace (a private copy of it) and, as the container owner, the container rootfs.

Two processes (the hook is single-threaded, so fork is safe; no threads, no subprocess):
  keeper (A): setns into the container mount namespace; unshare new mount, pid, ipc, uts and
    net namespaces; fork the worker; wait for it; report its wait status on the status pipe.
  worker (B, pid 1 of the new pid namespace, dies with A via PR_SET_PDEATHSIG):
    1. make / rprivate, clone the rootfs tree (open_tree, recursive) onto itself;
    2. pivot_root into it and detach the old root: nothing of the host is reachable by path;
    3. cover /proc, /sys and /dev with empty read-only tmpfs mounts (no procfs at all: the
       container's /proc/1/root would lead to the host root - CVE-2025-23267);
    4. drop to the container owner: securebits, empty bounding set, setgroups, setresgid,
       setresuid, no capabilities left, no_new_privs (`privileges.drop_for_exec`);
    5. preflight as that user: skip musl images and images without /etc, refuse an
       /etc/ld.so.conf (or ld.so.conf.d/*.conf) that is a FIFO, socket or device (ldconfig
       would block opening it);
    6. rlimits (CPU, AS, NOFILE, FSIZE, no core), default signal dispositions, fds 0-2 only
       (stdin: the host /dev/null opened before forking), the seccomp deny-list
       (`nvmount.ldcache.seccomp`), an empty environment;
    7. fexecve the sealed memfd copy of the host ldconfig.
Failures before exec are reported as one "<kind>\\t<text>" line on the status pipe.

Seccomp is a hand-built deny-list (no libseccomp binding is installed), not NVIDIA's
allow-list, which broke with new glibc releases (painpoints §3): see `nvmount.ldcache.seccomp`.

As pid 1 of its pid namespace the exec'd ldconfig does not receive signals it raises itself
with a default action: over RLIMIT_FSIZE a write fails with EFBIG (ldconfig reports "File too
large" and exits 1) instead of dying with SIGXFSZ. The CPU limit's SIGKILL still applies.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import resource
import signal
import stat

from nvmount import _bpf as B
from nvmount import _libc as L
from nvmount import privileges
from nvmount.errors import strerror
from nvmount.records import record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from typing import NoReturn

    from nvmount._libc import Libc

_NAMESPACES = L.CLONE_NEWNS | L.CLONE_NEWPID | L.CLONE_NEWIPC | L.CLONE_NEWUTS | L.CLONE_NEWNET
_MASKED_DIRS = ("proc", "sys", "dev")
_SPECIAL = {stat.S_IFIFO: "a fifo", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a device",
            stat.S_IFBLK: "a device"}


@record
class SandboxLimits:
    """Resource limits of the ldconfig process."""

    cpu_seconds: int = 10
    address_space: int = 2 << 30
    open_files: int = 64
    file_size: int = 128 << 20  # NVIDIA's 1 MiB kills ldconfig on big caches (SIGXFSZ)


@record
class SandboxSpec:
    """Everything the sandbox child needs, fixed before the fork."""

    mntns_fd: int  # the container's mount namespace
    rootfs: str  # the rootfs path inside that namespace
    exec_fd: int  # sealed memfd of the host binary
    argv: tuple[str, ...]
    uid: int
    gid: int
    stdin_fd: int  # the host /dev/null
    out_fd: int  # write end of the output pipe (stdout and stderr)
    status_fd: int  # write end of the status pipe
    limits: SandboxLimits
    seccomp: bytes | None = None  # nvmount.ldcache.seccomp.denylist_program(); None: no filter


class _Stop(Exception):
    """Leave the worker with a status line (kind, text) and an exit code."""

    def __init__(self, kind: str, text: str, code: int = 0) -> None:
        super().__init__(text)
        self.kind, self.text, self.code = kind, text, code


def _report(fd: int, kind: str, text: str) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, f"{kind}\t{' '.join(text.split())}\n".encode("utf-8", "replace"))


def _step_error(step: str, err: OSError) -> _Stop:
    cause = strerror(err)
    return _Stop("error", f"{step}: {cause.lower()} (errno {err.errno})", 1)


def run_sandbox(spec: SandboxSpec, libc: Libc) -> NoReturn:
    """The keeper (A). Called in the child right after fork; never returns."""
    code = 1
    try:
        _pdeathsig()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # an ignored SIGCHLD would auto-reap
        try:
            libc.setns(spec.mntns_fd, L.CLONE_NEWNS)
        except OSError as err:
            raise _step_error("enter the container mount namespace", err) from err
        try:
            libc.unshare(_NAMESPACES)
        except OSError as err:
            raise _step_error("unshare mount/pid/ipc/uts/net namespaces", err) from err
        worker = os.fork()
        if worker == 0:
            _worker(spec, libc)
        _report(spec.status_fd, "pid", str(worker))  # the hook kills it directly on timeout
        os.close(spec.out_fd)
        _, status = os.waitpid(worker, 0)
        _report(spec.status_fd, "exit", str(status))
        code = 0
    except _Stop as stop:
        _report(spec.status_fd, stop.kind, stop.text)
    except BaseException as exc:  # never unwind into the hook's code in a forked child
        _report(spec.status_fd, "error", f"sandbox keeper: {exc!r}")
    os._exit(code)


def _pdeathsig() -> None:
    """Die with SIGKILL when the parent exits (cleared by fork and credential changes)."""
    p = importlib.import_module("_prctl")
    p.prctl(p.PR_SET_PDEATHSIG, signal.SIGKILL)


def _worker(spec: SandboxSpec, libc: Libc) -> NoReturn:
    """The worker (B): pid 1 of the new pid namespace. Never returns."""
    code = 1
    try:
        _pdeathsig()
        _enter_rootfs(spec.rootfs, libc)
        _mask_dirs(libc)
        try:
            for warning in privileges.drop_for_exec(spec.uid, spec.gid):
                _report(spec.status_fd, "warn", warning)
        except OSError as err:
            raise _step_error(f"drop privileges to {spec.uid}:{spec.gid}", err) from err
        _pdeathsig()  # a credential change clears it
        _preflight()
        _exec(spec, libc)
    except _Stop as stop:
        _report(spec.status_fd, stop.kind, stop.text)
        code = stop.code
    except BaseException as exc:
        _report(spec.status_fd, "error", f"sandbox worker: {exc!r}")
    os._exit(code)


def _enter_rootfs(rootfs: str, libc: Libc) -> None:
    """Steps 1-2: a private recursive clone of the rootfs becomes /; the old root is gone."""
    step = "make / private"
    try:
        libc.mount(None, "/", None, L.MS_REC | L.MS_PRIVATE)
        step = f"open rootfs {rootfs}"
        root = os.open(rootfs, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        step = f"clone rootfs {rootfs}"
        tree = libc.open_tree(root, "", L.OPEN_TREE_CLONE | L.OPEN_TREE_CLOEXEC
                              | L.AT_RECURSIVE | L.AT_EMPTY_PATH)
        libc.move_mount(tree, "", root, "", L.MOVE_MOUNT_F_EMPTY_PATH | L.MOVE_MOUNT_T_EMPTY_PATH)
        step = f"pivot_root into {rootfs}"
        os.fchdir(tree)
        libc.pivot_root(".", ".")
        libc.umount2(".", L.MNT_DETACH)
        os.chdir("/")
        os.close(tree)
        os.close(root)
    except OSError as err:
        raise _step_error(step, err) from err


def _mask_dirs(libc: Libc) -> None:
    """Step 3: an empty read-only tmpfs over /proc, /sys, /dev (where they are directories)."""
    for name in _MASKED_DIRS:
        try:
            target = libc.openat2(L.AT_FDCWD, "/" + name, os.O_PATH | os.O_DIRECTORY,
                                  resolve=L.RESOLVE_IN_ROOT | L.RESOLVE_NO_SYMLINKS)
        except OSError as err:
            if err.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                continue  # absent, or a symlink: nothing is mounted there by us or runc
            raise _step_error(f"open /{name}", err) from err
        try:
            fs = libc.fsopen("tmpfs")
            libc.fsconfig(fs, L.FSCONFIG_SET_STRING, "size", "4k")
            libc.fsconfig(fs, L.FSCONFIG_SET_STRING, "mode", "0555")
            libc.fsconfig(fs, L.FSCONFIG_CMD_CREATE, None, None)
            mnt = libc.fsmount(fs, L.FSMOUNT_CLOEXEC, L.MOUNT_ATTR_RDONLY | L.MOUNT_ATTR_NOSUID
                               | L.MOUNT_ATTR_NODEV | L.MOUNT_ATTR_NOEXEC)
            libc.move_mount(mnt, "", target, "",
                            L.MOVE_MOUNT_F_EMPTY_PATH | L.MOVE_MOUNT_T_EMPTY_PATH)
            for fd in (fs, mnt, target):
                os.close(fd)
        except OSError as err:
            raise _step_error(f"mask /{name} with an empty tmpfs", err) from err


def _special(path: str) -> str | None:
    """'a fifo' etc. when `path` is a file type that can block an open, else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # missing or unreadable: ldconfig copes with that itself
    return _SPECIAL.get(stat.S_IFMT(mode))


def _preflight() -> None:
    """Step 5, as the container owner, inside the container root."""
    if not os.path.isdir("/etc"):
        raise _Stop("skip", "the image has no /etc directory")
    if not os.path.lexists("/etc/ld.so.conf") and _is_musl():
        raise _Stop("skip", "musl libc image: it has no ld.so.cache (the SONAME links suffice)")
    kind = _special("/etc/ld.so.conf")
    if kind:
        raise _Stop("refuse", f"/etc/ld.so.conf is {kind} (ldconfig would block reading it)")
    try:
        names = sorted(os.listdir("/etc/ld.so.conf.d"))
    except OSError:
        names = []
    for name in names:
        kind = _special("/etc/ld.so.conf.d/" + name) if name.endswith(".conf") else None
        if kind:
            raise _Stop("refuse", f"/etc/ld.so.conf.d/{name} is {kind} "
                        "(ldconfig would block reading it)")


def _is_musl() -> bool:
    try:
        return any(n.startswith("ld-musl-") for n in os.listdir("/lib"))
    except OSError:
        return False


def _exec(spec: SandboxSpec, libc: Libc) -> NoReturn:
    """Steps 6-7: limits, fds 0-2 only, seccomp, empty environment, fexecve the sealed copy."""
    lim = spec.limits
    for res, value in ((resource.RLIMIT_CPU, lim.cpu_seconds),
                       (resource.RLIMIT_AS, lim.address_space),
                       (resource.RLIMIT_NOFILE, lim.open_files),
                       (resource.RLIMIT_FSIZE, lim.file_size),
                       (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(res, (value, value))
    for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGXCPU):  # python ignores some
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    os.dup2(spec.stdin_fd, 0)
    os.dup2(spec.out_fd, 1)
    os.dup2(spec.out_fd, 2)
    keep = sorted({spec.exec_fd, spec.status_fd})  # both close-on-exec
    low = 3
    for fd in keep:
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)
    if spec.seccomp is None:
        _report(spec.status_fd, "warn", f"no seccomp filter for {os.uname().machine}")
    else:
        try:
            B.seccomp_set_filter(libc, spec.seccomp)
        except OSError as err:
            raise _step_error("install the seccomp filter", err) from err
    try:
        os.execve(spec.exec_fd, list(spec.argv), {})
    except OSError as err:
        raise _step_error(f"execute {spec.argv[0]}", err) from err
    raise AssertionError("unreachable")
