"""nvmount.cgroup.common and cgroup_v1: parsing and path detection (pure, table-driven), and v1
device rules against the real v1 devices hierarchy of this machine (root)."""

from __future__ import annotations

import errno
import os

import pytest

from nvmount._libc import Libc
from nvmount.cgroup.allow import allow_devices
from nvmount.cgroup.common import should_skip_cgroups, validate_rules
from nvmount.cgroup.v1 import ListEntry, missing_access, parse_devices_list
from nvmount.container.cgroup import (
    CgroupCandidate,
    CgroupLine,
    CgroupTarget,
    cgroup_candidates,
    device_cgroups,
    find_cgroup,
    hierarchy_candidates,
    parse_mountinfo,
    parse_proc_cgroup,
    unescape_mountinfo,
)
from nvmount.errors import CgroupError
from nvmount.plan.types import DeviceRule
from tests.fixtures.cgroup import (
    CgroupProbe,
    cgroup2_mount,
    devices_list,
    in_private_mntns,
    make_nodes,
    require_v1_devices,
    v1_cgroup,
    v2_cgroup,
)

# -- fixtures as text -------------------------------------------------------------------------
HYBRID_MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime shared:9 - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime shared:10 - cgroup cgroup rw,cpu
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime shared:14 master:3 - cgroup cgroup rw,devices
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
# runc forced onto v2: cgroup2 stacked on /sys/fs/cgroup hides the v1 mounts and `unified`
FORCED_V2_MOUNTINFO = HYBRID_MOUNTINFO + "612 31 0:38 / /sys/fs/cgroup rw - cgroup2 none rw\n"
PURE_V2_MOUNTINFO = "27 22 0:24 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
COMOUNT_MOUNTINFO = "40 31 0:40 / /sys/fs/cgroup/cpu,devices rw - cgroup cgroup rw,cpu,devices\n"
NESTED_MOUNTINFO = "50 31 0:33 /docker/abc /sys/fs/cgroup/devices ro - cgroup cgroup rw,devices\n"
ESCAPED_MOUNTINFO = "60 31 0:33 / /mnt/my\\040cg\\134x rw - cgroup cgroup rw,devices\n"
OUTSIDE_NS_MOUNTINFO = "70 31 0:33 /../x /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n"

RUNC_V1_CGROUP = "9:name=systemd:/ctr\n5:devices:/ctr\n1:cpu:/ctr\n0::/ctr\n"
RUNC_V2_CGROUP = "9:name=systemd:/\n5:devices:/\n1:cpu:/\n0::/ctr\n"
ROOT_ONLY_CGROUP = "5:devices:/\n0::/\n"


def _c(version: int, path: str, mp: str, mid: int) -> CgroupCandidate:
    return CgroupCandidate(version, path, mp, mid)


CANDIDATE_CASES = [
    ("hybrid-runc-v1", RUNC_V1_CGROUP, HYBRID_MOUNTINFO,
     (_c(1, "/sys/fs/cgroup/devices/ctr", "/sys/fs/cgroup/devices", 36),
      _c(2, "/sys/fs/cgroup/unified/ctr", "/sys/fs/cgroup/unified", 41))),
    ("forced-v2-both-cgroup2-mounts", RUNC_V2_CGROUP, FORCED_V2_MOUNTINFO,
     (_c(2, "/sys/fs/cgroup/unified/ctr", "/sys/fs/cgroup/unified", 41),
      _c(2, "/sys/fs/cgroup/ctr", "/sys/fs/cgroup", 612))),
    ("pure-v2", "0::/system.slice/x.scope\n", PURE_V2_MOUNTINFO,
     (_c(2, "/sys/fs/cgroup/system.slice/x.scope", "/sys/fs/cgroup", 27),)),
    ("co-mounted-cpu-devices", "4:cpu,devices:/ctr\n", COMOUNT_MOUNTINFO,
     (_c(1, "/sys/fs/cgroup/cpu,devices/ctr", "/sys/fs/cgroup/cpu,devices", 40),)),
    ("mount-root-stripped", "5:devices:/docker/abc/sub\n", NESTED_MOUNTINFO,
     (_c(1, "/sys/fs/cgroup/devices/sub", "/sys/fs/cgroup/devices", 50),)),
    ("mount-root-equals-path", "5:devices:/docker/abc\n", NESTED_MOUNTINFO,
     (_c(1, "/sys/fs/cgroup/devices", "/sys/fs/cgroup/devices", 50),)),
    ("mount-root-string-prefix-only", "5:devices:/docker/abcdef\n", NESTED_MOUNTINFO, ()),
    ("mount-root-outside-cgroupns", "5:devices:/x/ctr\n", OUTSIDE_NS_MOUNTINFO, ()),
    ("dotdot-in-path", "5:devices:/ctr/../../etc\n", HYBRID_MOUNTINFO, ()),
    ("escaped-mount-point", "5:devices:/ctr\n", ESCAPED_MOUNTINFO,
     (_c(1, "/mnt/my cg\\x/ctr", "/mnt/my cg\\x", 60),)),
    ("root-cgroups-only", ROOT_ONLY_CGROUP, HYBRID_MOUNTINFO, ()),
    ("no-devices-mount", RUNC_V1_CGROUP, PURE_V2_MOUNTINFO,
     (_c(2, "/sys/fs/cgroup/ctr", "/sys/fs/cgroup", 27),)),
]


