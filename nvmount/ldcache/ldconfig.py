"""The container's ldcache: run the HOST ldconfig for the container, sandboxed (libnvc-spec §3).

Stage: ldcache (after apply). Touches: the host ldconfig binary (read once into a sealed memfd)
and, through a forked child only, the container: ldconfig itself writes /etc/ld.so.cache and
the SONAME links, as the container owner, inside a sandbox (see `nvmount.ldcache.sandbox`).

Flow of `run_ldconfig`, in the hook process (host mount namespace, single-threaded):
1. copy the host ldconfig into a memfd sealed against writes (CVE-2024-0135: the running
   helper's /proc/<pid>/exe is an immutable copy, never the host inode); refuse a dynamically
   linked ldconfig (its interpreter and libc would be loaded from the image);
2. open the host /dev/null for stdin, a pipe for stdout+stderr, a status pipe and the
   cgroup.procs files of the container's cgroups (the sandbox joins them);
3. fork the sandbox (see the sandbox module for its steps) and supervise it with a pidfd and
   poll(2): drain the output (bounded), kill it at the wall-clock timeout;
4. turn what happened into an `LdconfigResult`; the caller decides whether a failure fails
   the start (`[nvhook] ldconfig-required`).

ldconfig never opens a device, FIFO or socket of the image: its view is nodev, it reads only
a configuration we write (the image's, parsed with budgets: `nvmount.ldcache.ldconf`) and
the library directories (checked for symlinks to FIFOs first), and writes only to tmpfs
mounts of the sandbox; the cache is installed into the image by rename
(`nvmount.ldcache.install`). Left: a process outside the container that shares a library
directory with it (a sibling container's volume) can swap a FIFO in after the check; the
wall-clock timeout bounds that stall.

Deviation from NVIDIA: a container ldconfig (a value without '@') is always refused, even with
`features.allow-ldconfig-from-container`: we never execute code from the image.
"""

from __future__ import annotations

import errno
import fcntl
import importlib
import os
import signal
import stat
import struct
import time

from nvmount import _libc as L
from nvmount.errors import CgroupError, LdcacheError, strerror
from nvmount.ldcache.sandbox import SandboxLimits, SandboxSpec, run_sandbox
from nvmount.ldcache.seccomp import denylist_program
from nvmount.ldcache.supervise import Supervised, supervise
from nvmount.log import get_logger
from nvmount.records import record, replace

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Sequence

    from nvmount._libc import Libc
    from nvmount.container.cgroup import CgroupTarget

log = get_logger(__name__)

MFD_EXEC = 0x10  # linux/memfd.h (6.3+): executable even when vm.memfd_noexec = 1
_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
_PT_INTERP = 3

_SIGNAL_HINTS: dict[int, str] = {
    signal.SIGKILL: "killed: cpu time limit reached?",
    signal.SIGXCPU: "cpu time limit",
    signal.SIGXFSZ: "file size limit",
    signal.SIGSYS: "blocked system call",
    signal.SIGSEGV: "crashed",
}


