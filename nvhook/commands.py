"""The registry of `nvhook` subcommands: name, one line of help, and how to load it.

Each loader imports its command's module only when that command runs, so the hook's path
(`prestart`) pays for nothing else. A command is `(argv, GlobalOptions) -> exit code`; hook
commands (`HOOK_COMMANDS`) get their own name as argv[0] and run in "/", the others run in
the caller's working directory. Commands never import `nvhook.cli`.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable

    from nvhook.flags import GlobalOptions

    CommandMain = Callable[[list[str], GlobalOptions], int]

HOOK_COMMANDS = ("prestart", "poststart", "poststop")


def _prestart() -> CommandMain:
    from nvhook.hook.prestart import main

    return main


def _info() -> CommandMain:
    from nvhook.admin.driver_info import main_info

    return main_info


def _list() -> CommandMain:
    from nvhook.admin.driver_info import main_list

    return main_list


def _sim() -> CommandMain:
    from nvhook.dev.sim.sim_command import main

    return main


def _demo() -> CommandMain:
    from nvhook.dev.demo.demo_command import main

    return main


def _install() -> CommandMain:
    from nvhook.admin.install import main

    return main


def _config() -> CommandMain:
    from nvhook.config.check import main_config

    return main_config


def _doctor() -> CommandMain:
    from nvhook.admin.doctor.doctor_command import main

    return main


def _cdi() -> CommandMain:
    from nvhook.cdi.cdi_command import main

    return main


def _runtime() -> CommandMain:
    from nvhook.admin.configure.runtime_configure import main

    return main


class Command:
    """One subcommand: its help line and its loader."""

    __slots__ = ("help", "load")

    def __init__(self, help: str, load: Callable[[], CommandMain]) -> None:
        self.help = help
        self.load = load


COMMANDS: dict[str, Command] = {
    "prestart": Command("run the prestart hook", _prestart),
    "poststart": Command("no-op", _prestart),
    "poststop": Command("no-op", _prestart),
    "info": Command("show the driver and GPUs nvhook sees", _info),
    "list": Command("list the host files a container could get", _list),
    "sim": Command("create a simulated driver (and its prestart step)", _sim),
    "demo": Command("start a GPU container under runc, print its nvidia-smi", _demo),
    "install": Command("write the launchers: hook, runtime wrapper, nvidia-container-cli, "
                       "nvidia-ctk, nvidia-cdi-hook", _install),
    "runtime": Command("configure: register nvhook with docker, containerd, crio or podman",
                       _runtime),
    "config": Command("check config.toml (check [--json]) or print the default one (default)",
                      _config),
    "cdi": Command("CDI specs: generate, check [--refresh], list, and the spec's hooks", _cdi),
    "doctor": Command("check this host: driver, devices, cgroups, runtimes, config, caches",
                      _doctor),
}
