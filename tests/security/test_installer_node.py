"""Issue 27 class 5: packaging/image/install-on-host resolves every node path inside the node's
root and leaves the whole install or nothing.

The node is a fake root (static busybox for its sh and tools; apt-get, dpkg-query, nvhook and
systemctl are sh scripts that log each call to /calls and fail when /fail names them) whose
config.toml and /var/cache/nvhook are absolute symlinks to node-only paths (/nvnode-*: none of
them exists on the machine running the test, so the old script's writes through $HOST fail
instead of landing on this host). Each case snapshots the node's tree before and after.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.required import missing

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parent.parent.parent
SCRIPT = REPO / "packaging/image/install-on-host"
APPLETS = ("sh", "cat", "mv", "mkdir", "rm", "readlink", "dirname", "sed", "cp", "md5sum", "grep",
           "basename", "test", "[", "echo", "printf", "touch")
CONFIG = "# nvhook config\n#accept-nvidia-visible-devices-as-volume-mounts = false\n" \
         "#accept-nvidia-visible-devices-envvar-when-unprivileged = true\n"
FAKES = {
    "apt-get": 'case "$1" in install) touch /var/lib/nvhook-installed;; '
               "remove) rm -f /var/lib/nvhook-installed;; esac",
    "dpkg-query": '[ -e /var/lib/nvhook-installed ] && printf "install ok installed"; true',
    "nvhook": 'if [ "$1 $2" = "runtime configure" ]; then case "$*" in *--remove*) '
              "rm -f /etc/containerd/conf.d/99-nvidia.toml; rmdir /etc/containerd/conf.d;; "
              "*) mkdir -p /etc/containerd/conf.d && "
              "echo '# nvhook' > /etc/containerd/conf.d/99-nvidia.toml;; esac; fi",
    "systemctl": "true",
    "cksum": "md5sum",  # this busybox has no cksum applet
}


def _node(tmp_path: Path) -> Path:
    busybox = shutil.which("busybox")
    if busybox is None:
        missing("busybox is not installed (apt-get install busybox-static)")
    root = tmp_path / "node"
    for d in ("bin", "dev", "usr/bin", "etc/containerd", "var/cache", "var/lib",
              "nvnode-data/cache", "nvnode-data/ctk"):
        (root / d).mkdir(parents=True)
    shutil.copy(str(busybox), root / "bin/busybox")
    os.mknod(root / "dev/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    for applet in APPLETS:
        (root / "bin" / applet).symlink_to("busybox")
    for name, body in FAKES.items():
        fake = root / "usr/bin" / name
        fake.write_text(f'#!/bin/sh\necho "{name} $*" >> /calls\n'
                        f'if grep -qx "{name} *$*" /fail 2>/dev/null || '
                        f'grep -qx "{name}" /fail 2>/dev/null; then exit 1; fi\n{body}\n')
        fake.chmod(0o755)
    (root / "etc/containerd/config.toml").write_text('version = 2\n')
    (root / "nvnode-data/ctk/config.toml").write_text(CONFIG)
    (root / "etc/nvidia-container-runtime").mkdir()
    (root / "etc/nvidia-container-runtime/config.toml").symlink_to("/nvnode-data/ctk/config.toml")
    (root / "var/cache/nvhook").symlink_to("/nvnode-data/cache")
    return root


def _install(tmp_path: Path, node: Path, **env: str) -> subprocess.CompletedProcess[str]:
    debs = tmp_path / "debs"
    debs.mkdir(exist_ok=True)
    (debs / "nvhook_0.1.0_all.deb").write_bytes(b"!<arch>\nfake deb\n")
    full = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOST": str(node), "ONESHOT": "true",
            "NVHOOK_DEB_DIR": str(debs), "DEVICE_LIST_STRATEGY": "volume-mounts", **env}
    return subprocess.run(["sh", str(SCRIPT)], capture_output=True, text=True, env=full,
                          timeout=120, check=False)


def _tree(root: Path) -> dict[str, str]:
    """Every entry of the node but its call log: a link's text, a file's bytes, 'dir'."""
    found = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(top, name)
            rel = os.path.relpath(path, root)
            if rel in ("calls", "dev/null"):
                continue
            if os.path.islink(path):
                found[rel] = "-> " + os.readlink(path)
            elif os.path.isdir(path):
                found[rel] = "dir"
            else:
                found[rel] = Path(path).read_bytes().decode("latin-1")
    return found


def test_symlinked_node_files_are_written_inside_the_node(tmp_path: Path) -> None:
    node = _node(tmp_path)
    proc = _install(tmp_path, node)
    assert proc.returncode == 0, proc.stderr
    assert (node / "var/cache/nvhook").is_symlink()  # the node's links stay links
    assert (node / "etc/nvidia-container-runtime/config.toml").is_symlink()
    assert (node / "nvnode-data/cache/nvhook_0.1.0_all.deb").read_bytes().startswith(b"!<arch>")
    config = (node / "nvnode-data/ctk/config.toml").read_text()
    assert "\naccept-nvidia-visible-devices-as-volume-mounts = true\n" in config
    assert "\naccept-nvidia-visible-devices-envvar-when-unprivileged = false\n" in config
    assert not list((node / "nvnode-data/ctk").glob("*.nvhook.*"))  # nothing staged is left
    calls = [c for c in (node / "calls").read_text().splitlines()
             if c.split()[0] in ("apt-get", "nvhook", "systemctl")]
    assert calls == ["apt-get install -y --no-install-recommends "
                     "/var/cache/nvhook/nvhook_0.1.0_all.deb", "nvhook config check",
                     "nvhook runtime configure --runtime=containerd",
                     "systemctl restart containerd", "nvhook doctor"]
    assert not Path("/nvnode-data").exists()  # nothing went to this machine's root


@pytest.mark.parametrize("link", ["var/cache/nvhook", "etc/nvidia-container-runtime/config.toml"])
def test_a_link_into_a_missing_directory_stops_before_any_change(tmp_path: Path,
                                                                 link: str) -> None:
    node = _node(tmp_path)
    (node / link).unlink()
    (node / link).symlink_to("/nvnode-missing/dir/x")
    before = _tree(node)
    proc = _install(tmp_path, node)
    assert proc.returncode == 1
    assert f"/{link} on the node is a symlink into a missing directory" in proc.stderr
    assert "nothing was installed or changed on this node" in proc.stderr
    assert _tree(node) == before and not (node / "calls").exists()


@pytest.mark.parametrize("fail", ["systemctl", "nvhook runtime configure --runtime=containerd",
                                  "nvhook config check", "apt-get"])
def test_a_failure_midway_leaves_the_node_as_it_was(tmp_path: Path, fail: str) -> None:
    node = _node(tmp_path)
    before = _tree(node)
    (node / "fail").write_text(fail + "\n")
    proc = _install(tmp_path, node)
    assert proc.returncode != 0
    (node / "fail").unlink()
    assert _tree(node) == before, proc.stderr
    if fail != "apt-get":
        assert "the node is as it was before this run" in proc.stderr
