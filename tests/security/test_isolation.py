"""Device isolation (issue 5, item 6; security.md T-DEV-ISO / CVE-2021-1056): a container that
asks for some of the eight simulated GPUs gets exactly those (plus the control nodes).

Inside the container: the /dev/nvidia* nodes, and for every GPU minor 0..7 a node made with
mknod and opened O_RDWR - ENXIO means the device cgroup allowed it (there is no driver), EPERM
that it denied it; nvidiactl likewise; `nvidia-smi -L` lists the selected GPUs only. Run on
runc's default cgroup v1 and on runc forced onto cgroup v2 (BPF device program, clients.md §4).
"""

from __future__ import annotations

import pytest

from nvhook.dev.demo.bundle import Runc
from tests.fixtures.containers import CGROUP2_RUNC
from tests.fixtures.security import PROBE, AttackRig, HostOracle

pytestmark = [pytest.mark.root, pytest.mark.e2e]

SCRIPT = (
    "echo @@nodes; ls /dev | grep nvidia; echo @@open; for m in 0 1 2 3 4 5 6 7 255; do "
    "mknod /tmp/n$m c 195 $m; r=$( (exec 3<>/tmp/n$m) 2>&1); "
    "case \"$r\" in *'not permitted'*) echo \"$m EPERM\";; *'No such device'*) "
    "echo \"$m ENXIO\";; *) echo \"$m $r\";; esac; done; "
    "echo @@smi; nvidia-smi -L 2>&1 | cut -d' ' -f1-2"
)
CONTROL = ["nvidia-uvm", "nvidia-uvm-tools", "nvidiactl"]
CASES = {
    # NVIDIA_VISIBLE_DEVICES: selected minors
    "0": (0,),
    "5": (5,),
    "7": (7,),
    "1,3": (1, 3),
    "none": (),
}


@pytest.mark.parametrize("cgroup", ["v1", "v2"])
@pytest.mark.parametrize("visible", list(CASES), ids=[f"gpus={v}" for v in CASES])
def test_only_the_requested_gpus_are_usable(rig: AttackRig, oracle: HostOracle, visible: str,
                                            cgroup: str) -> None:
    runc: Runc | None = CGROUP2_RUNC if cgroup == "v2" else None
    minors = CASES[visible]
    out = rig.start(PROBE + "; " + SCRIPT, gpus=visible, runc=runc)
    out.assert_contained()
    assert out.ok, out.describe()
    got = out.sections
    want_nodes = sorted([*(CONTROL if minors else []), *(f"nvidia{m}" for m in minors)])
    if not minors and "nvidiactl" in got["nodes"]:
        want_nodes = sorted(CONTROL)  # `none`: driver files and control nodes, no GPU
    assert sorted(got["nodes"]) == want_nodes, got["nodes"]
    opened = dict(line.split(" ", 1) for line in got["open"])
    for m in range(8):
        assert opened[str(m)] == ("ENXIO" if m in minors else "EPERM"), (m, opened)
    assert opened["255"] == ("ENXIO" if "nvidiactl" in want_nodes else "EPERM"), opened
    smi = [line for line in got["smi"] if line.startswith("GPU")]
    assert smi == [f"GPU {i}:" for i in range(len(minors))], got["smi"]
    oracle.assert_clean()
