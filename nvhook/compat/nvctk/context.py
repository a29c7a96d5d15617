"""What every `nvidia-ctk` subcommand shares (`nvhook.compat.nvctk`): its name, the command
table, and the `Context` (log, starting directory, stdin, environment, --config)."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Mapping

    from nvhook.compat.urfave import Log
    from nvhook.config.model import HookConfig

PROG = "nvidia-ctk"
COMMANDS = {
    "hook": "A collection of hooks that may be injected into an OCI spec",
    "runtime": "A collection of runtime-related utilities for the NVIDIA Container Toolkit",
    "info": "Provide information about the system",
    "cdi": "Provide tools for interacting with Container Device Interface specifications",
    "system": "A collection of system-related utilities for the NVIDIA Container Toolkit",
    "config": "Interact with the NVIDIA Container Toolkit configuration",
}


class Context:
    """What every subcommand gets: the log, where the user was, stdin, env, --config."""

    __slots__ = ("argv", "config_path", "cwd", "debug", "environ", "log", "program", "stdin")

    def __init__(self, log: Log, *, cwd: str | None, stdin: bytes | None,
                 environ: Mapping[str, str], config_path: str | None, debug: bool) -> None:
        self.log, self.cwd, self.stdin, self.environ = log, cwd, stdin, environ
        self.config_path, self.debug = config_path, debug
        self.program: str | None = None  # the launcher's path and argv (`nvidia-ctk hook`)
        self.argv: list[str] = []

    def path(self, value: str) -> str:
        """A user's path, absolute (relative ones against the starting directory)."""
        return value if value.startswith("/") or not self.cwd else os.path.join(self.cwd, value)

    def hook_config(self) -> HookConfig:
        """config.toml as nvhook reads it (--config / NVIDIA_CTK_CONFIG first)."""
        from nvhook.config.load import load_config

        path = self.path(self.config_path) if self.config_path else None
        return load_config(path, self.environ, cwd=self.cwd)
