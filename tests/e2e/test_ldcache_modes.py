"""The hook's own ld.so.cache (`[nvhook] ldcache = "write"`, the default) against the sandboxed
ldconfig (`ldcache = "ldconfig"`), inside real runc containers (issue 9): the image's
`ldconfig -p` lists the same entries in the same order (paths compared resolved: on a merged-/usr
image the image's own cache may name /lib/x86_64-linux-gnu where a rebuilt one names
/usr/lib/x86_64-linux-gnu, the same files), and the dynamic loader resolves the driver's
libraries to the same paths (`ld.so --preload <driver sonames> --list`: found by soname, through
the cache)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvhook.demo.driver import nvhook_hook_entry, sim_prestart_entry
from nvhook.demo.rootfs import RootfsFlavor
from tests.fixtures.containers import ContainerFactory, GpuRig

pytestmark = [pytest.mark.e2e, pytest.mark.root]

SCRIPT = r"""
echo "=== ldconfig"; /sbin/ldconfig -p | sed 1d | while IFS= read -r line; do
  echo "${line%%=> *}=> $(readlink -f "${line##*=> }")"; done
echo "=== raw"; /sbin/ldconfig -p
echo "=== list"; /lib64/ld-linux-x86-64.so.2 --preload "libcuda.so.1 libnvidia-ml.so.1" \
  --list /usr/bin/nvidia-smi | sed 's/ (0x[0-9a-f]*)$//' | while IFS= read -r line; do
  case "$line" in *" => "*) echo "${line%%=> *}=> $(readlink -f "${line##*=> }")";;
  *) echo "$line";; esac; done
echo "=== smi"; nvidia-smi -L; echo "rc=$?"
"""


def sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    name = ""
    for line in text.splitlines():
        if line.startswith("=== "):
            name = line[4:]
            out[name] = []
        elif name:
            out[name].append(line)
    return out


def factory(rig: GpuRig, tmp: Path, mode: str) -> ContainerFactory:
    text = rig.config.read_text()
    if mode != "write":
        text = text.replace("[nvhook]\n", f'[nvhook]\nldcache = "{mode}"\n', 1)
    config = tmp / f"config-{mode}.toml"
    config.write_text(text)
    steps = (sim_prestart_entry(config, rig.launcher), nvhook_hook_entry(rig.launcher, config))
    base = rig.containers
    return ContainerFactory(tmp / mode, base.rootfs, base.runc, steps, tag=f"ld-{mode}")


@pytest.mark.parametrize("flavor", [RootfsFlavor.GLIBC, RootfsFlavor.NON_DEBIAN],
                         ids=["debian", "non-debian"])
def test_written_cache_reads_as_ldconfigs(gpu_rig: GpuRig, tmp_path: Path,
                                          flavor: RootfsFlavor) -> None:
    env = ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=all"]
    seen = {}
    for mode in ("write", "ldconfig"):
        result = factory(gpu_rig, tmp_path, mode).sh(SCRIPT, env=env, flavor=flavor)
        seen[mode] = sections(result.stdout)
    written, rebuilt = seen["write"], seen["ldconfig"]
    assert written["raw"][0].endswith("libs found in cache `/etc/ld.so.cache'")
    assert any("libcuda.so.1 (libc6,x86-64)" in line for line in written["ldconfig"])
    assert written["ldconfig"] == rebuilt["ldconfig"]
    assert written["list"] and written["list"] == rebuilt["list"]
    assert any("libnvidia-ml.so.1 =>" in line for line in written["list"])
    assert written["smi"][-1] == rebuilt["smi"][-1] == "rc=0"
