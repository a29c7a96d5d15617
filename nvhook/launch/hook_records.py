"""The record a group's first hook leaves for the hooks whose work it did
(`nvhook.compat.cdihook.batch`): where it lives, which container it names, its format. The
launcher's sh front (`nvhook.launch.cdihook_sh`) reads it and must agree with this
module: a test runs both. Stage: read (and the record's own files).

- It lives in root's private directory /run/nvhook/cdi-hooks (the host's /run: the hooks run
  in the container's mount namespace before pivot_root).
- `container_key`: `PID-START` of the container's first process as the host's procfs shows
  it - the topmost ancestor that shares this process's mount namespace (runc and crun run
  createContainer hooks as its children) and its start time, so a pid used again never
  finds an old record - and only in the host's view (`host_view`: "/" is the root of the
  runtime that made the container, as createContainer hooks see it before pivot_root; a
  startContainer hook's "/" is the image's, and no record is looked up there).
- One file `PID-START.NN` per later call (NN: 01, 02, ... in the list's order): the call's
  path and its arguments, one per line (`call_lines`); a call with a newline in a word is
  not recorded (it runs itself). The front empties the entry it matches; the next group's
  first hook of the same container, or the first hook of a later container, removes what is
  left (`batch.Record`).
"""

from __future__ import annotations

import posix

RECORD_PARENT, RECORD_NAME = "/run/nvhook", "cdi-hooks"  # nvmount.cachefile.DEFAULT_DIR
RECORD_DIR = f"{RECORD_PARENT}/{RECORD_NAME}"
MAX_DEPTH = 64  # ancestors looked at for the container's first process
_O_PATH = 0o10000000


def proc_stat(pid: int | str) -> tuple[int, int]:
    """(parent pid, start time in clock ticks) of `pid` from the host's procfs."""
    fd = posix.open(f"/proc/{pid}/stat", posix.O_RDONLY | posix.O_CLOEXEC)
    try:
        data = posix.read(fd, 4096)
    finally:
        posix.close(fd)
    fields = data[data.rindex(b")") + 2:].split()  # after the command name, which may hold
    return int(fields[1]), int(fields[19])           # anything: state ppid ... starttime


def container_key() -> str | None:
    """`PID-START` of the container's first process (see the module docstring); None when
    this process's mount namespace is the one its ancestors started in (no container's
    own), when this process's root is not the runtime's (`host_view`), or when anything
    cannot be read."""
    try:
        mine = posix.stat("/proc/self/ns/mnt")
        pid = int(posix.readlink("/proc/self"))
        for _ in range(MAX_DEPTH):
            parent, start = proc_stat(pid)
            if parent <= 0:
                return None  # the namespace's first process is the procfs's init
            st = posix.stat(f"/proc/{parent}/ns/mnt")
            if (st.st_dev, st.st_ino) != (mine.st_dev, mine.st_ino):
                return f"{pid}-{start}" if host_view(parent) else None
            pid = parent
    except (OSError, ValueError, IndexError):
        pass
    return None


def host_view(runtime: int) -> bool:
    """Whether this process's "/" is the root of `runtime`, the first ancestor outside its
    mount namespace (the runtime that made the container): the host's view, where
    createContainer hooks run before pivot_root and root's record directory is the host's.
    After pivot_root (a startContainer hook) "/" is the image's: a record there is the
    image's, whatever its owner, and is never looked at (issue 27: a container with the
    host's pid namespace planted one). The comparison goes through the kernel's magic link
    <proc>/PID/root; an unreadable one (no ptrace access) counts as not the host's view."""
    here, there = posix.stat("/"), posix.stat(f"/proc/{runtime}/root")
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def open_dir() -> int | None:
    """An O_PATH fd on the record directory when it and /run/nvhook are root's alone (and
    we are root); None otherwise, OSError when one is missing."""
    if posix.geteuid() != 0:
        return None
    flags = _O_PATH | posix.O_DIRECTORY | posix.O_NOFOLLOW | posix.O_CLOEXEC
    parent = posix.open(RECORD_PARENT, flags)
    try:
        if not _private(parent):
            return None
        fd = posix.open(RECORD_NAME, flags, dir_fd=parent)
    finally:
        posix.close(parent)
    if not _private(fd):
        posix.close(fd)
        return None
    return fd


def _private(fd: int) -> bool:
    st = posix.fstat(fd)
    return st.st_uid == 0 and not st.st_mode & 0o077


def call_lines(program: str, argv: list[str]) -> bytes | None:
    """A record entry for the call `program argv...`; None when a word holds a newline (or
    NUL), which the front's line reader cannot compare."""
    words = [program, *argv]
    if any("\n" in w or "\0" in w for w in words):
        return None
    return "".join(w + "\n" for w in words).encode("utf-8", "surrogateescape")


def key_of(name: str) -> tuple[int, int] | None:
    """(pid, start) of a record file name (`PID-START.NN`, `.PID-START.NN.tmp`), else None."""
    head = name.lstrip(".").split(".", 1)[0]
    pid, _, start = head.partition("-")
    return (int(pid), int(start)) if pid.isdigit() and start.isdigit() else None