@record
class LdconfigResult:
    """What happened to one ldconfig run.

    ran: ldconfig was executed; ok: it exited 0 and its cache was installed, or it was
    skipped for a benign reason (musl image, no /etc); reason: why it did not run ("" when it
    ran); warning: what went wrong, for the log ("" when ok); output: its stdout+stderr lines
    (bounded); notes: what the sandbox skipped on the way (an include that is a FIFO...).
    """

    ran: bool
    ok: bool
    reason: str = ""
    warning: str = ""
    exit_code: int | None = None
    signal: int | None = None
    duration: float = 0.0
    output: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def _elf_interp(fd: int) -> bool | None:
    """True if the ELF at `fd` has a PT_INTERP header, False if not, None if not ELF."""
    ident = os.pread(fd, 64, 0)
    if len(ident) < 52 or ident[:4] != b"\x7fELF":
        return None
    end = "<" if ident[5] == 1 else ">"
    if ident[4] == 2:  # ELFCLASS64
        phoff, = struct.unpack_from(end + "Q", ident, 32)
        phentsize, phnum = struct.unpack_from(end + "HH", ident, 54)
    else:
        phoff, = struct.unpack_from(end + "I", ident, 28)
        phentsize, phnum = struct.unpack_from(end + "HH", ident, 42)
    table = os.pread(fd, phentsize * phnum, phoff)
    for i in range(min(phnum, len(table) // max(phentsize, 1))):
        ptype, = struct.unpack_from(end + "I", table, i * phentsize)
        if ptype == _PT_INTERP:
            return True
    return False


def seal_binary(path: str) -> int:
    """Copy the host executable `path` into a sealed memfd and return its fd (CLOEXEC).

    Raises FileNotFoundError when `path` is missing and LdcacheError when it is no static ELF
    executable or cannot be copied.
    """
    src = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        st = os.fstat(src)
        if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o111:
            raise LdcacheError(f"use host ldconfig {path}: not an executable regular file")
        interp = _elf_interp(src)
        if interp is None or interp:
            what = "not an ELF binary (a script?)" if interp is None else "dynamically linked"
            raise LdcacheError(
                f"use host ldconfig {path}: {what}: it would load code from the container "
                "image (point nvidia-container-cli.ldconfig at the static binary, e.g. "
                "\"@/sbin/ldconfig.real\")"
            )
        return _copy_sealed(src, st.st_size, path)
    finally:
        os.close(src)


def _copy_sealed(src: int, size: int, path: str) -> int:
    flags = os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING
    try:
        mfd = os.memfd_create("nvhook-ldconfig", flags | MFD_EXEC)
    except OSError as err:
        if err.errno != errno.EINVAL:  # kernels before 6.3 do not know MFD_EXEC
            raise
        mfd = os.memfd_create("nvhook-ldconfig", flags)
    try:
        offset = 0
        while offset < size:
            sent = os.sendfile(mfd, src, offset, size - offset)
            if sent == 0:
                raise LdcacheError(f"copy host ldconfig {path}: file shrank while copying")
            offset += sent
        fcntl.fcntl(mfd, fcntl.F_ADD_SEALS, _SEALS)
    except BaseException:
        os.close(mfd)
        raise
    return mfd


def _check_dirs(dirs: Sequence[str]) -> tuple[str, ...]:
    for d in dirs:
        if not d.startswith("/") or "\0" in d or "\n" in d:
            raise LdcacheError(f"run ldconfig: directory {d!r} is not an absolute container path")
    return tuple(dirs)


def run_ldconfig(
    *,
    mntns_fd: int,
    rootfs: str,
    dirs: Sequence[str],
    ldconfig_path: str,
    uid: int,
    gid: int,
    timeout: float = 10.0,
    libc: Libc,
    limits: SandboxLimits | None = None,
    cgroups: Sequence[CgroupTarget] = (),
) -> LdconfigResult:
    """Run the host `ldconfig_path` for the container rooted at `rootfs` (see the module doc).

    `mntns_fd` is an open fd of the container's mount namespace, `rootfs` the rootfs path as
    seen inside it, `dirs` the container directories to add (libs, libs32, CUDA compat),
    `uid:gid` the container owner, `cgroups` the container's cgroup directories (all
    hierarchies; the sandbox joins them). Returns what happened; raises LdcacheError only
    for bad arguments or a host ldconfig that must not be run.
    """
    dirs = _check_dirs(dirs)
    start = time.monotonic()
    try:
        exec_fd = seal_binary(ldconfig_path)
    except OSError as err:  # LdcacheError (must not be run) propagates
        why = "not found" if isinstance(err, FileNotFoundError) else err.strerror or str(err)
        return LdconfigResult(ran=False, ok=False, reason=f"{ldconfig_path} {why}",
                              warning=f"run ldconfig: host {ldconfig_path}: {why.lower()} "
                              "(install it or set nvidia-container-cli.ldconfig)")
    log.debug("executing %s from host at %s", ldconfig_path, rootfs)
    spec = SandboxSpec(mntns_fd=mntns_fd, rootfs=rootfs, exec_fd=exec_fd, path=ldconfig_path,
                       dirs=dirs, uid=uid, gid=gid, stdin_fd=-1, out_fd=-1, status_fd=-1,
                       limits=limits or SandboxLimits(),
                       seccomp=denylist_program(os.uname().machine, allow_fork=False))
    try:
        spec = replace(spec, cgroup_fds=_open_cgroup_procs(cgroups, libc))
        sup = _run_sandbox(spec, start + timeout, libc)
    except (OSError, CgroupError) as err:
        why = err.strerror or str(err) if isinstance(err, OSError) else str(err)
        return LdconfigResult(ran=False, ok=False, reason=why,
                              duration=time.monotonic() - start,
                              warning=f"start the ldconfig sandbox: {why}")
    finally:
        os.close(exec_fd)
        for _, fd in spec.cgroup_fds:
            os.close(fd)
    result = _interpret(sup, ldconfig_path, timeout, time.monotonic() - start)
    log.debug("ldconfig: %s", result)
    return result


def _open_cgroup_procs(cgroups: Sequence[CgroupTarget], libc: Libc
                       ) -> tuple[tuple[str, int], ...]:
    """(cgroup dir, O_WRONLY fd of its cgroup.procs) for each cgroup (checked to be on a
    cgroup filesystem, opened without magic links); the sandbox's keeper writes its pid."""
    from nvmount.cgroup.common import open_cgroup_dir

    opened: list[tuple[str, int]] = []
    try:
        for target in cgroups:
            magic = L.CGROUP_SUPER_MAGIC if target.version == 1 else L.CGROUP2_SUPER_MAGIC
            dfd = open_cgroup_dir(target.path, libc, os.O_PATH, magic, target.version)
            try:
                fd = os.open("cgroup.procs", os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW,
                             dir_fd=dfd)
            except OSError as err:
                raise CgroupError(f"open {target.path}/cgroup.procs: {strerror(err)} (the "
                                  "ldconfig sandbox must run in the container's cgroups)"
                                  ) from err
            finally:
                os.close(dfd)
            opened.append((target.path, fd))
    except BaseException:
        for _, fd in opened:
            os.close(fd)
        raise
    return tuple(opened)


def _run_sandbox(spec: SandboxSpec, deadline: float, libc: Libc) -> Supervised:
    """Open stdin and the pipes, fork the sandbox and supervise it; closes what it opened."""
    fds: list[int] = []
    try:
        devnull = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
        fds.append(devnull)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        fds += [out_r, out_w]
        status_r, status_w = os.pipe2(os.O_CLOEXEC)
        fds += [status_r, status_w]
        for fd in (out_r, status_r):
            os.set_blocking(fd, False)
        importlib.import_module("_prctl")  # once here, not in every child
        spec = replace(spec, stdin_fd=devnull, out_fd=out_w, status_fd=status_w)
        pid = os.fork()
        if pid == 0:
            run_sandbox(spec, libc)  # never returns
        for fd in (out_w, status_w, devnull):
            os.close(fd)
            fds.remove(fd)
        return supervise(pid, out_r, status_r, deadline, libc)
    finally:
        for fd in fds:
            os.close(fd)


def _interpret(sup: Supervised, path: str, timeout: float, duration: float) -> LdconfigResult:
    lines = tuple(sup.output.decode("utf-8", "replace").splitlines())
    said: dict[str, str] = {}
    notes: list[str] = []
    for line in sup.status.decode("utf-8", "replace").splitlines():
        kind, _, text = line.partition("\t")
        said.setdefault(kind, text)
        if kind == "warn":
            log.debug("ldconfig sandbox: %s", text)
        elif kind == "note":
            notes.append(text)
    result = _outcome(said, sup.timed_out, path, timeout, lines)
    return replace(result, duration=duration, notes=tuple(notes))


def _outcome(said: dict[str, str], timed_out: bool, path: str, timeout: float,
             lines: tuple[str, ...]) -> LdconfigResult:
    if timed_out:
        return LdconfigResult(ran=True, ok=False, signal=signal.SIGKILL, output=lines,
                              reason="timeout",
                              warning=f"ldconfig {path} timed out after {timeout:g} s (killed)")
    if "error" in said:
        return LdconfigResult(ran=False, ok=False, reason=said["error"], output=lines,
                              warning=f"ldconfig sandbox: {said['error']}")
    if "skip" in said:
        return LdconfigResult(ran=False, ok=True, reason=said["skip"], output=lines)
    if "refuse" in said:
        return LdconfigResult(ran=False, ok=False, reason=said["refuse"], output=lines,
                              warning=f"ldconfig not run: {said['refuse']}")
    status = said.get("ldconfig", said.get("exit", ""))
    if not status.isdigit():
        return LdconfigResult(ran=False, ok=False, output=lines,
                              warning="ldconfig sandbox: exited without reporting a status")
    result = _from_wait_status(int(status), path, 0.0, lines)
    if "ldconfig" in said and result.ok and "installed" not in said:
        why = said.get("install-error", "the sandbox stopped before installing the cache")
        return replace(result, ok=False, warning=f"ldconfig {path}: {why}")
    return result


def _from_wait_status(st: int, path: str, duration: float, lines: tuple[str, ...]
                      ) -> LdconfigResult:
    if os.WIFSIGNALED(st):
        sig = os.WTERMSIG(st)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = "unknown signal"
        hint = _SIGNAL_HINTS.get(sig, name)
        return LdconfigResult(ran=True, ok=False, signal=sig, duration=duration, output=lines,
                              warning=f"ldconfig {path} terminated with signal {sig} ({hint})")
    code = os.WEXITSTATUS(st)
    if code == 0:
        return LdconfigResult(ran=True, ok=True, exit_code=0, duration=duration, output=lines)
    last = f": {lines[-1]}" if lines else ""
    return LdconfigResult(ran=True, ok=False, exit_code=code, duration=duration, output=lines,
                          warning=f"ldconfig {path} failed with exit code {code}{last}")
