"""The container harness itself, with a trivial shell hook (no driver, no nvhook)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvhook.dev.demo.bundle import HookEntry, container_cgroup_dirs
from nvhook.dev.demo.rootfs import RootfsFlavor
from tests.fixtures.containers import CGROUP2_RUNC, ContainerFactory, HostSnapshot

pytestmark = [pytest.mark.e2e, pytest.mark.root]


def _state_hook(tmp_path: Path) -> HookEntry:
    script = tmp_path / "hook.sh"
    script.write_text(f'#!/bin/sh\ncat > {tmp_path}/state.json\necho "$@" > {tmp_path}/args\n')
    script.chmod(0o755)
    return HookEntry(str(script), ("hook.sh", "one", "two"))


@pytest.mark.parametrize("flavor", list(RootfsFlavor), ids=[f.value for f in RootfsFlavor])
def test_rootfs_flavours_run_busybox_and_report_layout(
    containers: ContainerFactory, flavor: RootfsFlavor
) -> None:
    res = containers.sh(
        "echo out; echo err >&2; ls /etc; ls " + flavor.libs_dir + "; "
        "if [ -x /sbin/ldconfig ]; then /sbin/ldconfig -p | head -1; fi",
        flavor=flavor,
    )
    assert res.stdout.startswith("out\n")
    assert res.stderr == "err\n"
    assert "libc.so.6" in res.stdout
    assert ("debian_version" in res.stdout) == (flavor is not RootfsFlavor.NON_DEBIAN)
    has_cache = flavor is not RootfsFlavor.MUSL_LIKE
    assert ("libs found in cache" in res.stdout) == has_cache
    assert ("ld.so.cache" in res.stdout) == has_cache


def test_hook_gets_state_and_cleanup_leaves_nothing(
    containers: ContainerFactory, tmp_path: Path, host_snapshot: HostSnapshot
) -> None:
    bundle = containers.bundle(["/bin/true"], prestart=[_state_hook(tmp_path)])
    res = containers.run(bundle)
    assert res.returncode == 0, res.describe()
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["id"] == res.container_id
    assert state["bundle"] == str(bundle)
    assert (tmp_path / "args").read_text() == "one two\n"
    assert container_cgroup_dirs(res.container_id) == []
    host_snapshot.assert_unchanged()


def test_failing_hook_stops_the_container(containers: ContainerFactory, tmp_path: Path) -> None:
    script = tmp_path / "fail.sh"
    script.write_text("#!/bin/sh\necho 'require: cuda>=99.0 not met' >&2\nexit 1\n")
    script.chmod(0o755)
    res = containers.sh("echo started", check=False, prestart=[HookEntry(str(script), ("x",))])
    assert res.returncode != 0
    assert "started" not in res.stdout
    assert "cuda>=99.0 not met" in res.stderr
    assert container_cgroup_dirs(res.container_id) == []


@pytest.mark.parametrize("runc_kind", ["v1", "v2"])
def test_device_cgroup_denies_mknod_node_by_default(
    containers: ContainerFactory, runc_kind: str
) -> None:
    script = "mknod /dev/n0 c 195 0 && (exec 3<>/dev/n0) 2>&1; cat /proc/self/cgroup"
    res = containers.sh(script, runc=CGROUP2_RUNC if runc_kind == "v2" else None)
    assert "Operation not permitted" in res.stdout
    assert "0::/nvhook-" in res.stdout
    assert (":devices:/nvhook-" in res.stdout) == (runc_kind == "v1")
    assert container_cgroup_dirs(res.container_id) == []


@pytest.mark.parametrize(("line", "flagged"), [
    ("0 / {base}/b/rootfs/usr/lib/x rw - ext4 /dev/vda rw", True),
    ("0 / /tmp/pytest-of-root/pytest-other/b/rootfs/x rw - ext4 /dev/vda rw", False),
    ("0 / /proc/driver/nvidia rw - tmpfs tmpfs rw", True),
    ("0 / /var/lib/docker/overlay2/abc/merged rw - overlay overlay rw", False),
], ids=["bundle-path", "other-session", "driver-path", "other-daemon"])
def test_host_snapshot_flags_only_mounts_that_could_be_ours(
        line: str, flagged: bool, tmp_path_factory: pytest.TempPathFactory) -> None:
    line = line.format(base=tmp_path_factory.getbasetemp())
    snap = HostSnapshot()
    snap.mounts = [*snap.mounts, line]  # as if `line` had been unmounted since
    if flagged:
        with pytest.raises(AssertionError, match="host mounts changed"):
            snap.assert_unchanged()
    else:
        snap.assert_unchanged()
    snap.strict = True
    with pytest.raises(AssertionError, match="host mounts changed"):
        snap.assert_unchanged()
