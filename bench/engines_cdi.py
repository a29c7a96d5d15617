"""Podman with CDI in the end-to-end benchmark (`--clients podman`, bench/engines.py).

    unshare --mount sh -c 'echo $$ > G/cgroup.procs; mount --bind DIR /etc/cdi; exec podman
        run --rm --cgroup-parent /G --device nvidia.com/gpu=0|all IMG /bin/true'

Rootful Podman from the test rig (tests/fixtures/clientrig/podman.py: private storage and
containers.conf, runc, cgroupfs, no network), on the benchmark's node. Two spec directories,
each with one spec for the same simulated driver: nvhook's (`nvhook cdi generate` by the
node's nvhook, its hook the installed `nvhook-hook` of the `auto` stack; made with the sim's
own config, `sim-procfs = true`: a CDI spec has no prestart step to give the simulation's
/proc/driver, so nvhook's one hook mounts that tmpfs itself before its procfs view, where a
real node has the kernel's; NVIDIA's spec makes no procfs view at all) and NVIDIA 1.20.0's
(`nvidia-ctk cdi generate --driver-root SIM --dev-root SIM`, its hooks `nvidia-cdi-hook`;
run with the simulated NVML on its library path, /dev read-only so that it makes no device
node, as tests/fixtures/nvidia_specs.py does). The base is the same podman run without a
device, with an empty DIR. Each spec is the only one in its run's /etc/cdi: the bind is in a
private mount namespace of that podman process (Podman 5.4 has no `--cdi-spec-dir` and
ignores containers.conf's `cdi_spec_dirs`), over the node root's /etc/cdi (made if missing:
the root is this run's copy). Never on the host, whose /etc is not the benchmark's to change.

Podman has no daemon: its CPU is the podman process and everything it leaves behind (conmon,
runc, the spec's hooks, `podman container cleanup`). The client starts in a private cpuacct
cgroup that is also Podman's `--cgroup-parent` (conmon goes to P/conmon, the container to
P/libpod-ID, both below it), so the group's usage holds all of it and the client's rusage is
not added again (`Series.grouped`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import engines as E
import stacks as S

SPEC = "nvidia.yaml"
# $0: the group's cgroup.procs, $1: the spec dir, then podman's argv
IN_GROUP_WITH_SPECS = 'echo $$ > "$0" && mount --bind "$1" /etc/cdi && shift && exec "$@"'
DEVICES = (("GPU 0", "nvidia.com/gpu=0"), ("all 8 GPUs", "nvidia.com/gpu=all"))
NVIDIA_CTK_SANDBOX = ("mount --bind -o ro /dev /dev && mount -o remount,bind,ro /dev && "
                      'exec "$@"')


def nvhook_spec(node: object, stack: S.Stack, sim: Path, out: Path) -> Path:
    """nvhook's spec for `sim`, written by the node's nvhook with the sim's own config
    (`sim-procfs = true`: module docstring), its hook `stack`'s launcher."""
    assert stack.prefix is not None
    n: object = node
    out.mkdir(parents=True, exist_ok=True)
    proc = n.run(*n.nvhook_command()[len(n.enter()):],  # type: ignore[attr-defined]
                 "--config", str(sim / "config.toml"), "cdi", "generate", "--hook-path",
                 str(stack.prefix / "nvhook-hook"), "--output", str(out / SPEC))
    if proc.returncode != 0:
        raise SystemExit(f"bench: nvhook cdi generate into {out}: {proc.stderr.strip()}")
    return out


def nvidia_spec(node: object, sim: Path, out: Path) -> Path:
    """NVIDIA 1.20.0's spec for `sim` (module docstring), generated in the node."""
    ctk = S.PEER_120 / "bin/nvidia-ctk"
    out.mkdir(parents=True, exist_ok=True)
    proc = node.run(  # type: ignore[attr-defined]
        "/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh", "-c",
        NVIDIA_CTK_SANDBOX, "sh", str(ctk), "cdi", "generate", "--driver-root", str(sim),
        "--dev-root", str(sim), "--nvidia-cdi-hook-path", str(S.PEER_120 / "bin/nvidia-cdi-hook"),
        "--output", str(out / SPEC),
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
             "LD_LIBRARY_PATH": str(sim / "usr/lib/x86_64-linux-gnu")})
    if proc.returncode != 0:
        raise SystemExit(f"bench: {ctk} cdi generate into {out}: {proc.stderr.strip()[-400:]}")
    return out


def start_podman(rig: E.Rig, images: dict[str, Path],
                 enter: tuple[str, ...]) -> tuple[object, E.CpuGroup]:
    """Rootful Podman with `images` imported; its cgroup parent is its CPU group."""
    from tests.fixtures.clientrig.podman import Podman

    client = Podman(rig.work / "podman", enter=enter)
    group = E.CpuGroup(client.cgroup_parent)
    rig.closers.append(client.close)  # removes the cgroup parent, the group with it
    client.setup()
    for ref, rootfs in images.items():
        client.import_rootfs(rootfs, ref)
    return client, group


def podman_series(client: object, group: E.CpuGroup, row: str, spec_dir: Path,
                  device: str | None, image: str) -> E.Series:
    """`podman run` of `row` in a private mount namespace whose /etc/cdi is `spec_dir`
    (module docstring)."""
    c: object = client
    argv, env = c.command("run", "--rm",  # type: ignore[attr-defined]
                          "--cgroup-parent", f"/{c.cgroup_parent}",  # type: ignore[attr-defined]
                          *(["--device", device] if device else []), image, "/bin/true")
    full = [*c.enter, "/usr/bin/unshare", "--mount", "--propagation",  # type: ignore[attr-defined]
            "private", "/bin/sh", "-c", IN_GROUP_WITH_SPECS, str(group.path / "cgroup.procs"),
            str(spec_dir), *argv]
    return E.Series(row, "podman", lambda: full, env, group, grouped=True)


def podman_rows(rig: E.Rig, node: object, images: dict[str, Path], stacks: list[S.Stack],
                sim: Path) -> list[E.Series]:
    """Podman started on `node`, a spec from nvhook (its `auto` stack, else its first) and
    from NVIDIA 1.20.0 when that stack runs here, and their series: the base (an empty
    /etc/cdi), then each spec with GPU 0 and all 8. Not on the host (module docstring)."""
    n: object = node
    if n.is_host:  # type: ignore[attr-defined]
        sys.stderr.write("bench: podman runs on a Debian node only (--node sid|trixie): its "
                         "/etc/cdi is that root's; skipped\n")
        return []
    n.path("/etc/cdi").mkdir(parents=True, exist_ok=True)  # type: ignore[attr-defined]
    ours = sorted((st for st in stacks if st.family == "nvhook"),
                  key=lambda st: st.label != "nvhook auto")
    specs = {"nvhook": nvhook_spec(node, ours[0], sim, rig.work / "cdi-nvhook")}
    if any(st.family == "nvidia-1.20" for st in stacks):
        specs["NVIDIA 1.20.0"] = nvidia_spec(node, sim, rig.work / "cdi-nvidia-1.20")
    client, group = start_podman(rig, {E.IMAGE: images[E.IMAGE]},
                                 n.enter())  # type: ignore[attr-defined]
    empty = rig.work / "cdi-none"
    empty.mkdir()
    out = [podman_series(client, group, "main | no GPU | runc (base)", empty, None, E.IMAGE)]
    for kind, device in DEVICES:
        for label, spec_dir in specs.items():
            out.append(podman_series(client, group, f"main | {kind} | CDI, {label} spec",
                                     spec_dir, device, E.IMAGE))
    return out
