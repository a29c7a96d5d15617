"""The spec's hook, `nvhook cdi hook apply` (`nvhook.cdi.spec_hook_args`, `.spec_hook`,
`.spec_hook_plan`): every
input in its arguments, the devices granted by the request (the CDI resolution's grant
variables) and never beyond what config.json's cgroup rules allow, stale specs refused; the
wrapper's application of CDI edits to a type-confused config.json."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvhook.cdi.resolve import apply_edits
from nvhook.cdi.spec_hook import check_present, granted_devices, rule_allows
from nvhook.cdi.spec_hook_args import DeviceEntry, HookInputs, grant_env, parse, render
from nvhook.cdi.spec_hook_plan import hook_plan
from nvhook.errors import CdiError, WrapperError
from nvmount.discover.procfiles import ProcFile
from nvmount.plan.types import ContainerLayout, Symlink, Tmpfs, WriteFile

LAYOUT = ContainerLayout("/usr/bin", "/usr/lib/x86_64-linux-gnu", "/usr/lib/i386-linux-gnu")


def inputs(tmp: Path | None = None) -> HookInputs:
    node = str(tmp / "nvidia0") if tmp else "/dev/nvidia0"
    h = HookInputs()
    h.driver_root, h.proc_dir, h.sim_procfs = "/", "/proc/driver/nvidia", True
    h.links = (("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so"),)
    h.folders = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/i386-linux-gnu")
    h.ldcache = (("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", False),)
    h.driver_version, h.compat_mode, h.app_profile = "550.54.15", "ldconfig", True
    gpu = DeviceEntry(((node, 195, 0), ("/dev/dri/card0", 226, 0)))
    gpu.proc_dirs = ("/proc/driver/nvidia/gpus/0000:07:00.0",)
    gpu.links = (("../card0", "/dev/dri/by-path/pci-0000:07:00.0-card"),)
    mig = DeviceEntry(((node, 195, 0), ("/dev/nvidia-caps/nvidia-cap21", 507, 21)))
    mig.proc_dirs = gpu.proc_dirs
    mig.files = ("/proc/driver/nvidia/capabilities/gpu0/mig/gi1/access",)
    other = DeviceEntry((("/dev/nvidia3", 195, 3),))
    other.proc_dirs = ("/proc/driver/nvidia/gpus/0000:0f:00.0",)
    h.devices = {"0": gpu, "0:1": mig, "3": other}
    return h


def test_arguments_round_trip_and_grant_names() -> None:
    args = render(inputs())
    assert parse(args) == inputs()
    assert "--device=0:1=/dev/nvidia0:195:0,/dev/nvidia-caps/nvidia-cap21:507:21" in args
    assert grant_env("0:1") == "NVHOOK_CDI_DEVICE_0_1=0:1"
    spaced = [a for arg in args for a in (arg.split("=", 1) if arg.startswith(
        ("--link", "--folder")) else [arg])]
    assert parse(spaced) == inputs()  # `--flag value` works too


@pytest.mark.parametrize(("args", "message"), [
    (["create-symlinks"], "unexpected argument"),
    (["--nope=1"], "unknown flag --nope"),
    (["--link=a"], "expected A::B"),
    (["--link=a::relative"], "is not an absolute path"),
    (["--folder"], "--folder needs a value"),
    (["--ldcache=fast"], "--ldcache=fast (one of write, ldconfig)"),
    (["--device=0=/dev/nvidia0:195"], "expected HOSTPATH:MAJOR:MINOR"),
    (["--device-proc=0=/proc/x"], "no --device=0 before it"),
    (["--device=0=/dev/nvidia0:195:0", "--device=0=/dev/nvidia0:195:0"], "given twice"),
    (["--proc=/p", "--device=0=/dev/nvidia0:195:0", "--device-proc=0=/elsewhere"],
     "is not under --proc=/p"),
    (["--proc=/p", "--device=0=/dev/nvidia0:195:0", "--device-file=0=/p/../etc/shadow"],
     "is not under --proc=/p"),
])
def test_bad_arguments_are_one_line_errors(args: list[str], message: str) -> None:
    with pytest.raises(CdiError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse(args)


ALLOW = {"allow": True, "type": "c", "access": "rw"}


@pytest.mark.parametrize(("rules", "node", "want"), [
    ([{"allow": False, "access": "rwm"}, {**ALLOW, "major": 195, "minor": 0}], (195, 0), True),
    ([{"allow": False, "access": "rwm"}], (195, 0), False),
    (None, (195, 0), False),
    ([{"allow": True, "access": "rwm"}], (195, 7), True),  # privileged: everything
    ([{**ALLOW, "major": 195, "minor": 0}, {"allow": False, "type": "c", "major": 195,
                                             "access": "w"}], (195, 0), False),
    ([{**ALLOW, "major": 195, "minor": 0, "access": "r"}], (195, 0), False),
    ([{**ALLOW, "major": 195, "minor": -1}], (195, 9), True),
    ([{**ALLOW, "major": "195", "minor": 0}], (195, 0), False),  # type-confused: no match
    ([{**ALLOW, "type": "b", "major": 195, "minor": 0}], (195, 0), False),
    (["x", 5, {"allow": "yes"}], (195, 0), False),
], ids=["exact", "denied", "no-rules", "wildcard", "later-deny", "read-only", "minor-wildcard",
        "string-major", "block", "junk"])
def test_rules_as_the_kernel_reads_them(rules: Any, node: tuple[int, int], want: bool) -> None:
    assert rule_allows(rules, *node) is want


def test_grant_is_the_request_within_the_rules() -> None:
    """Issue 19 class 2: a variable for a device whose nodes config.json does not allow grants
    nothing; a device no variable names is not granted even when its nodes are allowed."""
    h = inputs()
    rules = [{"allow": False, "access": "rwm"}, {**ALLOW, "major": 195, "minor": 0},
             {**ALLOW, "major": 226, "minor": 0}, {**ALLOW, "major": 195, "minor": 3}]
    env = ["PATH=/bin", grant_env("0"), grant_env("0:1"), "NVHOOK_CDI_DEVICE_9=9"]
    assert granted_devices(h, env, rules) == (("0",), ("0:1",))
    assert granted_devices(h, [grant_env("3")], rules) == (("3",), ())
    assert granted_devices(h, ["NVHOOK_CDI_DEVICE_X=3", "NVHOOK_CDI_DEVICE_X=0"],
                           rules) == (("0",), ())  # the last value of a name wins
    assert granted_devices(h, [], [{"allow": True, "access": "rwm"}]) == ((), ())


def test_stale_nodes_are_refused(tmp_path: Path) -> None:
    h = inputs(tmp_path)
    with pytest.raises(CdiError, match=r"device 0: .*nvidia0 \(195:0\): no such file"):
        check_present(h, ("0",))
    (tmp_path / "nvidia0").write_text("")
    with pytest.raises(CdiError, match="not a character device on this host"):
        check_present(h, ("0",))
    check_present(h, ())


def test_plan_for_a_gpu_and_a_mig_device() -> None:
    files = (ProcFile("params", b"ModifyDeviceFiles: 1\n", 0o444),)
    plan, warnings = hook_plan(inputs(), ("0", "0:1"), files, LAYOUT)
    targets = [e.target for e in plan.entries]
    assert targets[:3] == ["/proc/driver/nvidia", "/proc/driver/nvidia/params",
                           "/proc/driver/nvidia/gpus/0000:07:00.0"]  # the GPU's once
    assert "/proc/driver/nvidia/capabilities/gpu0/mig/gi1/access" in targets
    assert plan.entries[1].data == b"ModifyDeviceFiles: 0\n"  # type: ignore[union-attr]
    profile = [e for e in plan.entries if isinstance(e, WriteFile) and "profiles" in e.target]
    assert b"0x1]" in profile[0].data
    assert {e.what for e in plan.entries if isinstance(e, Symlink)} == {"driver link",
                                                                       "dri link"}
    assert plan.device_rules == () and plan.ldconfig_dirs == inputs().folders
    assert not warnings
    bare, _ = hook_plan(inputs(), (), (), LAYOUT)
    assert [type(e) for e in bare.entries] == [Tmpfs, Tmpfs, Symlink]  # no GPU, no file


def test_compat_dir_leads_when_the_image_has_a_newer_libcuda() -> None:
    layout = ContainerLayout(LAYOUT.bins_dir, LAYOUT.libs_dir, LAYOUT.libs32_dir,
                             ("/usr/local/cuda/compat/libcuda.so.999.1",))
    plan, _ = hook_plan(inputs(), (), (), layout)
    assert plan.ldconfig_dirs[0] == "/usr/local/cuda/compat"
    h = inputs()
    h.compat_mode = "disabled"
    assert hook_plan(h, (), (), layout)[0].ldconfig_dirs == h.folders


def test_hook_cli_errors_are_one_line(tmp_path: Path) -> None:
    import subprocess

    from tests.unit.test_cli import NVHOOK

    for args, message in ((["create-symlinks", "--link", "a::/b"], "unknown hook"),
                          (["apply", "--bogus"], "unknown flag --bogus")):
        proc = subprocess.run([*NVHOOK, "cdi", "hook", *args], capture_output=True, text=True,
                              check=False, timeout=60, stdin=subprocess.DEVNULL)
        assert proc.returncode != 0 and message in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert os.path.isdir(tmp_path)


# -- the wrapper applies edits to whatever config.json holds -----------------------------------

EDITS = {"env": ["A=1"], "deviceNodes": [{"path": "/dev/x", "type": "c", "major": 1,
                                          "minor": 3}],
         "mounts": [{"hostPath": "/a", "containerPath": "/b"}],
         "hooks": [{"hookName": "createRuntime", "path": "/h"}], "additionalGids": [5]}
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.sampled_from(["process", "env", "linux", "devices",
                                                       "resources", "mounts", "hooks", "user",
                                                       "createRuntime", "additionalGids",
                                                       "destination", "path", "uid"]),
                                      inner, max_size=4), max_leaves=10)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["process", "linux", "mounts", "hooks"]), JSON,
                       max_size=4))
def test_type_confused_config_json_gives_a_wrapper_error(doc: dict[str, Any]) -> None:
    try:
        apply_edits(doc, EDITS, "spec")
    except WrapperError as err:
        assert "\n" not in str(err)


def test_memory_limit_arguments_round_trip() -> None:
    """Issue 31: `--memory-limits` and the full GPUs' `--device-uuid` (only with it)."""
    h = inputs()
    h.devices["0"].uuid = "GPU-c90b723b-a04c-5d91-a664-820ece72acc2"
    assert not any(a.startswith("--device-uuid") for a in render(h))  # the setting is off
    h.memory_limits = True
    args = render(h)
    assert "--memory-limits" in args
    assert "--device-uuid=0=GPU-c90b723b-a04c-5d91-a664-820ece72acc2" in args
    assert parse(args) == h
    with pytest.raises(CdiError, match="not a GPU UUID"):
        parse(["--device=0=/dev/nvidia0:195:0", "--device-uuid=0=GPU/../x"])
