"""One hook run's shared state (`nvhook.compat.cdihook`): the log, where the hook started,
stdin, the environment, config.toml (read only by the hooks that need it), the containers
located (closed at the end)."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import TypeVar

    from nvhook.compat.cdihook.target import Target
    from nvhook.compat.urfave import Log, Parsed
    from nvhook.config.model import HookConfig
    from nvmount._libc import Libc
    from nvmount.fs.procfs import ProcFs
    from nvmount.fs.rootfs import Root

    T = TypeVar("T")


class HookRun:
    """What one hook run shares: the log, where it started, stdin, the config (lazily)."""

    __slots__ = ("_config", "_libc", "_targets", "config_path", "cwd", "environ", "log",
                 "stdin")

    def __init__(self, log: Log, *, cwd: str | None, stdin: bytes | None,
                 environ: Mapping[str, str], config_path: str | None = None) -> None:
        self.log, self.cwd, self.stdin, self.environ = log, cwd, stdin, environ
        self.config_path = config_path
        self._config: HookConfig | None = None
        self._libc: Libc | None = None
        self._targets: list[Target] = []

    @property
    def libc(self) -> Libc:
        if self._libc is None:
            from nvmount._libc import Libc

            self._libc = Libc()
        return self._libc

    def config(self) -> HookConfig:
        if self._config is None:
            from nvhook.config.load import load_config

            self._config = load_config(self.config_path, self.environ, cwd=self.cwd)
        return self._config

    def target(self, p: Parsed) -> Target:
        from nvhook.compat.cdihook.target import locate, read_state

        spec = p.string("container-spec") if "container-spec" in p.values else ""
        if spec and not spec.startswith("/") and self.cwd:
            spec = os.path.join(self.cwd, spec)
        target = locate(read_state(spec, self.stdin), self.cwd, self.libc)
        self._targets.append(target)
        return target

    def close(self) -> None:
        while self._targets:
            self._targets.pop().close()

    def in_root(self, target: Target, action: Callable[[Root, ProcFs], T], *,
                mounts: bool = False) -> T:
        from nvhook.compat.cdihook.target import with_root

        return with_root(target, self.libc, action, mounts=mounts)
