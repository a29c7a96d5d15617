"""One hook run's shared state (`nvhook.compat.cdihook`): the log, where the hook started,
stdin, the environment, the call itself (the launcher's path and argv, for `batch`),
config.toml (read only by the hooks that need it), the container located (once per state
source: the hooks a first hook does for the rest of its group share it; closed at the end)."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import TypeVar

    from nvhook.compat.cdihook.target import Target
    from nvhook.compat.urfave import Log, Parsed
    from nvhook.config.model import HookConfig
    from nvmount.api import Libc
    from nvmount.fs.procfs import ProcFs
    from nvmount.fs.rootfs import Root

    T = TypeVar("T")


class HookRun:
    """What one hook run shares: the log, where it started, stdin, the config (lazily)."""

    __slots__ = ("_config", "_libc", "_targets", "argv", "config_path", "cwd", "environ",
                 "log", "program", "start", "stdin")

    def __init__(self, log: Log, *, cwd: str | None, stdin: bytes | None,
                 environ: Mapping[str, str], config_path: str | None = None,
                 program: str | None = None, argv: list[str] | None = None,
                 start: int = 0) -> None:
        self.log, self.cwd, self.stdin, self.environ = log, cwd, stdin, environ
        self.config_path = config_path
        # the call as the runtime made it: the launcher's path (None: not from a launcher,
        # never batched), its whole argv after the path, where the hook's name is in it
        self.program, self.argv, self.start = program, argv or [], start
        self._config: HookConfig | None = None
        self._libc: Libc | None = None
        self._targets: dict[str, Target] = {}

    @property
    def libc(self) -> Libc:
        if self._libc is None:
            from nvmount.api import Libc

            self._libc = Libc()
        return self._libc

    def config(self) -> HookConfig:
        if self._config is None:
            from nvhook.config.load import load_config

            self._config = load_config(self.config_path, self.environ, cwd=self.cwd)
        return self._config

    def target(self, p: Parsed) -> Target:
        """The container of the state `p` names (stdin, or --container-spec's file); located
        once per source (stdin can be read only once)."""
        from nvhook.compat.cdihook.target import locate, read_state

        spec = p.string("container-spec") if "container-spec" in p.values else ""
        if spec and not spec.startswith("/") and self.cwd:
            spec = os.path.join(self.cwd, spec)
        source = "" if spec == "-" else spec
        target = self._targets.get(source)
        if target is None:
            if not source and self.stdin is None:
                from nvhook.hook.oci import read_state as read_fd

                self.stdin = read_fd(0)  # kept: a second look gets the same bytes
            target = locate(read_state(spec, self.stdin), self.cwd, lambda: self.libc)
            self._targets[source] = target
        return target

    def close(self) -> None:
        while self._targets:
            self._targets.popitem()[1].close()

    def in_root(self, target: Target, action: Callable[[Root, ProcFs], T], *,
                mounts: bool = False) -> T:
        from nvhook.compat.cdihook.target import with_root

        return with_root(target, self.libc, action, mounts=mounts)