@pytest.mark.parametrize(("cgroup", "mountinfo", "want"),
                         [c[1:] for c in CANDIDATE_CASES], ids=[c[0] for c in CANDIDATE_CASES])
def test_cgroup_candidates(cgroup: str, mountinfo: str, want: tuple[CgroupCandidate, ...]) -> None:
    got = cgroup_candidates(parse_proc_cgroup(cgroup), parse_mountinfo(mountinfo))
    assert got == want


SYSTEMD_MOUNTINFO = "40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n"


@pytest.mark.parametrize(("cgroup", "mountinfo", "want"), [
    (RUNC_V1_CGROUP, HYBRID_MOUNTINFO + SYSTEMD_MOUNTINFO, (
        (0, _c(1, "/sys/fs/cgroup/systemd/ctr", "/sys/fs/cgroup/systemd", 40)),
        (1, _c(1, "/sys/fs/cgroup/devices/ctr", "/sys/fs/cgroup/devices", 36)),
        (2, _c(1, "/sys/fs/cgroup/cpu/ctr", "/sys/fs/cgroup/cpu", 32)),
        (3, _c(2, "/sys/fs/cgroup/unified/ctr", "/sys/fs/cgroup/unified", 41)))),
    (RUNC_V2_CGROUP, PURE_V2_MOUNTINFO, ((3, _c(2, "/sys/fs/cgroup/ctr", "/sys/fs/cgroup", 27)),)),
    (ROOT_ONLY_CGROUP, HYBRID_MOUNTINFO, ()),
    ("4:cpu,devices:/a\n", COMOUNT_MOUNTINFO,
     ((0, _c(1, "/sys/fs/cgroup/cpu,devices/a", "/sys/fs/cgroup/cpu,devices", 40)),)),
    ("5:devices:/ctr/../../etc\n", HYBRID_MOUNTINFO, ()),
], ids=["hybrid-every-hierarchy", "pure-v2", "root-only", "co-mounted", "dotdot"])
def test_hierarchy_candidates_for_the_ldconfig_sandbox(
        cgroup: str, mountinfo: str, want: tuple[tuple[int, CgroupCandidate], ...]) -> None:
    """Every non-root cgroup of the container in every hierarchy: the sandbox joins them."""
    got = hierarchy_candidates(parse_proc_cgroup(cgroup), parse_mountinfo(mountinfo))
    assert got == want


@pytest.mark.parametrize(("cgroup", "want"), [
    (RUNC_V1_CGROUP, ((1, "/ctr"), (2, "/ctr"))),
    (RUNC_V2_CGROUP, ((2, "/ctr"),)),
    (ROOT_ONLY_CGROUP, ()),
    ("4:cpu,devices:/a\n", ((1, "/a"),)),
    ("5:devices:/\n0::/user.slice/session-1.scope\n", ((2, "/user.slice/session-1.scope"),)),
], ids=["runc-v1", "runc-v2", "root-only", "co-mounted", "systemd-session"])
def test_device_cgroups(cgroup: str, want: tuple[tuple[int, str], ...]) -> None:
    assert device_cgroups(parse_proc_cgroup(cgroup)) == want


