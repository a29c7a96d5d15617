"""Graphics and display in a real runc container against the simulated driver: the ICD and
vendor files are readable, the selected GPU's DRM nodes (and only those) are there and open
past the device cgroup, the GBM and GLX links point where NVIDIA's toolkit points them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.containers import GpuRig

pytestmark = [pytest.mark.e2e, pytest.mark.root]

SCRIPT = r"""
for f in /etc/vulkan/icd.d/nvidia_icd.json /etc/vulkan/implicit_layer.d/nvidia_layers.json \
         /usr/share/glvnd/egl_vendor.d/10_nvidia.json /etc/OpenCL/vendors/nvidia.icd \
         /usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json; do
  head -c 200 "$f" >/dev/null && echo "readable $f"
done
echo "icd: $(cat /etc/vulkan/icd.d/nvidia_icd.json | tr -d '\n ')"
ls /dev/dri | sed 's/^/dri /'
for n in /dev/dri/card* /dev/dri/renderD*; do
  msg=$( (exec 3<>$n) 2>&1 ); echo "open $n: ${msg:-opened}"
done
echo "gbm $(readlink /usr/lib/x86_64-linux-gnu/gbm/nvidia-drm_gbm.so)"
echo "glx $(readlink /usr/lib/xorg/modules/extensions/libglxserver_nvidia.so)"
[ -f /usr/lib/xorg/modules/drivers/nvidia_drv.so ] && echo "xorg driver"
for l in /dev/dri/by-path/*; do echo "bypath $l $(readlink $l)"; done
"""


def test_graphics_and_display_in_a_container(gpu_rig: GpuRig) -> None:
    env = ("NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=graphics,display,compute")
    out = gpu_rig.containers.sh(SCRIPT, env=env).stdout
    for path in ("/etc/vulkan/icd.d/nvidia_icd.json",
                 "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
                 "/etc/vulkan/implicit_layer.d/nvidia_layers.json",
                 "/etc/OpenCL/vendors/nvidia.icd",
                 "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json"):
        assert f"readable {path}" in out, out
    assert '"library_path":"libGLX_nvidia.so.0"' in out
    gpu = next(g for g in gpu_rig.sim.gpus if g.index == 1)
    assert sorted(x for x in out.splitlines() if x.startswith("dri ")) == [
        "dri by-path", f"dri card{gpu.index}", f"dri renderD{128 + gpu.index}"]
    # no kernel driver behind the simulated nodes: ENXIO means the device cgroup let it pass
    assert out.count("No such device or address") == 2, out
    assert "gbm ../libnvidia-allocator.so.1" in out
    assert f"glx libglxserver_nvidia.so.{gpu_rig.sim.driver_version}" in out
    assert "xorg driver" in out
    bus = gpu.proc_bus_id.lower()
    assert sorted(x for x in out.splitlines() if x.startswith("bypath ")) == [
        f"bypath /dev/dri/by-path/pci-{bus}-card ../card{gpu.index}",
        f"bypath /dev/dri/by-path/pci-{bus}-render ../renderD{128 + gpu.index}"]


def test_compute_only_gets_no_graphics(gpu_rig: GpuRig) -> None:
    out = gpu_rig.containers.sh(
        "ls /dev/dri 2>&1; ls /etc/vulkan 2>&1; echo done",
        env=("NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=compute,utility")).stdout
    assert "card" not in out and "icd.d" not in out and out.endswith("done\n")


def test_read_only_optional_targets_are_warnings(gpu_rig: GpuRig, tmp_path: Path) -> None:
    """The legacy hook never fails a container over an optional file, as the CDI hook does:
    /etc/nvidia (the application profile: NVIDIA 1.20 aborts every container there, its
    issue #2026) and the gbm directory (a graphics link) are read-only in the image."""
    targets = ("/etc/nvidia", "/usr/lib/x86_64-linux-gnu/gbm")
    empty = tmp_path / "empty"
    empty.mkdir()

    def read_only(spec: dict[str, object]) -> None:
        mounts = spec["mounts"]
        assert isinstance(mounts, list)
        mounts += [{"destination": d, "type": "bind", "source": str(empty),
                    "options": ["rbind", "ro"]} for d in targets]

    env = ("NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=graphics,display,compute")
    result = gpu_rig.containers.sh("ls /dev/nvidia1 && find " + " ".join(targets), env=env,
                                   edit_spec=read_only)
    assert result.stdout.split() == ["/dev/nvidia1", *targets]
