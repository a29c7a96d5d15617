"""Issue 27: attacks of our own on the threat list (tests/security/README.md, "Round three"):
variations the review did not try on the paths fixed here - a link a user owns, a directory
only a group can write, `..` out of a trusted directory, a root link to a user's file, a
launcher copied into a user's directory, a relative symlink that climbs out of the node."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from nvhook.admin.doctor import host
from nvhook.admin.doctor.findings import HostPaths
from nvhook.dev.sim import SimRoot
from nvhook.launch.write import MARKER
from nvhook.programs import trusted_which, untrusted
from tests.fixtures.sim import SimRootFactory
from tests.security.test_installer_node import _install, _node, _tree
from tests.security.test_refresh_policy import SPEC, generate, mig_change, refused

pytestmark = pytest.mark.root
USER = 1000


def _program(path: Path, witness: Path, owner: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{MARKER} (runtime)\necho ran >> {witness}\n"
                    "echo nvhook version 0\n")
    path.chmod(0o755)
    os.chown(path, owner, owner)


def test_recorded_config_reached_through_a_users_symlink(sim_root_factory: SimRootFactory,
                                                         tmp_path: Path) -> None:
    """A root-owned config behind a symlink the user owns (in a root-only directory): the
    user can point the link anywhere, so the walk refuses the link itself."""
    sim: SimRoot = sim_root_factory(SPEC, private=True)
    real = tmp_path / "real.toml"
    shutil.copy(sim.config_path, real)
    link = tmp_path / "link.toml"
    link.symlink_to(real)
    out = tmp_path / "cdi" / "nvidia.yaml"
    before = generate(link, out)
    os.lchown(link, USER, USER)
    mig_change(sim)
    assert len(refused(out, before, "a symlink owned by uid 1000")) == 3


def test_a_group_writable_path_directory(tmp_path: Path) -> None:
    """Root's directory, but the group (say, `docker`) may write it: not root's alone."""
    witness = tmp_path / "ran"
    _program(tmp_path / "bin/nvidia-container-runtime-hook", witness)
    (tmp_path / "bin").chmod(0o775)
    assert trusted_which("nvidia-container-runtime-hook", str(tmp_path / "bin")) is None
    assert "writable by group or others" in (
        untrusted(str(tmp_path / "bin/nvidia-container-runtime-hook")) or "")
    assert not witness.exists()


def test_dot_dot_out_of_a_trusted_directory(tmp_path: Path) -> None:
    """`/usr/bin/../../<a user's dir>` starts in a trusted directory: the walk follows the
    `..` and judges the directory it lands in."""
    witness = tmp_path / "ran"
    _program(tmp_path / "home/bin/nvidia-container-runtime-hook", witness)
    os.chown(tmp_path / "home", USER, USER)
    climb = "/usr/bin/" + "../" * 2 + str(tmp_path / "home/bin").lstrip("/")
    assert trusted_which("nvidia-container-runtime-hook", climb) is None
    paths = HostPaths(etc=str(tmp_path / "etc"), proc=str(tmp_path / "proc"),
                      run=str(tmp_path), usr_share=str(tmp_path), var_lib=str(tmp_path),
                      path=climb)
    found = host.check_hook_on_path(paths, {})
    assert found.level == "fail" and "not run" in found.message
    assert not witness.exists()


def test_a_root_link_to_a_users_program(tmp_path: Path) -> None:
    """A root-owned symlink in a trusted directory, to a program the user owns: the link is
    followed and its target judged."""
    witness = tmp_path / "ran"
    _program(tmp_path / "user/prog", witness, owner=USER)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/nvidia-container-runtime-hook").symlink_to(tmp_path / "user/prog")
    assert trusted_which("nvidia-container-runtime-hook", str(tmp_path / "bin")) is None
    assert f"owned by uid {USER}" in (
        untrusted(str(tmp_path / "bin/nvidia-container-runtime-hook")) or "")
    assert not witness.exists()


def test_nvidia_ctk_copied_into_a_users_directory(tmp_path: Path) -> None:
    """nvidia-ctk run from a user's directory holding a runtime that looks like nvhook's:
    its sibling is not written into the engine's config (the PATH lookup decides)."""
    from nvhook.compat.nvctk.context import Context
    from nvhook.compat.nvctk.runtime_configure import translate
    from nvhook.compat.urfave import Log

    user = tmp_path / "user"
    _program(user / "nvidia-container-runtime", tmp_path / "ran", owner=USER)
    os.chown(user, USER, USER)
    ctx = Context(Log(), cwd=str(tmp_path), stdin=None, environ={}, config_path=None,
                  debug=False)
    ctx.program = "user/nvidia-ctk"
    values = {"runtime": "docker", "nvidia-runtime-name": "nvidia", "config": "",
              "config-source": "file", "executable-path": "", "config-mode": "",
              "drop-in-config": "RUNTIME_SPECIFIC_DEFAULT", "nvidia-set-as-default": False,
              "cdi.enabled": False, "dry-run": True}
    assert not any(a.startswith("--runtime-path") for a in translate(values, set(), ctx))
    os.chown(user, 0, 0)
    os.chown(user / "nvidia-container-runtime", 0, 0)
    assert f"--runtime-path={user}/nvidia-container-runtime" in translate(values, set(), ctx)


def test_a_relative_link_that_climbs_out_of_the_node(tmp_path: Path) -> None:
    """The node's config.toml is a relative link with more `..` than the node has levels:
    resolved in the node's root it stops at the node's "/" (as the node's kernel would);
    nothing lands beside the node root."""
    node = _node(tmp_path)
    config = node / "etc/nvidia-container-runtime/config.toml"
    config.unlink()
    config.symlink_to("../" * 12 + "nvnode-data/ctk/config.toml")
    (tmp_path / "debs").mkdir()
    outside = {p.name for p in tmp_path.iterdir()}
    proc = _install(tmp_path, node)
    assert proc.returncode == 0, proc.stderr
    text = (node / "nvnode-data/ctk/config.toml").read_text()
    assert "\naccept-nvidia-visible-devices-as-volume-mounts = true\n" in text
    assert config.is_symlink() and {p.name for p in tmp_path.iterdir()} == outside
    assert "nvnode-data/ctk/config.toml" in json.dumps(_tree(node))
