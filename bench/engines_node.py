"""`bench/run.py --engines --node NAME`: the end-to-end benchmark on today's engines.

`host` (the default) is this machine's Debian 12 (docker.io 20.10, containerd 1.6, runc 1.1.5).
`sid` and `trixie` are the test suite's Debian nodes (tests/fixtures/nodes.py, reused, not
copied): the cached root extracted under /var/tmp, nvhook installed into it from this
checkout's .deb (the node's /usr/bin/nvhook and its python3 run the launchers), an anchor
holding a private mount namespace whose root the node is (own tmpfs /run, the host's /sys, /dev
and /tmp). Every daemon and client command runs in it through `node.enter()` (nsenter, no
fork: the daemon's pid is the one the bench stops and puts in its cpuacct cgroup, so CPU is
accounted as on the host). The simulated driver, the stacks' configs and wrappers live in the
private /tmp/nvb-* work dir, at the same path in the node.

NVIDIA's stacks were built on this Debian 12 host: their bin/ and inst/ (the Go binaries, the
C CLI and libnvidia-container) are copied into the node root at the same /opt paths (the node
root is this run's copy; the host is not changed), and each binary's shared libraries are
resolved with the node's `ldd`. A stack with a library the node lacks is left out of the run,
named in the report (`unusable`), never measured with the host's libraries.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

HOST = "host"
NODES = (HOST, "sid", "trixie")
# NVIDIA's stacks: family -> its prefix (bench/stacks.py: PEER_117, PEER_120)
PEERS = {"nvidia-1.17.8": Path("/opt/peer"), "nvidia-1.20": Path("/opt/peer-1.20")}
PEER_PARTS = ("bin", "inst")
ENGINE_VERSIONS = {"runc": ["runc", "--version"], "docker": ["dockerd", "--version"],
                   "containerd": ["containerd", "--version"], "podman": ["podman", "--version"]}


def missing_libraries(ldd_output: str) -> list[str]:
    """The sonames `ldd` could not resolve ("libfoo.so.1 => not found")."""
    return [line.split("=>", 1)[0].strip() for line in ldd_output.splitlines()
            if "=>" in line and line.split("=>", 1)[1].strip() == "not found"]


def first_line(text: str) -> str:
    return (text.strip().splitlines() or ["?"])[0].strip()


def start(name: str) -> tuple[Any, Callable[[], None]]:
    """Node `name` (tests.fixtures.nodes) started under a private /var/tmp dir, and its
    closer (stops the anchor, removes the root). `host`: the host's Node, nothing to close."""
    from tests.fixtures.nodes import Node, build_deb, start_node

    if name == HOST:
        return Node(HOST), lambda: None
    base = Path(tempfile.mkdtemp(prefix="nvb-node-", dir="/var/tmp"))  # /tmp: the node binds it
    try:
        node = start_node(name, base / name, build_deb(base / "dist"))
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise

    def close() -> None:
        node.stop()
        shutil.rmtree(base, ignore_errors=True)

    return node, close


def add_peers(node: Any, available: Callable[[Path], bool]) -> dict[str, str]:
    """Copy NVIDIA's built stacks into a Debian node's root (module docstring); {family: why}
    of those that cannot run there (or are not built here)."""
    unusable = {}
    for family, prefix in PEERS.items():
        if not available(prefix):
            unusable[family] = f"{prefix} is not built on this machine (shared/tools/peer)"
            continue
        if node.is_host:
            continue
        for part in PEER_PARTS:
            target = node.path(prefix / part)
            if not target.exists():
                shutil.copytree(prefix / part, target, symlinks=True)
        why = peer_libraries(node, prefix)
        if why:
            unusable[family] = why
    return unusable


def peer_libraries(node: Any, prefix: Path) -> str:
    """Why `prefix`'s binaries cannot run in `node` ("" when every library resolves)."""
    binaries = sorted(p for part in ("bin", "inst/bin") for p in (prefix / part).iterdir()
                      if p.is_file())
    for binary in binaries:
        proc = node.run("/usr/bin/ldd", str(binary), timeout=60)
        lost = missing_libraries(proc.stdout)
        if lost:
            return f"node {node.name}: {binary} needs {', '.join(lost)} (not in the node)"
        if proc.returncode != 0 and "not a dynamic executable" not in proc.stderr:
            return f"node {node.name}: ldd {binary}: {first_line(proc.stderr)}"
    return ""


def versions(node: Any) -> dict[str, str]:
    """The engines' versions as the node has them (first line of each `--version`)."""
    out = {}
    for key, argv in ENGINE_VERSIONS.items():
        try:
            proc = node.run("/bin/sh", "-c", " ".join(argv) + " 2>&1", timeout=60)
        except subprocess.TimeoutExpired:
            out[key] = "?"
            continue
        out[key] = first_line(proc.stdout) if proc.returncode == 0 else "?"
    return out


def node_summary(name: str, found: Mapping[str, str]) -> str:
    """One line naming the node and its engines, for the report's header."""
    where = "this host (Debian 12)" if name == HOST else f"Debian {name} node (pivot_root)"
    return f"{where}: " + ", ".join(found[k] for k in ENGINE_VERSIONS if found.get(k, "?") != "?")
