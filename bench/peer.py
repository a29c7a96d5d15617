"""NVIDIA's reference stack for side-by-side series: nvidia-container-runtime-hook v1.17.8 and
nvidia-container-cli (libnvidia-container 1.17.0) against the same simulated driver.

Found under /opt/peer (`../shared/tools/peer/build.sh` rebuilds it there in ~3 minutes) or
through PEER_HOOK and PEER_CLI. Nothing of NVIDIA's is in this repository. The config is the
one their hook needs with our simulated driver (the peer tool's README): the CLI's path, the
driver root, a host ldconfig, no kernel modules, legacy mode, and no --cuda-compat-mode (the
1.17.0 CLI does not know it).
"""

from __future__ import annotations

import os
from pathlib import Path

from nvhook.dev.demo.bundle import HookEntry

PEER = Path("/opt/peer")
PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def find_peer() -> tuple[Path, Path] | None:
    """(hook, cli) of NVIDIA's stack, or None when it is not built here."""
    hook = Path(os.environ.get("PEER_HOOK", PEER / "bin/nvidia-container-runtime-hook"))
    cli = Path(os.environ.get("PEER_CLI", PEER / "inst/bin/nvidia-container-cli"))
    if os.access(hook, os.X_OK) and os.access(cli, os.X_OK):
        return hook, cli
    return None


def peer_config(work: Path, sim_root: Path, cli: Path, gpus: int) -> Path:
    config = work / f"nvidia-config-{gpus}.toml"
    config.write_text(f"""\
[nvidia-container-cli]
path = "{cli}"
root = "{sim_root}"
ldconfig = "@/sbin/ldconfig"
load-kmods = false

[nvidia-container-runtime]
mode = "legacy"

[nvidia-container-runtime.modes.legacy]
cuda-compat-mode = ""

[features]
allow-cuda-compat-libs-from-container = true
""")
    return config


def peer_hook_entry(hook: Path, config: Path) -> HookEntry:
    return HookEntry(str(hook), ("nvidia-container-runtime-hook", "-config", str(config),
                                 "prestart"), (PATH,))
