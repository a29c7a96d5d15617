"""The container's ldcache: run the HOST ldconfig for the container, sandboxed (libnvc-spec §3).

Stage: ldcache (after apply). Touches: the host ldconfig binary (read once into a sealed memfd)
and, through a forked child only, the container: ldconfig itself writes /etc/ld.so.cache and
the SONAME links, as the container owner, inside a sandbox (see `nvmount.ldcache.sandbox`).

Flow of `run_ldconfig`, in the hook process (host mount namespace, single-threaded):
1. copy the host ldconfig into a memfd sealed against writes (CVE-2024-0135: the running
   helper's /proc/<pid>/exe is an immutable copy, never the host inode); refuse a dynamically
   linked ldconfig (its interpreter and libc would be loaded from the image);
2. open the host /dev/null for stdin, a pipe for stdout+stderr and a status pipe;
3. fork the sandbox (see the sandbox module for its steps) and supervise it with a pidfd and
   poll(2): drain the output (bounded), kill it at the wall-clock timeout;
4. turn what happened into an `LdconfigResult`; the caller decides whether a failure fails
   the start (`[nvhook] ldconfig-required`).

Deviation from NVIDIA: a container ldconfig (a value without '@') is always refused, even with
`features.allow-ldconfig-from-container`: we never execute code from the image.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import importlib
import os
import select
import signal
import stat
import struct
import time

from nvmount.errors import LdcacheError
from nvmount.ldcache.sandbox import SandboxLimits, SandboxSpec, run_sandbox
from nvmount.ldcache.seccomp import denylist_program
from nvmount.log import get_logger
from nvmount.records import mutable_record, record, replace

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Sequence

    from nvmount._libc import Libc

log = get_logger(__name__)

LDCONFIG_OPTIONS = ("-f", "/etc/ld.so.conf", "-C", "/etc/ld.so.cache")
MAX_OUTPUT = 64 * 1024  # bytes of ldconfig output kept; the rest is drained and dropped
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

    ran: ldconfig was executed; ok: it exited 0 or was skipped for a benign reason (musl
    image, no /etc); reason: why it did not run ("" when it ran); warning: what went wrong,
    for the log ("" when ok); output: its stdout+stderr lines (bounded).
    """

    ran: bool
    ok: bool
    reason: str = ""
    warning: str = ""
    exit_code: int | None = None
    signal: int | None = None
    duration: float = 0.0
    output: tuple[str, ...] = ()


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
) -> LdconfigResult:
    """Run the host `ldconfig_path` for the container rooted at `rootfs` (see the module doc).

    `mntns_fd` is an open fd of the container's mount namespace, `rootfs` the rootfs path as
    seen inside it, `dirs` the container directories to add (libs, libs32, CUDA compat),
    `uid:gid` the container owner. Returns what happened; raises LdcacheError only for bad
    arguments or a host ldconfig that must not be run.
    """
    argv = (ldconfig_path, *LDCONFIG_OPTIONS, *_check_dirs(dirs))
    start = time.monotonic()
    try:
        exec_fd = seal_binary(ldconfig_path)
    except OSError as err:  # LdcacheError (must not be run) propagates
        why = "not found" if isinstance(err, FileNotFoundError) else err.strerror or str(err)
        return LdconfigResult(ran=False, ok=False, reason=f"{ldconfig_path} {why}",
                              warning=f"run ldconfig: host {ldconfig_path}: {why.lower()} "
                              "(install it or set nvidia-container-cli.ldconfig)")
    log.debug("executing %s from host at %s", ldconfig_path, rootfs)
    spec = SandboxSpec(mntns_fd=mntns_fd, rootfs=rootfs, exec_fd=exec_fd, argv=argv, uid=uid,
                       gid=gid, stdin_fd=-1, out_fd=-1, status_fd=-1,
                       limits=limits or SandboxLimits(),
                       seccomp=denylist_program(os.uname().machine))
    try:
        sup = _run_sandbox(spec, start + timeout, libc)
    except OSError as err:
        return LdconfigResult(ran=False, ok=False, reason=str(err),
                              duration=time.monotonic() - start,
                              warning=f"start the ldconfig sandbox: {err.strerror or err}")
    finally:
        os.close(exec_fd)
    result = _interpret(sup, ldconfig_path, timeout, time.monotonic() - start)
    log.debug("ldconfig: %s", result)
    return result


