"""containerd's runtime configuration (nvhook.admin.configure.containerd, .imports,
.ctrd): the drop-in
carries the CRI section containerd 1.x would otherwise lose, is re-derived on every run, the
main file gets one `imports` entry (backup, dry-run diff) and gets its bytes back on --remove.
The configs are the ones people have: none, Debian's 1.6 package, Docker's containerd.io, version
2 and 3 files of their own. (Through a running containerd and CRI: tests/e2e/test_cri_configure.py.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nvhook.admin.configure import containerd, ctrd, imports
from nvhook.errors import ConfigureError
from tests._compat import tomllib

WRAPPER = "/usr/bin/nvidia-container-runtime"
CRI = "io.containerd.grpc.v1.cri"
DEBIAN_1_6 = """version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.internal.v1.opt"]
    path = "/var/lib/containerd/opt"
"""
CONTAINERD_IO = """#   Copyright 2018-2022 Docker Inc.

#   Licensed under the Apache License, Version 2.0 (the "License");

disabled_plugins = ["cri"]

#root = "/var/lib/containerd"
#[grpc]
#  address = "/run/containerd/containerd.sock"
"""
OWN_V2 = """version = 2
root = "/var/lib/containerd"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.example/pause:3.9"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      privileged_without_host_devices = true
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
"""
ENTRY = "{d}/conf.d/*.toml"


def _doc(text: str | None) -> dict[str, Any] | None:
    return None if text is None else tomllib.loads(text)


ADD_CASES = [
    (None, 'version = 2\nimports = ["{e}"]\n'),
    ("", 'imports = ["{e}"]\n'),
    (DEBIAN_1_6, DEBIAN_1_6.replace("version = 2\n", 'version = 2\nimports = ["{e}"]\n')),
    (CONTAINERD_IO, CONTAINERD_IO.replace("disabled_plugins",
                                          'imports = ["{e}"]\ndisabled_plugins')),
    ('imports = ["/a/*.toml"]\nversion = 2\n', 'imports = ["/a/*.toml", "{e}"]\nversion = 2\n'),
    ('version = 2\nimports = [\n  "/a/*.toml",  # ours\n]\n[x]\ny = 1\n',
     'version = 2\nimports = [\n  "/a/*.toml", "{e}"  # ours\n]\n[x]\ny = 1\n'),
    ('version = 2\nimports = []  # none yet\n', 'version = 2\nimports = ["{e}"]  # none yet\n'),
    ('# comments only\n# no newline', '# comments only\n# no newline\nimports = ["{e}"]\n'),
]


@pytest.mark.parametrize(("text", "expected"), ADD_CASES,
                         ids=["no-file", "empty", "debian-1.6", "containerd.io", "inline-array",
                              "multiline-array-comment", "empty-array", "comments-only"])
def test_add_import_changes_one_line(text: str | None, expected: str) -> None:
    entry = "/etc/containerd/conf.d/*.toml"
    out = imports.add_import(text, _doc(text), entry, 2, "config.toml")
    assert out == expected.replace("{e}", entry)
    doc = dict(_doc(text) if text is not None else {"version": 2})
    doc["imports"] = [*doc.get("imports", []), entry]
    assert tomllib.loads(out) == doc


@pytest.mark.parametrize("text", ['"imports" = ["/a"]\n', "imports = '/a/*.toml'\n"],
                         ids=["quoted-key", "not-an-array"])
def test_add_import_refuses_what_it_cannot_edit_exactly(text: str) -> None:
    with pytest.raises(ConfigureError, match="add it by hand"):
        imports.add_import(text, _doc(text), "/etc/containerd/conf.d/*.toml", 2, "c.toml")


@pytest.mark.parametrize(("pattern", "version", "covered"), [
    ("/etc/containerd/conf.d/*.toml", 2, True),
    ("/etc/containerd/conf.d/99-nvidia.toml", 2, True),
    ("conf.d/99-nvidia.toml", 2, True),  # a relative path: the importing file's dir
    ("conf.d/*.toml", 2, False),  # 1.x: a relative glob is relative to the cwd (/)
    ("conf.d/*.toml", 3, True),  # 2.x: relative to the importing file's dir
    ("/etc/containerd/*.toml", 2, False),  # `*` never crosses a `/`
    ("/etc/containerd/conf.d/*.conf", 2, False),
], ids=["abs-glob", "abs-path", "rel-path", "rel-glob-1.x", "rel-glob-2.x", "parent-glob",
        "other-suffix"])
def test_covers_follows_containerd(pattern: str, version: int, covered: bool) -> None:
    assert imports.covers({"imports": [pattern]}, "/etc/containerd/config.toml", version,
                          "/etc/containerd/conf.d/99-nvidia.toml") is covered


def test_load_order_is_breadth_first_sorted_and_once() -> None:
    files: dict[str, dict[str, Any]] = {
        "/c/b.toml": {"imports": ["/c/d/*.toml"]}, "/c/a.toml": {"imports": ["/c/m.toml"]},
        "/c/d/1.toml": {}, "/c/m.toml": {"imports": ["/c/a.toml"]}}
    main = {"imports": ["/c/*.toml", "/c/d/1.toml"]}
    order = imports.load_order("/c/m.toml", main, 2, files.get,
                               lambda p: [k for k in files if k.startswith(p[:-6])
                                          and "/" not in k[len(p) - 6:]])
    assert [p for p, _ in order] == ["/c/m.toml", "/c/a.toml", "/c/b.toml", "/c/d/1.toml"]


def _drop_in(effective: dict[str, Any], old: dict[str, Any] | None = None,
             owned: list[str] | None = None, version: int = 2, name: str = "nvidia",
             **kw: Any) -> tuple[dict[str, Any], list[str]]:
    return containerd.drop_in_document(effective, old, owned, version, name, WRAPPER,
                                       set_default=kw.get("set_default", False),
                                       enable_cdi=kw.get("enable_cdi", False), where="d")


def test_drop_in_carries_the_whole_cri_section() -> None:
    section = containerd.cri_section(_doc(OWN_V2), 2) or {}
    doc, owned = _drop_in(section)
    cri = doc["plugins"][CRI]
    assert owned == ["nvidia"] and doc["version"] == 2
    assert cri["sandbox_image"] == "registry.example/pause:3.9"
    assert cri["restrict_oom_score_adj"] is True
    assert cri["containerd"]["runtimes"]["runc"] == section["containerd"]["runtimes"]["runc"]
    assert cri["containerd"]["runtimes"]["nvidia"] == {
        "runtime_type": "io.containerd.runc.v2", "privileged_without_host_devices": True,
        "options": {"SystemdCgroup": True, "BinaryName": WRAPPER},
        "container_annotations": ["cdi.k8s.io/*"]}
    assert list(cri["containerd"]["runtimes"]) == ["runc", "nvidia"]


def test_drop_in_keeps_the_default_runtime_of_a_config_without_runtimes() -> None:
    """Debian's config has no runtimes table: CRI's default `runc` must survive the import."""
    doc, _ = _drop_in(containerd.cri_section(_doc(DEBIAN_1_6), 2) or {})
    runtimes = doc["plugins"][CRI]["containerd"]["runtimes"]
    assert runtimes["runc"] == {"runtime_type": "io.containerd.runc.v2"}
    assert doc["plugins"][CRI]["cni"] == {"bin_dir": "/usr/lib/cni", "conf_dir": "/etc/cni/net.d"}


def test_drop_in_is_rederived_and_keeps_earlier_runtimes() -> None:
    first, owned = _drop_in({"sandbox_image": "a"}, name="nvidia-cdi", set_default=True)
    second, owned = _drop_in({"sandbox_image": "b"}, first, owned)
    cri = second["plugins"][CRI]
    assert cri["sandbox_image"] == "b"  # the main config's change is no longer masked
    assert owned == ["nvidia-cdi", "nvidia"]
    assert set(cri["containerd"]["runtimes"]) == {"runc", "nvidia-cdi", "nvidia"}
    assert cri["containerd"]["default_runtime_name"] == "nvidia-cdi"  # an earlier run's choice
    third, _ = _drop_in({"sandbox_image": "b"}, second, owned, name="nvidia-cdi")
    assert "default_runtime_name" not in third["plugins"][CRI]["containerd"]  # not asked again


def test_drop_in_version_1_and_3() -> None:
    v1, _ = _drop_in({"sandbox_image": "x"}, version=1)
    assert "version" not in v1 and set(v1["plugins"]) == {"cri"}
    v3, _ = _drop_in({"sandbox_image": "x", "containerd": {"runtimes": {"runc": {}}}}, version=3,
                     enable_cdi=True)
    assert v3 == {"version": 3, "plugins": {"io.containerd.cri.v1.runtime": {
        "enable_cdi": True, "containerd": {"runtimes": {"nvidia": {
            "options": {"BinaryName": WRAPPER}, "runtime_type": "io.containerd.runc.v2",
            "container_annotations": ["cdi.k8s.io/*"]}}}}}}
    # a version-2 drop-in of nvhook 0.1 under a version-1 main config is replaced, not refused
    old = {"version": 2, "plugins": {CRI: {"containerd": {"runtimes": {"nvidia": {}}}}}}
    assert _drop_in({}, old, version=1)[0] == _drop_in({}, version=1)[0]


def test_owned_runtimes_come_from_the_header() -> None:
    text = containerd.header(2, "/etc/containerd/config.toml", ["a", "b"]) + "version = 2\n"
    assert containerd.owned_runtimes(text) == ["a", "b"]
    assert containerd.owned_runtimes("version = 2\n# nvhook-runtimes: x\n") is None
    assert tomllib.loads(text) == {"version": 2}


# -- the files: ctrd.configure / ctrd.remove ----------------------------------------------------
def _run(tmp_path: Path, main: str | None, *, version: int = 2,
         **kw: Any) -> tuple[Path, Path]:
    path, drop = tmp_path / "config.toml", tmp_path / "conf.d" / "99-nvidia.toml"
    if main is not None and not path.exists():
        path.write_text(main)
    assert ctrd.configure(str(path), str(drop), WRAPPER, default_version=version, **kw) == 0
    return path, drop


@pytest.mark.parametrize("main", [None, DEBIAN_1_6, OWN_V2, 'version = 3\n'],
                         ids=["no-config", "debian-1.6", "own-v2", "v3"])
def test_configure_twice_then_remove_restores_bytes(tmp_path: Path, main: str | None,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path, drop = _run(tmp_path, main)
    first = (path.read_bytes(), drop.read_bytes())
    assert tomllib.loads(path.read_text())["imports"] == [ENTRY.format(d=tmp_path)]
    backup = tmp_path / "config.toml.nvhook.bak"
    assert (backup.read_text() if main is not None else None) == main
    capsys.readouterr()
    _run(tmp_path, main)
    assert (path.read_bytes(), drop.read_bytes()) == first
    assert "already up to date" in capsys.readouterr().out
    assert ctrd.remove(str(path), str(drop)) == 0
    assert (path.read_text() if path.exists() else None) == main
    assert not backup.exists() and not drop.parent.exists()
    assert ctrd.remove(str(path), str(drop)) == 0  # again: nothing left to do


def test_dry_run_shows_the_diff_and_writes_nothing(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.toml").write_text(DEBIAN_1_6)
    _run(tmp_path, DEBIAN_1_6, dry_run=True)
    out = capsys.readouterr().out
    assert out.startswith("# Written by `nvhook runtime configure")
    entry = ENTRY.format(d=tmp_path)
    assert f'--- {tmp_path}/config.toml\n+++ {tmp_path}/config.toml\n' in out
    assert f'+imports = ["{entry}"]\n' in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]


def test_a_lost_import_comes_back_and_later_changes_are_seen(tmp_path: Path) -> None:
    path, drop = _run(tmp_path, OWN_V2)
    path.write_text(OWN_V2.replace("pause:3.9", "pause:3.10"))  # a containerd upgrade's config
    _run(tmp_path, None)
    assert tomllib.loads(path.read_text())["imports"] == [ENTRY.format(d=tmp_path)]
    cri = tomllib.loads(drop.read_text())["plugins"][CRI]
    assert cri["sandbox_image"] == "registry.example/pause:3.10"
    assert ctrd.remove(str(path), str(drop)) == 0
    assert path.read_text() == OWN_V2.replace("pause:3.9", "pause:3.10")


def test_remove_keeps_what_others_need(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    path, drop = _run(tmp_path, DEBIAN_1_6)
    (drop.parent / "50-registry.toml").write_text("version = 2\n")
    assert ctrd.remove(str(path), str(drop)) == 0
    assert "still use the import" in capsys.readouterr().err
    assert "imports" in tomllib.loads(path.read_text()) and not drop.exists()


def test_cri_section_of_an_imported_file_and_one_after_the_drop_in(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "conf.d"
    conf.mkdir()
    (conf / "10-registry.toml").write_text(
        f'version = 2\n[plugins."{CRI}"]\nsandbox_image = "mirror/pause:1"\n')
    (conf / "zz-late.toml").write_text(f'version = 2\n[plugins."{CRI}"]\nx = 1\n')
    _, drop = _run(tmp_path, f'version = 2\nimports = ["{conf}/*.toml"]\n')
    assert tomllib.loads(drop.read_text())["plugins"][CRI]["sandbox_image"] == "mirror/pause:1"
    assert "zz-late.toml after" in capsys.readouterr().err


def test_docker_containerd_io_config_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(CONTAINERD_IO)
    with pytest.raises(ConfigureError, match=r"the CRI plugin is disabled .*'cri'.*nothing "):
        ctrd.configure(str(path), str(tmp_path / "conf.d/99-nvidia.toml"), WRAPPER)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]
    assert path.read_text() == CONTAINERD_IO


def test_version_1_config_gets_a_version_1_drop_in(tmp_path: Path) -> None:
    main = '[plugins.cri]\nsandbox_image = "x/pause:1"\n'
    path, drop = _run(tmp_path, main)
    doc = tomllib.loads(drop.read_text())
    assert "version" not in doc and doc["plugins"]["cri"]["sandbox_image"] == "x/pause:1"
    assert "version" not in tomllib.loads(path.read_text())


def test_remove_keeps_a_drop_in_directory_nvhook_did_not_make(tmp_path: Path) -> None:
    """Issue 27 class 7: the admin's (empty) conf.d stays; the one nvhook made goes."""
    (tmp_path / "conf.d").mkdir()
    path, drop = _run(tmp_path, DEBIAN_1_6)
    assert containerd.DIR_MARK not in drop.read_text()
    _run(tmp_path, DEBIAN_1_6)  # a second run does not claim it either
    assert ctrd.remove(str(path), str(drop)) == 0
    assert not drop.exists() and drop.parent.is_dir()
    drop.parent.rmdir()
    path, drop = _run(tmp_path, None)
    assert containerd.DIR_MARK in drop.read_text()
    _run(tmp_path, None)  # the claim survives a re-run (the directory exists by then)
    assert containerd.DIR_MARK in drop.read_text()
    assert ctrd.remove(str(path), str(drop)) == 0
    assert not drop.parent.exists()