def test_parse_proc_cgroup_fields() -> None:
    lines = parse_proc_cgroup("4:cpu,cpuacct:/a:b\n9:name=systemd:/\n0::/x\n")
    assert lines == (CgroupLine(4, ("cpu", "cpuacct"), "/a:b"),
                     CgroupLine(9, ("name=systemd",), "/"), CgroupLine(0, (), "/x"))


@pytest.mark.parametrize("text", ["5:devices\n", "x:devices:/a\n", "5:devices:relative\n"],
                         ids=["two-fields", "bad-id", "relative-path"])
def test_parse_proc_cgroup_malformed(text: str) -> None:
    with pytest.raises(ValueError, match="line 1"):
        parse_proc_cgroup(text)


def test_parse_mountinfo_optional_fields_and_escapes() -> None:
    (m,) = parse_mountinfo("36 31 0:33 /a\\040b /x\\011y rw shared:14 master:3 propagate_from:2"
                           " - cgroup my\\040src rw,devices\n")
    assert (m.mount_id, m.root, m.mount_point, m.fstype) == (36, "/a b", "/x\ty", "cgroup")
    assert m.super_options == ("rw", "devices")


@pytest.mark.parametrize("text", ["36 31 0:33 / /x rw cgroup cgroup rw\n",
                                  "36 31 0:33 / /x rw -\n"], ids=["no-separator", "truncated"])
def test_parse_mountinfo_malformed(text: str) -> None:
    with pytest.raises(ValueError, match="line 1"):
        parse_mountinfo(text)


@pytest.mark.parametrize(("raw", "want"), [("/plain", "/plain"), ("\\040", " "),
                                           ("a\\012b\\134", "a\nb\\"), ("\\08x", "\\08x")],
                         ids=["plain", "space", "newline-backslash", "not-octal"])
def test_unescape_mountinfo(raw: str, want: str) -> None:
    assert unescape_mountinfo(raw) == want


@pytest.mark.parametrize(("no_cgroups", "hook_in_userns", "want"), [
    (False, False, None), (True, False, "no-cgroups"), (False, True, "user namespace"),
    (True, True, "no-cgroups")], ids=["update", "config", "userns", "both"])
def test_should_skip_cgroups(no_cgroups: bool, hook_in_userns: bool, want: str | None) -> None:
    reason = should_skip_cgroups(no_cgroups, hook_in_userns)
    assert (reason is None) if want is None else (want in (reason or ""))


@pytest.mark.parametrize("rule", [
    DeviceRule(-1, 0), DeviceRule(195, -1), DeviceRule(4096, 0), DeviceRule(195, 1 << 20),
    DeviceRule(195, 0, ""), DeviceRule(195, 0, "rx"), DeviceRule(195, 0, "rr")],
    ids=["neg-major", "neg-minor", "big-major", "big-minor", "no-access", "bad-letter",
         "repeat"])
def test_validate_rules_refuses(rule: DeviceRule) -> None:
    with pytest.raises(CgroupError, match=f"device rule c {rule.major}:{rule.minor}"):
        validate_rules([rule])


def test_validate_rules_dedupes_in_order() -> None:
    a, b = DeviceRule(195, 0), DeviceRule(195, 255, "rwm")
    assert validate_rules([a, b, a]) == (a, b)


def test_parse_devices_list() -> None:
    assert parse_devices_list("a *:* rwm\nc 136:* rwm\nb 8:0 r\n") == (
        ListEntry("a", None, None, "rwm"), ListEntry("c", 136, None, "rwm"),
        ListEntry("b", 8, 0, "r"))
    with pytest.raises(ValueError):
        parse_devices_list("c 1:3\n")