def _run_sandbox(spec: SandboxSpec, deadline: float, libc: Libc) -> _Supervised:
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
        return _supervise(pid, out_r, status_r, deadline, libc)
    finally:
        for fd in fds:
            os.close(fd)


@mutable_record
class _Supervised:
    """What the supervisor saw of the sandbox: exit, timeout, output, status."""

    wait_status: int | None = None
    timed_out: bool = False
    output: bytes = b""
    status: bytes = b""


def _supervise(pid: int, out_r: int, status_r: int, deadline: float, libc: Libc) -> _Supervised:
    """Wait for the sandbox, draining its pipes, killing it at `deadline` (no threads)."""
    sup = _Supervised()
    pidfd = os.pidfd_open(pid)
    try:
        poller = select.poll()
        open_fds = {out_r, status_r, pidfd}
        for fd in open_fds:
            poller.register(fd, select.POLLIN)
        while open_fds:
            remaining = deadline - time.monotonic()
            if remaining <= 0 and pidfd in open_fds and not sup.timed_out:
                _drain(status_r, sup, False)  # the worker's pid, if not read yet
                _kill(sup, pidfd, libc)
                sup.timed_out = True
                deadline = time.monotonic() + 1.0  # grace to collect what is left
                continue
            if remaining <= 0:
                break  # pipes held open past the grace time: give up on them
            for fd, _ in poller.poll(remaining * 1000):
                if fd == pidfd:
                    _, sup.wait_status = os.waitpid(pid, 0)
                elif _drain(fd, sup, fd == out_r):
                    continue
                poller.unregister(fd)
                open_fds.discard(fd)
    finally:
        if sup.wait_status is None:  # interrupted: never leave it running
            _kill(sup, pidfd, libc)
            _, sup.wait_status = os.waitpid(pid, 0)
        os.close(pidfd)
    return sup


def _kill(sup: _Supervised, pidfd: int, libc: Libc) -> None:
    """Kill the worker (its pid is reserved while the unreaped keeper lives), then the keeper."""
    for line in sup.status.decode("utf-8", "replace").splitlines():
        kind, _, text = line.partition("\t")
        if kind == "pid" and text.isdigit():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(text), signal.SIGKILL)  # pid 1 of its namespace: all of it dies
    with contextlib.suppress(ProcessLookupError):
        libc.pidfd_send_signal(pidfd, signal.SIGKILL)


def _drain(fd: int, sup: _Supervised, is_output: bool) -> bool:
    """Read what the non-blocking `fd` has (bounded); False at EOF."""
    try:
        data = os.read(fd, 65536)
    except BlockingIOError:
        return True
    if not data:
        return False
    if is_output:
        sup.output += data[: max(0, MAX_OUTPUT - len(sup.output))]
    else:
        sup.status += data[: max(0, MAX_OUTPUT - len(sup.status))]
    return True


def _interpret(sup: _Supervised, path: str, timeout: float, duration: float) -> LdconfigResult:
    lines = tuple(sup.output.decode("utf-8", "replace").splitlines())
    said: dict[str, str] = {}
    for line in sup.status.decode("utf-8", "replace").splitlines():
        kind, _, text = line.partition("\t")
        said.setdefault(kind, text)
        if kind == "warn":
            log.debug("ldconfig sandbox: %s", text)
    if sup.timed_out:
        return LdconfigResult(ran=True, ok=False, signal=signal.SIGKILL, duration=duration,
                              output=lines, reason="timeout",
                              warning=f"ldconfig {path} timed out after {timeout:g} s (killed)")
    if "error" in said:
        return LdconfigResult(ran=False, ok=False, reason=said["error"], duration=duration,
                              output=lines, warning=f"ldconfig sandbox: {said['error']}")
    if "skip" in said:
        return LdconfigResult(ran=False, ok=True, reason=said["skip"], duration=duration,
                              output=lines)
    if "refuse" in said:
        return LdconfigResult(ran=False, ok=False, reason=said["refuse"], duration=duration,
                              output=lines, warning=f"ldconfig not run: {said['refuse']}")
    if "exit" not in said or not said["exit"].isdigit():
        return LdconfigResult(ran=False, ok=False, duration=duration, output=lines,
                              warning="ldconfig sandbox: exited without reporting a status")
    return _from_wait_status(int(said["exit"]), path, duration, lines)


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
