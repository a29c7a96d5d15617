"""The first of NVIDIA's hooks in a container's createContainer list does the work of the
ones that follow it; they find a record of it and exit at once, without starting Python (the
launcher's sh front, `nvhook.launch.cdihook_sh`). Stage: apply.

A spec NVIDIA wrote runs five or six hook processes, one after the other, each a Python
interpreter here; the work of all of them in one process costs a little more than one.
The first hook of a *group* does the group's work, in the list's order, where that gives
exactly what the separate hooks would have given:

- the group is a run of consecutive `createContainer` entries of the bundle's config.json
  (as the runtime decoded it) that run this same program (the path string the runtime
  executes), with the same `env`, the same words before the hook's name (global flags, and
  `hook` for nvidia-ctk), no `timeout`, a known hook whose flags parse, no newline in a
  word, and no `--container-spec` (its state comes from stdin); `noop`s inside it are
  passed over (the front answers them anyway). A hook of another program or an unknown hook
  ends the group: what runs between two groups runs between their work too;
- the first hook leads only where its own call is listed exactly once, not also among the
  `startContainer` hooks, and it runs inside the container's namespaces before pivot_root
  (the createContainer stage): the container's first process - the topmost ancestor in its
  mount namespace (`record.container_key`) - is the state's pid in its pid namespace;
- its record (`record`: one root-owned file per later call in /run/nvhook/cdi-hooks, named
  by the container's first process and its start time) is written under temporary names
  before the work (no record, no batching: each hook does its own work) and put in place
  only after all of it succeeded; an error in any of it fails this hook, so the container
  fails as it would have at that hook. Records whose container's first process is gone,
  and what an earlier group of the same container left, are removed by the next leader.

Warnings of the later hooks' work appear on the leader's stderr.
"""

from __future__ import annotations

import os

from nvhook.launch.hook_records import (
    RECORD_DIR,
    RECORD_PARENT,
    call_lines,
    container_key,
    key_of,
    open_dir,
    proc_stat,
)

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from nvhook.compat.cdihook.run import HookRun
    from nvhook.compat.urfave import Parsed

    Member = tuple[list[str], str, Parsed]  # (argv after the path, hook function, its flags)
    Parse = Callable[[list[str]], "tuple[str, Parsed] | None"]

MAX_HOOKS = 1024  # createContainer entries looked at


def _call(entry: Any) -> tuple[str, list[str], object, bool] | None:
    """(path, args[1:], env, has a timeout) of a hook entry, None when malformed."""
    from nvhook.hook.oci import field

    if not isinstance(entry, dict):
        return None
    path, args, env = field(entry, "path"), field(entry, "args"), field(entry, "env")
    if not isinstance(path, str) or not isinstance(args, list) or not args or \
            not all(isinstance(a, str) for a in args):
        return None
    return path, args[1:], env, field(entry, "timeout") is not None


def group_after(entries: Any, program: str, argv: list[str], start: int, parse: Parse
                ) -> list[Member]:
    """The later members of the group this call (`program` `argv`, the hook's name at
    `argv[start]`) leads in the createContainer list `entries`; [] when it leads none."""
    if not isinstance(entries, list) or len(entries) > MAX_HOOKS:
        return []
    calls = [_call(e) for e in entries]
    mine = [i for i, c in enumerate(calls) if c is not None and c[:2] == (program, argv)]
    own = calls[mine[0]] if len(mine) == 1 else None
    if own is None or own[3]:
        return []
    def member(c: tuple[str, list[str], object, bool] | None) -> tuple[str, Parsed] | None:
        if c is None or c[0] != program or c[2] != own[2] or c[3] or \
                c[1][:start] != argv[:start] or len(c[1]) <= start or \
                call_lines(program, c[1]) is None:
            return None
        return parse(c[1][start:])

    before = mine[0] - 1
    while before >= 0 and (found := member(calls[before])) is not None and not found[0]:
        before -= 1  # a noop: passed over
    if before >= 0 and member(calls[before]) is not None:
        return []  # a hook of the same group comes first: it leads
    later: list[Member] = []
    for c in calls[mine[0] + 1:]:
        found = member(c)
        if found is None or c is None:
            break
        if found[0]:
            later.append((c[1], found[0], found[1]))
    return later