@pytest.mark.parametrize(("listed", "rule", "want"), [
    ("", DeviceRule(195, 0), "rw"),
    ("a *:* rwm", DeviceRule(195, 0), ""),
    ("c 195:* rw", DeviceRule(195, 0), ""),
    ("c *:0 r", DeviceRule(195, 0), "w"),
    ("c 195:0 r\nc 195:0 m", DeviceRule(195, 0, "rwm"), "w"),
    ("b 195:0 rwm", DeviceRule(195, 0), "rw"),
    ("c 195:1 rwm", DeviceRule(195, 0), "rw"),
], ids=["empty", "allow-all", "minor-wildcard", "major-wildcard-partial", "merged-entries",
        "block-does-not-count", "other-minor"])
def test_missing_access(listed: str, rule: DeviceRule, want: str) -> None:
    assert missing_access(parse_devices_list(listed), rule) == want


# -- real cgroup v1 ---------------------------------------------------------------------------
NODES = {"nvidia0": (195, 0), "nvidia1": (195, 1), "nvidiactl": (195, 255), "null": (1, 3)}


@pytest.fixture
def nodes(tmp_path: object) -> dict[str, str]:
    require_v1_devices()
    return make_nodes(str(tmp_path), NODES)


@pytest.mark.root
def test_v1_allow_then_undo(nodes: dict[str, str]) -> None:
    libc = Libc()
    with v1_cgroup(allow=("c 1:3 rwm",)) as cg, CgroupProbe(f"{cg}/cgroup.procs") as probe:
        assert probe.open_errno(nodes["nvidia0"]) == errno.EPERM
        target = find_cgroup(probe.pid)
        assert target == CgroupTarget(1, cg)
        assert find_cgroup(probe.pid, mountinfo_pid=os.getpid()) == target
        rules = [DeviceRule(195, 0, what="/dev/nvidia0"), DeviceRule(195, 255),
                 DeviceRule(1, 3)]
        change = allow_devices(target, rules, libc)
        assert devices_list(cg) == ["c 1:3 rwm", "c 195:0 rw", "c 195:255 rw"]
        assert probe.open_errno(nodes["nvidia0"]) == errno.ENXIO
        assert probe.open_errno(nodes["nvidiactl"]) == errno.ENXIO
        assert probe.open_errno(nodes["nvidia1"]) == errno.EPERM
        assert probe.open_errno(nodes["null"]) == 0
        change.undo()
        assert devices_list(cg) == ["c 1:3 rwm"]  # the pre-existing rule survives undo
        assert probe.open_errno(nodes["nvidia0"]) == errno.EPERM
        assert probe.open_errno(nodes["null"]) == 0
        change.undo()  # idempotent


@pytest.mark.root
def test_v1_partial_rule_undo_keeps_old_access(nodes: dict[str, str]) -> None:
    with v1_cgroup(allow=("c 195:0 r",)) as cg:
        change = allow_devices(CgroupTarget(1, cg), [DeviceRule(195, 0)], Libc())
        assert devices_list(cg) == ["c 195:0 rw"]
        change.undo()
        assert devices_list(cg) == ["c 195:0 r"]


@pytest.mark.root
@pytest.mark.parametrize(("deny_all", "allow"), [(False, ()), (True, ("c 195:* rw",))],
                         ids=["allow-all-cgroup", "wildcard-already"])
def test_v1_already_allowed_writes_nothing(nodes: dict[str, str], deny_all: bool,
                                           allow: tuple[str, ...]) -> None:
    with v1_cgroup(deny_all=deny_all, allow=allow) as cg:
        before = devices_list(cg)
        change = allow_devices(CgroupTarget(1, cg), [DeviceRule(195, 0)], Libc())
        assert "allowed nothing" in change.describe()
        change.undo()
        assert devices_list(cg) == before


@pytest.mark.root
def test_v1_parent_denies_rolls_back(nodes: dict[str, str]) -> None:
    with v1_cgroup(allow=("c 1:3 rwm", "c 195:0 rw")) as parent, \
            v1_cgroup(parent=parent) as cg:
        want = (r"allow devices in .*: write 'c 195:1 rw' to devices.allow: "
                r"Operation not permitted \(the parent cgroup must allow")
        with pytest.raises(CgroupError, match=want):
            allow_devices(CgroupTarget(1, cg), [DeviceRule(195, 0), DeviceRule(195, 1)], Libc())
        assert devices_list(cg) == []  # 195:0 was written, then denied again


