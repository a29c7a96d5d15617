"""The ldconfig sandbox: the forked side of `nvmount.ldcache.ldconfig.run_ldconfig`.

Stage: ldcache. Runs only in forked children of the hook; touches the container's mount
namespace (a private copy of it), its cgroups (by joining them) and, as the container owner,
the container rootfs: the SONAME links ldconfig makes and the /etc/ld.so.cache we install.

Three processes (the hook is single-threaded, so fork is safe; no threads, no subprocess):
  keeper (A): join the container's cgroups (every hierarchy: memory, pids, cpu, devices...;
    the hook opened their cgroup.procs), so everything below runs under the container's
    limits; setns into the container mount namespace; unshare new mount, pid, ipc, uts and
    net namespaces; fork the worker; wait for it; report its wait status.
  worker (B, pid 1 of the new pid namespace, dies with A via PR_SET_PDEATHSIG), as root:
    1. the view (`nvmount.ldcache.view`): a private recursive clone of the rootfs, made
       nodev,nosuid,noexec, becomes / (pivot_root, old root detached); a writable scratch
       tmpfs over /proc, empty read-only tmpfs over /sys and /dev, a tmpfs over the aux-cache
       directory;
    2. drop to the container owner: securebits, empty bounding set, setgroups, setresgid,
       setresuid, no capabilities left, no_new_privs (`privileges.drop_for_exec`);
    3. as that user: skip musl images and images without /etc; read /etc/ld.so.conf and its
       includes with budgets and write our own conf to the scratch (`nvmount.ldcache.ldconf`);
       look at the library directories (a symlink to a FIFO there: ldconfig is not run);
    4. fork ldconfig (C): rlimits (CPU, AS, DATA, NOFILE, FSIZE, NPROC, no core), default
       signal dispositions (SIGXFSZ ignored: a write over the limit fails with EFBIG), fds
       0-2 only (stdin: the host /dev/null opened before forking), the seccomp deny-list
       without fork (`nvmount.ldcache.seccomp`), an empty environment; fexecve the sealed
       memfd copy of the host ldconfig with `-i -f <scratch>/ld.so.conf -C
       <scratch>/ld.so.cache <dirs>`: it reads only our conf and the library directories and
       writes only the scratch, the aux-cache tmpfs and SONAME links (symlink/unlink, no open);
    5. wait for C; when it exited 0, install the cache (`nvmount.ldcache.install`: checked,
       temp file + rename into the image's /etc, nothing of the image opened).
Everything is reported as "<kind>\\t<text>" lines on the status pipe.

Seccomp is a hand-built deny-list (no libseccomp binding is installed), not NVIDIA's
allow-list, which broke with new glibc releases (painpoints §3): see `nvmount.ldcache.seccomp`.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import resource
import signal

from nvmount import _bpf as B
from nvmount import _libc as L
from nvmount import privileges
from nvmount.errors import strerror
from nvmount.ldcache import prepare, view
from nvmount.records import record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from typing import NoReturn

    from nvmount._libc import Libc

_NAMESPACES = L.CLONE_NEWNS | L.CLONE_NEWPID | L.CLONE_NEWIPC | L.CLONE_NEWUTS | L.CLONE_NEWNET


@record
class SandboxLimits:
    """Resource limits of the ldconfig process (on top of the container's cgroups)."""

    cpu_seconds: int = 10
    address_space: int = 2 << 30  # ldconfig maps whole libraries (CUDA's are ~1 GiB)
    data: int = 256 << 20  # heap and private memory: an endless conf line stops here
    open_files: int = 64
    file_size: int = 64 << 20  # NVIDIA's 1 MiB kills ldconfig on big caches (SIGXFSZ)
    processes: int = 1  # RLIMIT_NPROC: ldconfig starts none


@record
class SandboxSpec:
    """Everything the sandbox children need, fixed before the fork."""

    mntns_fd: int  # the container's mount namespace
    rootfs: str  # the rootfs path inside that namespace
    exec_fd: int  # sealed memfd of the host binary
    path: str  # the host path of the binary (argv[0])
    dirs: tuple[str, ...]  # container directories for ldconfig's command line
    uid: int
    gid: int
    stdin_fd: int  # the host /dev/null
    out_fd: int  # write end of the output pipe (stdout and stderr)
    status_fd: int  # write end of the status pipe
    limits: SandboxLimits
    seccomp: bytes | None = None  # nvmount.ldcache.seccomp.denylist_program(); None: no filter
    cgroup_fds: tuple[tuple[str, int], ...] = ()  # (cgroup dir, fd of its cgroup.procs)


class _Stop(Exception):
    """Leave a process with a status line (kind, text) and an exit code."""

    def __init__(self, kind: str, text: str, code: int = 0) -> None:
        super().__init__(text)
        self.kind, self.text, self.code = kind, text, code


def report(fd: int, kind: str, text: str) -> None:
    """One "<kind>\\t<text>" line on the status pipe (whitespace, newlines included, folded)."""
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
        _join_cgroups(spec)
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
        report(spec.status_fd, "pid", str(worker))  # the hook kills it directly on timeout
        os.close(spec.out_fd)
        _, status = os.waitpid(worker, 0)
        report(spec.status_fd, "exit", str(status))
        code = 0
    except _Stop as stop:
        report(spec.status_fd, stop.kind, stop.text)
    except BaseException as exc:  # never unwind into the hook's code in a forked child
        report(spec.status_fd, "error", f"sandbox keeper: {exc!r}")
    os._exit(code)


def _join_cgroups(spec: SandboxSpec) -> None:
    """Move the keeper (and so all it starts) into the container's cgroups."""
    me = str(os.getpid()).encode()
    for path, fd in spec.cgroup_fds:
        try:
            os.write(fd, me)
        except OSError as err:
            raise _step_error(f"join the container's cgroup {path}", err) from err
        os.close(fd)


def _pdeathsig() -> None:
    """Die with SIGKILL when the parent exits (cleared by fork and credential changes)."""
    p = importlib.import_module("_prctl")
    p.prctl(p.PR_SET_PDEATHSIG, signal.SIGKILL)


def _worker(spec: SandboxSpec, libc: Libc) -> NoReturn:
    """The worker (B): pid 1 of the new pid namespace. Never returns."""
    code = 1
    try:
        _pdeathsig()
        scratch = _build_view(spec, libc)
        try:
            for warning in privileges.drop_for_exec(spec.uid, spec.gid):
                report(spec.status_fd, "warn", warning)
        except OSError as err:
            raise _step_error(f"drop privileges to {spec.uid}:{spec.gid}", err) from err
        _pdeathsig()  # a credential change clears it
        argv, notes = prepare.prepare(spec.path, spec.dirs, libc, scratch)
        for note in notes:
            report(spec.status_fd, "note", note)
        status = _run_ldconfig(spec, libc, argv)
        report(spec.status_fd, "ldconfig", str(status))
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            report(spec.status_fd, "installed", str(prepare.install(libc, scratch)))
        code = 0
    except prepare.Stop as stop:
        report(spec.status_fd, stop.kind, stop.text)
        code = 0
    except _Stop as stop:
        report(spec.status_fd, stop.kind, stop.text)
        code = stop.code
    except BaseException as exc:
        report(spec.status_fd, "error", f"sandbox worker: {exc!r}")
    os._exit(code)


def _build_view(spec: SandboxSpec, libc: Libc) -> str:
    """Step 1 (as root): the view; returns the scratch directory."""
    try:
        view.enter_rootfs(spec.rootfs, libc)
        scratch = view.mount_scratch(libc, spec.uid, spec.gid, spec.limits.file_size + (1 << 20))
        view.mask_dirs(libc, skip=scratch)
        view.mask_aux_cache(libc, spec.uid, spec.gid)
    except view.ViewError as err:
        raise _step_error(err.step, err.err) from err
    return scratch


def _run_ldconfig(spec: SandboxSpec, libc: Libc, argv: list[str]) -> int:
    """Step 4: fork ldconfig (C) and wait for it; its wait status."""
    child = os.fork()
    if child == 0:
        code = 127
        try:
            _exec(spec, libc, argv)
        except _Stop as stop:
            report(spec.status_fd, stop.kind, stop.text)
        except BaseException as exc:
            report(spec.status_fd, "error", f"sandbox ldconfig: {exc!r}")
        os._exit(code)
    os.close(spec.out_fd)  # ldconfig holds the only write end now: EOF when it exits
    _, status = os.waitpid(child, 0)
    return status


def _exec(spec: SandboxSpec, libc: Libc, argv: list[str]) -> NoReturn:
    """Limits, fds 0-2 only, seccomp, empty environment, fexecve the sealed copy."""
    lim = spec.limits
    for res, value in ((resource.RLIMIT_CPU, lim.cpu_seconds),
                       (resource.RLIMIT_AS, lim.address_space),
                       (resource.RLIMIT_DATA, lim.data),
                       (resource.RLIMIT_NOFILE, lim.open_files),
                       (resource.RLIMIT_FSIZE, lim.file_size),
                       (resource.RLIMIT_NPROC, lim.processes),
                       (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(res, (value, value))
    for sig in (signal.SIGPIPE, signal.SIGXCPU):  # python ignores some
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # over the size limit: EFBIG, not a crash
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
        report(spec.status_fd, "warn", f"no seccomp filter for {os.uname().machine}")
    else:
        try:
            B.seccomp_set_filter(libc, spec.seccomp)
        except OSError as err:
            raise _step_error("install the seccomp filter", err) from err
    try:
        os.execve(spec.exec_fd, argv, {})
    except OSError as err:
        raise _step_error(f"execute {spec.path}", err) from err
    raise AssertionError("unreachable")
