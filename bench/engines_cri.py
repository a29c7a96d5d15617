"""CRI pods in the end-to-end benchmark (`--clients cri`, bench/engines.py): kubelet's calls.

A private containerd with its CRI plugin (tests/fixtures/cri.py's CriNode: Debian's stock
config made private, the static pause image, pods on the host network, no CNI), on the
benchmark's node. Each stack is a runtime handler of its own (`runtime_type
io.containerd.runc.v2`, `BinaryName` its runtime wrapper, as `nvhook runtime configure` and
`nvidia-ctk runtime configure` write it); the base is containerd's default runc. A run is one
pod as kubelet makes it (tests/fixtures/cri_api.py's `run_pod`): RunPodSandbox through the
handler (the pause container runs through the stack's runtime too), CreateContainer with
NVIDIA_VISIBLE_DEVICES and NVIDIA_DRIVER_CAPABILITIES in its envs, StartContainer,
ContainerStatus polled every 20 ms until it exited, StopPodSandbox, RemovePodSandbox.

The client is this process (the compiled CRI API over gRPC): wall = the pod's calls; CPU = this
process's over them (its gRPC threads too) plus containerd's cpuacct group (containerd, its
shims, runtimes and hooks), as for docker and ctr.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import engines as E


def handler_toml(name: str, runtime: Path | None) -> str:
    """A CRI runtime handler `name` running `runtime` (None: the shim's runc; containerd
    config version 2, which 1.7 and 2.x read too)."""
    table = f'[plugins."io.containerd.grpc.v1.cri".containerd.runtimes."{name}"]'
    text = f'{table}\n  runtime_type = "io.containerd.runc.v2"\n'
    return text if runtime is None else \
        text + f'{table[:-1]}.options]\n  BinaryName = "{runtime}"\n'


# containerd 1.7 defines no `runc` handler once the config has a runtimes table of its own
DEFAULT = {"runc": None}


def start_cri(rig: E.Rig, rootfs: Path, handlers: dict[str, Path | None],
              enter: tuple[str, ...]) -> tuple[object, E.CpuGroup]:
    """The CRI containerd with `handlers` (name: runtime), its images (the busybox rootfs as
    the tests' image, and pause) imported, in a CPU group."""
    from tests.fixtures.clientrig.host import remove_cgroup_tree
    from tests.fixtures.clientrig.process import Timings, unique_name
    from tests.fixtures.cri import DEBIAN_STOCK, CriNode, build_images, private_config
    from tests.fixtures.cri_api import compile_cri_api

    work = rig.work / "cri"
    api = compile_cri_api(work / "api")
    images = build_images(work / "images", rootfs)
    node = CriNode(work / "node", api, images, Timings(), enter=enter)
    node.workdir.mkdir(parents=True)
    tables = [handler_toml(k, v) for k, v in {**DEFAULT, **handlers}.items()]
    node.config.write_text(private_config(DEBIAN_STOCK, node.workdir) + "\n" + "\n".join(tables))
    group = E.CpuGroup(unique_name("nvhook-bench-cri"), node.cgroup)  # the pods' parent
    rig.closers += [lambda: remove_cgroup_tree(node.cgroup), group.remove, node.stop]
    node.start()
    assert node._daemon is not None
    group.adopt(node._daemon.pid)
    node.import_images()
    return node, group


def pod_call(node: object, handler: str,
             envs: dict[str, str]) -> Callable[[tuple[str, ...]], tuple[bool, str]]:
    def call(command: tuple[str, ...]) -> tuple[bool, str]:
        from tests.fixtures.cri_api import PodSpec

        result = node.run_pod(PodSpec(command=command,  # type: ignore[attr-defined]
                                      image=node.image,  # type: ignore[attr-defined]
                                      handler=handler, envs=envs))
        ok = result.state == "CONTAINER_EXITED" and result.exit_code == 0 and not result.error
        return ok, "" if ok else result.describe()[-600:]

    return call


def cri_series(node: object, group: E.CpuGroup, row: str, handler: str,
               env: tuple[str, ...]) -> E.Series:
    envs = dict(e.split("=", 1) for e in env)
    return E.Series(row, "cri", lambda: list(E.TRUE), {}, group,
                    call=pod_call(node, handler, envs))
