"""The demo/test support modules: spec shape, hook entries, runc lookup, ELF check, cgroup dirs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from nvhook.dev.demo import bundle as demo_bundle
from nvhook.dev.demo import driver as demo_driver
from nvhook.dev.demo import rootfs as demo_rootfs
from nvhook.dev.demo.bundle import HookEntry, container_spec
from nvhook.dev.demo.rootfs import RootfsFlavor
from nvhook.errors import NvhookError


def test_spec_is_runc_spec_shaped_with_explicit_hook_env() -> None:
    hook = HookEntry("/x/hook", ("hook", "prestart"))
    spec = container_spec(["/bin/true"], ["NVIDIA_VISIBLE_DEVICES=0"], prestart=[hook],
                          capabilities=("CAP_KILL",))
    proc = spec["process"]
    assert isinstance(proc, dict)
    assert proc["terminal"] is False and proc["args"] == ["/bin/true"]
    assert proc["env"][0].startswith("PATH=") and proc["env"][1] == "NVIDIA_VISIBLE_DEVICES=0"
    assert proc["capabilities"]["bounding"] == ["CAP_KILL"]
    assert spec["root"] == {"path": "rootfs", "readonly": False}
    assert spec["hooks"] == {"prestart": [
        {"path": "/x/hook", "args": ["hook", "prestart"], "env": list(demo_bundle.HOOK_ENV)}]}


@pytest.mark.parametrize(("config", "flags", "args"), [
    (None, (), ["nvidia-container-runtime-hook", "prestart"]),
    (Path("/s/config.toml"), ("--debug",),
     ["nvidia-container-runtime-hook", "--config", "/s/config.toml", "--debug", "prestart"]),
], ids=["default-config", "sim-config-debug"])
def test_nvhook_hook_entry(config: Path | None, flags: tuple[str, ...], args: list[str]) -> None:
    entry = demo_driver.nvhook_hook_entry(Path("/p/nvidia-container-runtime-hook"), config, *flags)
    assert entry.to_json()["args"] == args


def test_sim_prestart_entry_through_the_launcher() -> None:
    entry = demo_driver.sim_prestart_entry(Path("/s/config.toml"), Path("/p/launcher"))
    assert entry.path == "/p/launcher"
    assert entry.args == ("nvhook-hook", "--config", "/s/config.toml", "sim", "prestart")


def test_find_runc_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo_bundle, "RUNC_CANDIDATES", ())
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(NvhookError, match=r"find runc: not installed \(apt-get install runc"):
        demo_bundle.find_runc()


def test_elf_interpreter(tmp_path: Path) -> None:
    assert demo_rootfs._elf_interpreter(Path("/usr/bin/python3"))  # dynamically linked
    static = shutil.which("busybox")
    if static and os.path.realpath(static).endswith("busybox"):
        assert not demo_rootfs._elf_interpreter(Path(static))
    text = tmp_path / "script"
    text.write_text("#!/bin/sh\n")
    assert not demo_rootfs._elf_interpreter(text)


@pytest.mark.parametrize("flavor", list(RootfsFlavor), ids=[f.value for f in RootfsFlavor])
def test_flavor_lib_dir(flavor: RootfsFlavor) -> None:
    want = "/usr/lib64" if flavor is RootfsFlavor.NON_DEBIAN else "/usr/lib/x86_64-linux-gnu"
    assert flavor.libs_dir == want


def test_find_host_file_error_names_the_package() -> None:
    with pytest.raises(NvhookError, match="apt-get install busybox-static"):
        demo_rootfs.find_host_file(("/nonexistent/busybox",), "busybox")


def test_no_cgroup_dirs_for_an_unknown_container() -> None:
    assert demo_bundle.container_cgroup_dirs("nvhook-unit-does-not-exist") == []