@pytest.mark.root
def test_v1_refuses_non_cgroupfs(tmp_path: object) -> None:
    require_v1_devices()
    d = os.path.join(str(tmp_path), "fake")
    os.mkdir(d)
    open(os.path.join(d, "devices.allow"), "w").close()
    with pytest.raises(CgroupError, match="not a cgroup v1 filesystem"):
        allow_devices(CgroupTarget(1, d), [DeviceRule(195, 0)], Libc())


@pytest.mark.root
def test_v2_target_refuses_v1_dir() -> None:
    require_v1_devices()
    with v1_cgroup() as cg, pytest.raises(CgroupError, match="not a cgroup v2 filesystem"):
        allow_devices(CgroupTarget(2, cg), [DeviceRule(195, 0)], Libc())


def test_no_rules_is_no_change() -> None:
    change = allow_devices(CgroupTarget(1, "/nonexistent"), [], Libc())
    assert "unchanged" in change.describe()


# -- find_cgroup against real processes --------------------------------------------------------
@pytest.mark.root
def test_find_cgroup_root_only_is_none() -> None:
    pid = os.getpid()
    with open(f"/proc/{pid}/cgroup") as f:
        lines = parse_proc_cgroup(f.read())
    if any(ln.path != "/" for ln in lines if "devices" in ln.controllers or not ln.controllers):
        pytest.skip("this test process is not in the root device cgroups")
    assert find_cgroup(pid) is None


def test_find_cgroup_gone_process() -> None:
    with pytest.raises(CgroupError, match="still running"):
        find_cgroup(0x3FFFFFFF)


def _forced_v2_find() -> tuple[CgroupTarget | None, str]:
    """Like runc forced onto v2: cgroup2 over /sys/fs/cgroup hides every v1 mount."""
    libc = Libc()
    libc.mount("none", "/sys/fs/cgroup", "cgroup2", 0)
    with v2_cgroup("/sys/fs/cgroup") as cg, CgroupProbe(f"{cg}/cgroup.procs") as probe:
        return find_cgroup(probe.pid), cg


@pytest.mark.root
def test_find_cgroup_forced_v2_skips_hidden_mounts() -> None:
    require_v1_devices()
    target, cg = in_private_mntns(_forced_v2_find)
    assert target == CgroupTarget(2, cg)


@pytest.mark.root
def test_find_cgroup_unreachable_mounts_is_an_error() -> None:
    require_v1_devices()

    def find_without_mounts(pid: int) -> str:
        libc = Libc()
        for where in ("/sys/fs/cgroup/devices", "/sys/fs/cgroup/unified"):
            if os.path.ismount(where):
                libc.umount2(where, 2)  # MNT_DETACH, in the private namespace only
        try:
            find_cgroup(pid)
        except CgroupError as err:
            return str(err)
        return "no error"

    with v1_cgroup() as cg, CgroupProbe(f"{cg}/cgroup.procs") as probe:
        msg = in_private_mntns(lambda: find_without_mounts(probe.pid))
    assert "no mount of its hierarchy is reachable" in msg and "no-cgroups = true" in msg


def _v2_via_private_mount() -> tuple[CgroupTarget | None, str]:
    libc = Libc()
    with cgroup2_mount(libc) as root, v2_cgroup(root) as cg, \
            CgroupProbe(f"{cg}/cgroup.procs") as probe:
        return find_cgroup(probe.pid), cg


@pytest.mark.root
def test_find_cgroup_v2_through_private_mount() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    target, cg = in_private_mntns(_v2_via_private_mount)
    # the probe's v1 devices cgroup is "/" (skipped); v2 is reachable via our mount or, on a
    # hybrid host, via /sys/fs/cgroup/unified: both are the same hierarchy
    assert target is not None and target.version == 2
    assert target.path.endswith("/" + os.path.basename(cg))
