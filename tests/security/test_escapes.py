"""Escape fixtures F1-F20 of security.md §2 as real runc containers (simulated driver).

Each case builds the malicious rootfs/spec, starts it under runc with nvhook's installed
launcher as the prestart hook and checks the oracles: no host marker created, watched host
files unchanged, no driver-looking entry in host directories, host mount table unchanged, no
host directory mounted into the container, bounded start time; a refused start fails with one
line that names the path. The table of cases is `attacks.CASES` (F1-F15 without the races);
F16-F20 need their own runners below.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest

import tests.fixtures.attacks_env  # noqa: F401  (registers F11)
from nvhook.dev.demo.bundle import HookEntry, Runc
from nvhook.dev.demo.rootfs import copy_rootfs
from tests.fixtures.attacks import CASES, Expect, see_script
from tests.fixtures.containers import RootfsCache
from tests.fixtures.security import (
    LIB,
    PROBE,
    START_LIMIT_S,
    AttackRig,
    HostOracle,
    compile_tool,
    gpu_spec,
    ns_container,
    run_hook,
    symlinks,
    wrap_script,
)
from tests.security.conftest import LONG

pytestmark = [pytest.mark.root, pytest.mark.e2e]


@pytest.mark.parametrize("name", list(CASES), ids=list(CASES))
def test_escape_fixture(name: str, rig: AttackRig, oracle: HostOracle) -> None:
    scenario = CASES[name](rig, oracle)
    out = rig.start(PROBE + scenario.script, **scenario.bundle)
    print(f"{name}: {'started' if out.ok else 'refused: ' + out.error} "
          f"({out.result.seconds:.2f}s)")
    if scenario.expect is Expect.RUNTIME_REFUSES:
        assert not out.ok and "error running hook" not in out.result.stderr, out.describe()
        assert not out.hook_passed
    elif scenario.expect is Expect.HOOK_PASSES:
        assert out.hook_passed, out.describe()
    else:
        out.assert_contained(scenario.limit_s or START_LIMIT_S)
    oracle.assert_clean()
    if scenario.expect is Expect.START:
        assert out.ok, out.describe()
    elif scenario.expect is Expect.REFUSE:
        out.assert_one_line_error(*scenario.needles)
    if out.ok and scenario.check is not None:
        scenario.check(out)


# ---- F16 hostile state / spec: the hook run by hand against a namespace'd "container" --------

def _state(pid: object, bundle: Path) -> bytes:
    return json.dumps({"ociVersion": "1.0.2", "id": "f16", "status": "creating", "pid": pid,
                       "bundle": str(bundle)}).encode()


F16_CASES = {
    # name: (pid kind, root.path kind, needles of the one-line error)
    "own-pid": ("self", "rootfs", ("hook's own",)),
    "pid-1": ("1", "rootfs", ("/proc/1",)),
    "host-ns-process": ("hostsleeper", "rootfs", ("hook's own",)),
    "no-such-pid": ("dead", "rootfs", ("no such process",)),
    "zombie-init": ("zombie", "rootfs", ("pid",)),
    "pid-not-an-int": ("string", "rootfs", ("pid",)),
    "pid-negative": ("negative", "rootfs", ("pid",)),
    "root-dotdot-to-slash": ("ctr", "../../../../../../../../..", ("check rootfs",)),
    "root-is-slash": ("ctr", "/", ("check rootfs",)),
    "root-is-host-etc": ("ctr", "/etc", ("/etc",)),
    "root-is-host-dir-with-proc": ("ctr", "other", ("not a procfs mount",)),
    "rootfs-is-symlink": ("ctr", "link", ("symlink",)),
    "rootfs-link-to-slash": ("ctr", "link-slash", ("symlink",)),
}


@pytest.mark.parametrize("name", list(F16_CASES), ids=[f"F16-{n}" for n in F16_CASES])
def test_f16_hostile_state_and_spec(name: str, rig: AttackRig, oracle: HostOracle,
                                    rootfs_cache: RootfsCache, tmp_path: Path) -> None:
    pid_kind, root_kind, needles = F16_CASES[name]
    bundle = tmp_path / "f16"
    bundle.mkdir()
    rootfs = copy_rootfs(rootfs_cache.get(), bundle / "rootfs")
    other = tmp_path / "other"
    (other / "proc").mkdir(parents=True)
    (bundle / "link").symlink_to("rootfs")
    (bundle / "link-slash").symlink_to("/")
    root_path = {"other": str(other), "link": str(bundle / "link"),
                 "link-slash": str(bundle / "link-slash")}.get(root_kind, root_kind)
    (bundle / "config.json").write_text(json.dumps(gpu_spec(root_path)))
    before = {d: sorted(os.listdir(d)) for d in ("/", "/etc", other, rootfs)}
    helpers: list[subprocess.Popen[bytes]] = []
    try:
        with ns_container(rootfs) as ctr:
            pid: object = {"self": os.getpid(), "1": 1, "ctr": ctr, "string": "1",
                           "negative": -5, "dead": 4_000_000}.get(pid_kind)
            if pid_kind in ("hostsleeper", "zombie"):
                helpers.append(subprocess.Popen(["sleep" if pid_kind == "hostsleeper" else
                                                 "true"] + (["60"] if pid_kind ==
                                                            "hostsleeper" else [])))
                pid = helpers[-1].pid
                if pid_kind == "zombie":
                    _wait_zombie(helpers[-1].pid)
            started = time.monotonic()
            proc = run_hook(rig.launcher, rig.sim.config_path, _state(pid, bundle), cwd=bundle)
            elapsed = time.monotonic() - started
    finally:
        for h in helpers:
            h.kill()
            h.wait()
    err = proc.stderr.strip()
    print(f"F16-{name}: rc {proc.returncode} ({elapsed:.2f}s): {err}")
    assert proc.returncode == 1, proc
    assert err and "\n" not in err and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, f"{needle!r} not in {err!r}"
    assert elapsed < START_LIMIT_S
    assert {d: sorted(os.listdir(d)) for d in before} == before
    oracle.assert_clean()


def _wait_zombie(pid: int) -> None:
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)


# ---- F17 device cgroup: only the requested GPU -----------------------------------------------

F17_SCRIPT = (
    "echo @@open; for m in 0 1 2 3 4 5 6 7; do mknod /tmp/g$m c 195 $m; "
    "(exec 3<>/tmp/g$m) 2>&1 | sed 's/.*: //' | tr -d '\\n'; echo \" $m\"; done; "
    "echo @@rules; cat /sys/fs/cgroup/devices/devices.list"
)


def test_f17_device_cgroup_allows_only_the_requested_gpu(rig: AttackRig,
                                                         oracle: HostOracle) -> None:
    """F17 / CVE-2021-1056: GPU 0 requested; mknod'ed 195:1..7 are denied (EPERM), 195:0 is
    allowed (ENXIO: no driver). The rules name single minors (no `c 195:* rw`, no `a`).
    The systemd half of F17 (daemon-reload rewriting the cgroup) is
    tests/e2e/test_systemd_reload.py (tests/security/README.md)."""
    out = rig.start(PROBE + "; " + F17_SCRIPT, gpus="0")
    out.assert_contained()
    assert out.ok, out.describe()
    opened = out.sections["open"]
    assert opened[0] == "No such device or address 0", opened
    assert opened[1:] == [f"Operation not permitted {m}" for m in range(1, 8)], opened
    rules = out.sections["rules"]
    assert sorted(r for r in rules if " 195:" in r) == ["c 195:0 rw", "c 195:255 rw"], rules
    wide = [r for r in rules if r.startswith("a") or " 195:*" in r
            or ("*:*" in r and set(r.split()[-1]) - {"m"})]
    assert not wide, f"wildcard rules that allow access: {wide}"
    oracle.assert_clean()


# ---- F18 mount propagation (T-LEAK) ------------------------------------------------------------

def _leak_wrap(vol: Path, before: Path, after: Path) -> tuple[str, ...]:
    q = shlex.quote
    return wrap_script(
        f"mount -t tmpfs shared-vol {q(str(vol))} && mount --make-rshared {q(str(vol))} && "
        f"mkdir {q(str(vol))}/lib; [ -e {q(str(before))} ] || "
        f"cat /proc/self/mountinfo > {q(str(before))}; "
        f'"$@"; rc=$?; [ -e {q(str(after))} ] || cat /proc/self/mountinfo > {q(str(after))}; '
        "exit $rc")  # `runc delete` runs through the wrapper too: the files are the run's


def _mount_diff(before: Path, *afters: Path) -> list[str]:
    def strip(path: Path) -> set[str]:
        return {ln.split(" ", 2)[2] for ln in path.read_text().splitlines()}
    base = strip(before)
    return sorted(set().union(*(strip(a) for a in afters if a.exists())) - base)


@pytest.mark.parametrize("linked", [False, True], ids=["F18-T-LEAK-rshared-volume",
                                                       "F18-T-LEAK-lib-dir-in-rshared-volume"])
def test_f18_no_mount_propagates_to_the_host(rig: AttackRig, oracle: HostOracle,
                                             tmp_path: Path, linked: bool) -> None:
    """A shared tmpfs (in the runtime's namespace, a stand-in for the host) is bind-mounted
    rshared at /empty with rootfsPropagation rshared; with `linked`, the image's lib dir is a
    symlink into it. The runtime's namespace must gain no mount, during (dumped by a hook
    after ours) or after the run; linked, the hook refuses (the mount would propagate)."""
    cycles = 50 if LONG else 3
    for i in range(cycles if not linked else 1):
        vol, before = tmp_path / f"vol{i}", tmp_path / f"before{i}"
        during, after = tmp_path / f"during{i}", tmp_path / f"after{i}"
        vol.mkdir()
        dump = HookEntry("/bin/sh", ("sh", "-c", f"cat >/dev/null; cat /proc/self/mountinfo "
                                     f"> {shlex.quote(str(during))}"))
        bundle = rig.bundle(mutate=symlinks((LIB, "/empty/lib")) if linked else None,
                            after=(dump,))
        spec = json.loads((bundle / "config.json").read_text())
        spec["linux"]["rootfsPropagation"] = "rshared"
        spec["mounts"].append({"destination": "/empty", "type": "bind", "source": str(vol),
                               "options": ["rbind", "rshared"]})
        (bundle / "config.json").write_text(json.dumps(spec))
        out = rig.run(bundle, runc=Runc(wrap=_leak_wrap(vol, before, after)))
        out.assert_contained()
        leaked = _mount_diff(before, during, after)
        assert not leaked, "mounts propagated to the runtime's namespace:\n" + "\n".join(leaked)
        if linked:
            out.assert_one_line_error(LIB, "shared with the host")
        else:
            assert out.ok, out.describe()
    oracle.assert_clean()


# ---- F19 fd hygiene of what we run in the container context ------------------------------------

def test_f19_ldconfig_helper_has_only_stdio_and_no_host(rig: AttackRig, oracle: HostOracle,
                                                        tools_dir: Path) -> None:
    """F19 / CVE-2024-21626, CVE-2024-0135/0136/0137: the host "ldconfig" (here a static
    probe configured as `@<probe>`) sees fds 0-2 only (stdin the host /dev/null), cwd /, no
    capabilities, no_new_privs, seccomp, an empty env, pid 2 of its own pid namespace (below
    the sandbox's worker), only `lo`, no /proc (nothing of the host through /proc/1/root), no
    block device."""
    probe = compile_tool("fdprobe", tools_dir, static=True)
    config = rig.config(replace={"[nvidia-container-cli]\n":
                                 f'[nvidia-container-cli]\nldconfig = "@{probe}"\n',
                                 "[nvhook]\n": '[nvhook]\nldcache = "ldconfig"\n'})
    out = rig.start(PROBE + "; echo @@probe; cat /tmp/fdprobe.txt", config=config)
    out.assert_contained()
    assert out.ok, out.describe()
    facts = dict(line.split("=", 1) for line in out.sections["probe"])
    assert facts["fds"] == "0,1,2,", facts
    assert facts["fd0"] == "chr:1:3", facts
    assert facts["fd1"].startswith("fifo") and facts["fd2"].startswith("fifo"), facts
    assert facts["cwd"] == "/", facts
    assert (facts["capeff"], facts["capprm"], facts["capbnd"]) == ("000000000", "000000000",
                                                                  "0"), facts
    assert facts["nonewprivs"] == "1" and facts["seccomp"] == "2", facts
    assert facts["env"] == "0" and facts["pid"] == "2", facts
    assert facts["netifs"] in ("lo,", ""), facts
    assert facts["proc1root"] == facts["procself"] == "no", facts
    assert facts["devvda"] != "opened", facts
    oracle.assert_clean()


# ---- F20 read-only rootfs ------------------------------------------------------------------------

RO_SCRIPT = ("; echo @@ro; touch /newfile 2>&1 | sed 's/.*: //'; "
             "awk '$5 == \"/\" {print $6}' /proc/self/mountinfo | cut -d, -f1")


def _ro_wrap(rootfs: Path, after: Path) -> tuple[str, ...]:
    """rootfs read-only already when runc and the hooks run (a ro bind in runc's namespace);
    afterwards the flags of that mount are recorded: the hook must not have made it rw."""
    r = shlex.quote(str(rootfs))
    return wrap_script(
        f"mount --bind {r} {r} && mount -o remount,bind,ro {r} && "
        f'{{ "$@"; rc=$?; grep " {rootfs} " /proc/self/mountinfo | cut -d" " -f6 '
        f"> {shlex.quote(str(after))}; exit $rc; }}")


def test_f20_readonly_rootfs_starts(rig: AttackRig, oracle: HostOracle) -> None:
    """root.readonly: runc remounts / read-only after prestart; the GPU works, / stays ro."""
    out = rig.start(PROBE + RO_SCRIPT + see_script(f"{LIB}/libcuda.so.1"), readonly=True)
    out.assert_contained()
    assert out.ok, out.describe()
    assert out.sections["ro"] == ["Read-only file system", "ro"], out.sections["ro"]
    assert out.sections["sees"] == ["ok"]
    oracle.assert_clean()


def test_f20_readonly_at_prestart(rig: AttackRig, oracle: HostOracle, tmp_path: Path) -> None:
    """The rootfs is already read-only when the hook runs: without the mount points in the
    image the hook fails naming the read-only path; with them (a rootfs that got them from an
    earlier rw start) it starts. The rootfs is never remounted rw, nothing is written."""
    first = rig.start(PROBE)  # rw: creates every mount point in its rootfs copy
    assert first.ok, first.describe()
    for prepared in (False, True):
        kw = {"rootfs": first.rootfs} if prepared else {}
        bundle = rig.factory.bundle(["/bin/sh", "-c", PROBE + RO_SCRIPT],
                                    env=["NVIDIA_VISIBLE_DEVICES=0",
                                         "NVIDIA_DRIVER_CAPABILITIES=utility,compute"],
                                    prestart=rig.hooks(), **kw)  # type: ignore[arg-type]
        listing = sorted(str(p) for p in (bundle / "rootfs").rglob("*") if "proc" not in p.parts)
        flags = tmp_path / f"flags-{prepared}"
        out = rig.run(bundle, runc=Runc(wrap=_ro_wrap(bundle / "rootfs", flags)))
        out.assert_contained()
        if prepared:
            assert out.ok, out.describe()
            assert out.sections["ro"][0] == "Read-only file system", out.describe()
        else:
            out.assert_one_line_error("read-only")
        assert flags.read_text().split(",")[0] == "ro", flags.read_text()
        now = sorted(str(p) for p in (bundle / "rootfs").rglob("*") if "proc" not in p.parts)
        assert now == listing
    oracle.assert_clean()
