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
resolved with the node's `ldd`. A library the node lacks is installed into the node root from
Debian's archive (`apt-get install` of its package: PACKAGES; trixie's root lacks libelf1t64
and libtirpc3t64, sid's has them); a stack whose libraries still do not resolve is left out of
the run, named in the report (`unusable`), never measured with the host's libraries.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from stacks import PEERS  # NVIDIA's stacks: family -> prefix

HOST = "host"
NODES = (HOST, "sid", "trixie")
PEER_PARTS = ("bin", "inst")
# the Debian packages (trixie and later: the 64-bit time_t names) of the libraries NVIDIA's
# nvidia-container-cli links (its Go binaries need only libc)
PACKAGES = {"libelf.so.1": "libelf1t64", "libtirpc.so.3": "libtirpc3t64",
            "libseccomp.so.2": "libseccomp2", "libcap.so.2": "libcap2", "libz.so.1": "zlib1g",
            "libzstd.so.1": "libzstd1", "libgssapi_krb5.so.2": "libgssapi-krb5-2",
            "libkrb5.so.3": "libkrb5-3", "libk5crypto.so.3": "libk5crypto3",
            "libcom_err.so.2": "libcom-err2", "libkrb5support.so.0": "libkrb5support0",
            "libkeyutils.so.1": "libkeyutils1"}
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
    """Copy NVIDIA's built stacks into a Debian node's root, with the Debian packages of the
    libraries they need that the node lacks (module docstring); {family: why} of those that
    cannot run there (or are not built here)."""
    unusable = {f: f"{p} is not built on this machine (shared/tools/peer)"
                for f, p in PEERS.items() if not available(p)}
    built = [p for f, p in PEERS.items() if f not in unusable]
    if node.is_host:
        return unusable
    for prefix in built:
        for part in PEER_PARTS:
            if not node.path(prefix / part).exists():
                shutil.copytree(prefix / part, node.path(prefix / part), symlinks=True)
    lost = sorted({so for prefix in built for so in peer_libraries(node, prefix)[0]})
    if lost:
        install_packages(node, packages_for(lost))
    for family, prefix in PEERS.items():
        if family not in unusable:
            missing, why = peer_libraries(node, prefix)
            if missing or why:
                unusable[family] = why or (f"node {node.name}: {prefix} needs "
                                           f"{', '.join(missing)} (not in the node)")
    return unusable


def packages_for(sonames: list[str]) -> list[str]:
    """The Debian packages (trixie and later) that ship `sonames`; an unknown one is left to
    the check after the install (it names the library)."""
    return sorted({PACKAGES[so] for so in sonames if so in PACKAGES})


def install_packages(node: Any, packages: list[str]) -> None:
    """apt-get install `packages` into the node's root (this run's copy; the node's apt
    lists were dropped from the cached root: update first)."""
    if not packages:
        return
    script = ("apt-get update -qq && apt-get install -y -qq --no-install-recommends "
              + " ".join(packages))
    proc = node.run("/bin/sh", "-c", script, timeout=600,
                    env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                         "DEBIAN_FRONTEND": "noninteractive"})
    if proc.returncode != 0:  # the check that follows names what is still missing
        sys.stderr.write(f"bench: node {node.name}: apt-get install {' '.join(packages)}: "
                         f"{first_line(proc.stderr)}\n")


def peer_libraries(node: Any, prefix: Path) -> tuple[list[str], str]:
    """(the libraries `prefix`'s binaries miss in `node`, another reason they cannot run)."""
    lost: list[str] = []
    for binary in sorted(p for part in ("bin", "inst/bin") for p in (prefix / part).iterdir()
                         if p.is_file()):
        proc = node.run("/usr/bin/ldd", str(binary), timeout=60)
        lost += [so for so in missing_libraries(proc.stdout) if so not in lost]
        if proc.returncode != 0 and not lost and "not a dynamic executable" not in proc.stderr:
            return lost, f"node {node.name}: ldd {binary}: {first_line(proc.stderr)}"
    return lost, ""


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
