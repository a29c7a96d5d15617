"""Device cgroup end to end: a real runc container whose prestart hook calls find_cgroup +
allow_devices, on runc's default cgroup v1 and forced onto cgroup v2 (clients.md §4: the BPF
device program runc attached before prestart is extended, not detached).

Inside, busybox opens mknod'ed nodes O_RDWR: ENXIO = the cgroup allowed it (no driver),
EPERM = denied. Self-contained (busybox rootfs in tmp, private runc state dir), cleaned up.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.cgroup import make_nodes

pytestmark = [pytest.mark.e2e, pytest.mark.root]

NODES = {"nvidia0": (195, 0), "nvidia1": (195, 1), "null": (1, 3)}
ENXIO_TEXT = "No such device or address"
EPERM_TEXT = "Operation not permitted"
CGROUP2_WRAP = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                'mount -t cgroup2 none /sys/fs/cgroup && exec "$@"', "cgroup2-wrap"]
PROBE = 'for n in nvidia0 nvidia1 null; do echo "== $n"; (exec 3<>/nodes/$n) 2>&1 && echo OK; done'

HOOK = """#!{python}
import json, os, sys
from nvmount._bpf import BPF_CGROUP_DEVICE, bpf_prog_query
from nvmount._libc import Libc
from nvmount.cgroup.allow import allow_devices
from nvmount.container.cgroup import find_cgroup
from nvmount.plan.types import DeviceRule

state = json.load(sys.stdin)
libc = Libc()
target = find_cgroup(state["pid"])
change = allow_devices(target, [DeviceRule(195, 0, what="/nodes/nvidia0")], libc)
progs = None
if target.version == 2:
    fd = os.open(target.path, os.O_RDONLY | os.O_DIRECTORY)
    progs = len(bpf_prog_query(libc, fd, BPF_CGROUP_DEVICE)[1])
with open({log!r}, "w") as f:
    json.dump({{"version": target.version, "path": target.path, "progs": progs,
               "change": change.describe()}}, f)
change.close()
"""


def _busybox_rootfs(root: Path) -> None:
    busybox = shutil.which("busybox") or "/bin/busybox"
    for d in ("bin", "proc", "sys", "dev", "tmp", "etc", "nodes"):
        (root / d).mkdir(parents=True)
    shutil.copy2(busybox, root / "bin" / "busybox")
    applets = subprocess.run([busybox, "--list"], capture_output=True, text=True,
                             check=True).stdout.split()
    for applet in applets:
        if applet != "busybox":  # clients.md §9.9: never symlink over the binary
            (root / "bin" / applet).symlink_to("busybox")
    make_nodes(str(root / "nodes"), NODES)


def _bundle(tmp: Path, hook: Path | None) -> Path:
    bundle = tmp / "bundle"
    _busybox_rootfs(bundle / "rootfs")
    subprocess.run(["runc", "spec", "--bundle", str(bundle)], check=True)
    spec = json.loads((bundle / "config.json").read_text())
    spec["process"]["terminal"] = False
    spec["process"]["args"] = ["/bin/sh", "-c", PROBE]
    spec["root"] = {"path": "rootfs", "readonly": False}
    if hook is not None:
        spec["hooks"] = {"prestart": [{"path": str(hook), "args": [hook.name], "timeout": 30}]}
    (bundle / "config.json").write_text(json.dumps(spec))
    return bundle


def _probe_results(output: str) -> dict[str, str]:
    out, name = {}, ""
    for line in output.splitlines():
        if line.startswith("== "):
            name = line[3:]
        elif name:
            out[name] = ("ENXIO" if ENXIO_TEXT in line else "EPERM" if EPERM_TEXT in line
                         else "OK" if line == "OK" else line)
    return out


def _run(tmp: Path, bundle: Path, v2: bool) -> str:
    cid = f"nvhook-cg-{secrets.token_hex(4)}"
    state = tmp / "runc-state"
    wrap = CGROUP2_WRAP if v2 else []
    runc = ["runc", "--root", str(state)]
    try:
        res = subprocess.run([*wrap, *runc, "run", cid], cwd=bundle, capture_output=True,
                             text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert res.returncode == 0, f"runc run failed ({res.returncode}): {res.stderr}"
        return res.stdout
    finally:
        subprocess.run([*wrap, *runc, "delete", "-f", cid], capture_output=True, timeout=60)
        _remove_cgroup_dirs(cid)


def _remove_cgroup_dirs(cid: str) -> None:
    """runc removes its cgroups on exit; sweep any leftover `<hierarchy>/<id>` anyway."""
    base = "/sys/fs/cgroup"
    for sub in ["", *os.listdir(base)]:
        path = os.path.join(base, sub, cid)
        if os.path.isdir(path):
            os.rmdir(path)


def _require_runc(v2: bool) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    if shutil.which("runc") is None or shutil.which("busybox") is None:
        pytest.skip("needs runc and busybox-static (packaging/setup.sh)")
    if not v2 and not os.path.exists("/sys/fs/cgroup/devices/devices.list"):
        pytest.skip("runc uses cgroup v2 by default on this host")


@pytest.mark.parametrize("v2", [False, True], ids=["cgroup-v1", "cgroup-v2-forced"])
def test_runc_hook_allows_only_the_requested_node(tmp_path: Path, v2: bool) -> None:
    _require_runc(v2)
    log = tmp_path / "hook.json"
    hook = tmp_path / "cghook.py"
    hook.write_text(HOOK.format(python=sys.executable, log=str(log)))
    hook.chmod(0o755)

    baseline = _probe_results(_run(tmp_path / "a", _bundle(tmp_path / "a", None), v2))
    assert baseline == {"nvidia0": "EPERM", "nvidia1": "EPERM", "null": "OK"}

    got = _probe_results(_run(tmp_path / "b", _bundle(tmp_path / "b", hook), v2))
    assert got == {"nvidia0": "ENXIO", "nvidia1": "EPERM", "null": "OK"}
    record = json.loads(log.read_text())
    assert record["version"] == (2 if v2 else 1), record
    if v2:
        assert record["progs"] == 1, record  # runc's program replaced in place, not added to
        assert record["path"].startswith("/sys/fs/cgroup/"), record
    else:
        assert record["path"].startswith("/sys/fs/cgroup/devices/"), record
    assert "c 195:0 rw" in record["change"], record
