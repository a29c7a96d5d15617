"""The race harness (security.md §2, F7/F12): an attacker process that keeps swapping a path
with a symlink while containers start, and the per-start oracles.

- `Swapper`: runs tools/swapper.c (compiled at test time) as a separate process that loops
  renameat2(RENAME_EXCHANGE) over (real entry, evil symlink) pairs in one directory, as a
  sibling container sharing that directory would. `pause()`/`restore()` put every pair back
  in its original orientation between starts (by inode, with our own exchange).
- `engine_start`: one engine-level start, nvmount's `configure_container` against a process
  in its own mount namespace over the shared rootfs (the bulk of the >= 2,000 starts; a
  real runc start costs ~0.4 s more). Returns the container's mountinfo or the error.
- `RaceStats`: starts, successes, fail-closed refusals by kind, escapes, swaps, starts/s.
- `reset_rootfs`: remove what a start created (the engine leaves mount points in a plain
  directory rootfs), so that every start creates its targets again under the race.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from nvmount._libc import Libc
from tests.security.fixtures import foreign_mounts

RENAME_EXCHANGE = 2


class Swapper:
    """The attacker: `swapper DIR A B [A B ...]` in its own process."""

    def __init__(self, binary: Path, directory: Path, pairs: Sequence[tuple[str, str]]) -> None:
        self.binary, self.directory, self.pairs = binary, directory, tuple(pairs)
        self.proc: subprocess.Popen[str] | None = None
        self.swaps = 0
        self._dirfd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self._inodes = {a: os.lstat(a, dir_fd=self._dirfd).st_ino for a, _ in self.pairs}
        self._links = {b: os.readlink(b, dir_fd=self._dirfd) for _, b in self.pairs}

    def __enter__(self) -> Swapper:
        argv = [str(self.binary), str(self.directory)]
        for a, b in self.pairs:
            argv += [a, b]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line == "ready\n", f"swapper did not start: {line!r}"
        return self

    def pause(self) -> None:
        """Stop the attacker (waits until it is stopped) and undo an odd swap."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while _proc_state(self.proc.pid) not in ("T", "t"):
            assert time.monotonic() < deadline, "swapper did not stop"
            time.sleep(0.0005)
        self.restore_orientation()

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def restore_orientation(self) -> None:
        """Every pair as it began: `a` the real object, `b` a symlink. The container's
        ldconfig deletes a dangling symlink that carries a library name (glibc does), so a
        swapped-in evil link may be gone: the real object is renamed back, the link remade."""
        libc, fd = Libc(), self._dirfd
        for a, b in self.pairs:
            if _ino(a, fd) == self._inodes[a]:
                pass
            elif _ino(a, fd) is None:
                os.rename(b, a, src_dir_fd=fd, dst_dir_fd=fd)
            else:
                libc.renameat2(fd, a, fd, b, RENAME_EXCHANGE)
            if _ino(b, fd) is None:
                os.symlink(self._links[b], b, dir_fd=fd)

    def __exit__(self, *exc: object | TracebackType | None) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=10)
        match = re.search(r"swaps=(\d+)", out)
        self.swaps = int(match.group(1)) if match else 0
        self.restore_orientation()
        os.close(self._dirfd)


def _ino(name: str, dir_fd: int) -> int | None:
    try:
        return os.lstat(name, dir_fd=dir_fd).st_ino
    except FileNotFoundError:
        return None


def _proc_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


@dataclass
class RaceStats:
    name: str
    starts: int = 0
    ok: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    escapes: list[str] = field(default_factory=list)
    swaps: int = 0
    seconds: float = 0.0

    def record_refusal(self, message: str) -> None:
        """Count a fail-closed start by the kind of its error (paths stripped)."""
        kind = re.sub(r"/[^\s:)]*", "<path>", message.split(": ", 1)[-1])[:120]
        self.refused[kind] += 1

    def summary(self) -> str:
        rate = self.starts / self.seconds if self.seconds else 0.0
        kinds = "; ".join(f"{n}x {k}" for k, n in self.refused.most_common(4))
        return (f"{self.name}: {self.starts} starts ({rate:.1f}/s), {self.ok} succeeded, "
                f"{sum(self.refused.values())} failed closed [{kinds}], "
                f"{len(self.escapes)} escapes, {self.swaps} swaps")


def rootfs_listing(rootfs: Path) -> set[str]:
    out: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(rootfs):
        rel = os.path.relpath(dirpath, rootfs)
        if rel == ".":
            dirnames[:] = [d for d in dirnames if d != "proc"]
        out.update(os.path.normpath(os.path.join(rel, n)) for n in (*dirnames, *filenames))
    return out


def reset_rootfs(rootfs: Path, original: set[str]) -> None:
    """Remove every entry a start added (deepest first); the swapper must be paused."""
    for rel in sorted(rootfs_listing(rootfs) - original, key=len, reverse=True):
        path = rootfs / rel
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path)
        else:
            path.unlink()


def check_mounts(mountinfo: list[str], allowed: Sequence[str], forbidden: Sequence[str] = ()
                 ) -> list[str]:
    """Escapes in a container's mountinfo: host sources outside `allowed`, or a mount point
    under one of `forbidden` (e.g. the compat dir: never mounted)."""
    bad = foreign_mounts(mountinfo, allowed)
    for line in mountinfo:
        target = line.split()[4]
        if any(target == f or target.startswith(f.rstrip("/") + "/") for f in forbidden):
            bad.append(line)
    return bad


def engine_start(pid: int, rootfs: Path, options: object, request: object) -> tuple[bool, str]:
    """One engine-level start against `pid`: (True, "") or (False, the one-line error).
    Anything but an NvmountError propagates (a traceback is a bug)."""
    from nvmount.engine import configure_container
    from nvmount.engine_types import EngineOptions, EngineRequest
    from nvmount.errors import NvmountError

    assert isinstance(options, EngineOptions) and isinstance(request, EngineRequest)
    try:
        configure_container(request, pid, str(rootfs), options, Libc())
    except NvmountError as err:
        message = str(err)
        assert "\n" not in message, f"error is not one line: {message!r}"
        return False, message
    return True, ""


def timed() -> float:
    return time.monotonic()