def _group(run: HookRun, parsed: Parsed, parse: Parse) -> tuple[str, list[Member]] | None:
    """(container key, the later members) when this hook leads a group at createContainer,
    in the container's namespaces, before pivot_root; else None."""
    from nvhook.errors import NvhookError
    from nvhook.hook.oci import field
    from nvmount.errors import NvmountError

    try:
        target = run.target(parsed)
    except (NvhookError, NvmountError, OSError):
        return None  # the hook's own work says what is wrong, where it needs the container
    doc = target.config
    if not target.in_container or target.ns_rootfs == "/" or not isinstance(doc, dict):
        return None
    hooks = field(doc, "hooks")
    if not isinstance(hooks, dict) or run.program is None:
        return None
    create, later = field(hooks, "createContainer"), field(hooks, "startContainer")
    if isinstance(later, list) and any((c := _call(e)) is not None and c[:2] == (
            run.program, run.argv) for e in later[:MAX_HOOKS]):
        return None
    members = group_after(create, run.program, run.argv, run.start, parse)
    if not members:
        return None
    key = container_key()
    if key is None or _ns_pid(int(key.split("-")[0])) != target.state_pid:
        return None
    return key, members


def _ns_pid(pid: int) -> int | None:
    """The pid of `pid` in its own (innermost) pid namespace (`NSpid` of its status)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as stream:
            for line in stream.read(1 << 16).splitlines():
                if line.startswith(b"NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        pass
    return None


class Record:
    """The group's record (`record`): written under temporary names before the work, put in
    place after it."""

    __slots__ = ("dfd", "names")

    def __init__(self, dfd: int, names: list[str]) -> None:
        self.dfd, self.names = dfd, names

    @classmethod
    def reserve(cls, key: str, entries: list[bytes]) -> Record | None:
        """The entries written in root's private directory (created if missing) under
        temporary names, or None (then nothing is batched)."""
        for path in (RECORD_PARENT, RECORD_DIR):
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass
            except OSError:
                return None
        try:
            dfd = open_dir()
        except OSError:
            return None
        if dfd is None:
            return None
        record = cls(dfd, [])
        try:
            _prune(dfd, key)
            for i, data in enumerate(entries, 1):
                name = f"{key}.{i:04d}"
                fd = os.open(f".{name}.tmp", os.O_WRONLY | os.O_CREAT | os.O_EXCL
                             | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
                record.names.append(name)
                try:
                    os.write(fd, data)
                finally:
                    os.close(fd)
        except OSError:
            record.abort()
            return None
        return record

    def commit(self) -> None:
        """Put the entries in place."""
        try:
            for name in self.names:
                os.rename(f".{name}.tmp", name, src_dir_fd=self.dfd, dst_dir_fd=self.dfd)
        finally:
            os.close(self.dfd)

    def abort(self) -> None:
        try:
            for name in self.names:
                try:  # noqa: SIM105 (no contextlib import for one call)
                    os.unlink(f".{name}.tmp", dir_fd=self.dfd)
                except OSError:
                    pass
        finally:
            os.close(self.dfd)


def _prune(dfd: int, key: str) -> None:
    """Remove what an earlier group of this container left, and the records of containers
    whose first process is gone."""
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dfd)
    try:
        names = os.listdir(fd)[:1 << 16]
    finally:
        os.close(fd)
    mine = key_of(f"{key}.0")
    for name in names:
        found = key_of(name)
        try:
            keep = found is not None and found != mine and proc_stat(found[0])[1] == found[1]
        except (OSError, ValueError, IndexError):
            keep = False
        if not keep:
            try:  # noqa: SIM105 (no contextlib import for one call)
                os.unlink(name, dir_fd=dfd)
            except OSError:
                pass


def run_group(run: HookRun, function: str, parsed: Parsed, parse: Parse) -> None:
    """Run this hook; when it leads a group, the later members' work too, then their
    record (see the module docstring)."""
    from nvhook.compat.cdihook import actions as hooks

    later: list[Member] = []
    record = None
    if run.program is not None and "container-spec" not in parsed.given:
        found = _group(run, parsed, parse)
        if found is not None:
            key, members = found
            record = Record.reserve(key, [call_lines(run.program, argv) or b""
                                          for argv, _, _ in members])
            later = members if record is not None else []
    try:
        getattr(hooks, function)(run, parsed)
        for argv, name, flags in later:
            run.log.debug(f"doing the work of the next hook now: {' '.join(argv)[:200]}")
            getattr(hooks, name)(run, flags)
    except BaseException:
        if record is not None:
            record.abort()
        raise
    if record is not None:
        record.commit()
