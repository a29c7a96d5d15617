"""Issue 27 class 4: a record of the batched `nvidia-cdi-hook` calls is found only through the
host's view. A hook that runs after pivot_root (startContainer) sees the image's "/": a
container with the host's pid namespace (its /proc shows the host's pids, so it can name its
own first process) plants `/run/nvhook/cdi-hooks/PID-START.0001` in its image, root-owned and
0700 like the real one. Both readers - the launcher's sh front and `container_key` - must
answer "no record" there, and still find the record in the host's view.

The container is modelled with what makes it one for these readers: a private mount
namespace (`unshare -m`) whose first process is the key, /run a private tmpfs (the host's
/run is never written), and for the image's view a chroot into a root holding a static
busybox, the host's /proc bound in (the host pid namespace) and the planted record.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.required import missing

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parent.parent.parent
ARGS = ("update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu")


def _functions() -> str:
    from nvhook.launch.write import render

    text = render("cdihook", "/usr/bin/python3", [str(REPO)], version="0", loader=(),
                  xoption="x")
    return text[:text.index("if nvhook_done")]


def _image(tmp_path: Path) -> Path:
    busybox = shutil.which("busybox")
    if busybox is None:
        missing("busybox is not installed (apt-get install busybox-static)")
    root = tmp_path / "image"
    for d in ("bin", "proc", "run/nvhook/cdi-hooks"):
        (root / d).mkdir(parents=True)
    for d in ("run/nvhook", "run/nvhook/cdi-hooks"):
        (root / d).chmod(0o700)  # as root's real one
    shutil.copy(busybox, root / "bin/busybox")
    (root / "bin/sh").symlink_to("busybox")
    (root / "front.sh").write_text(_functions()
                                   + 'nvhook_done "$@" && echo done || echo python\n')
    return root


def _run(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script,
                           "launcher", *ARGS], capture_output=True, text=True, timeout=60,
                          check=False)


def test_the_front_ignores_a_record_planted_in_the_image(tmp_path: Path) -> None:
    image = _image(tmp_path)
    lines = "\\n".join(("launcher", *ARGS)) + "\\n"
    image_lines = "\\n".join(("/front.sh", *ARGS)) + "\\n"
    script = _functions() + f"""
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -m 0700 /run/nvhook /run/nvhook/cdi-hooks
nvhook_key || {{ echo no-key; exit 1; }}
printf '{lines}' > "/run/nvhook/cdi-hooks/$nvhook_key.0001"
nvhook_done "$@" && echo host:done || echo host:python
printf '{image_lines}' > "{image}/run/nvhook/cdi-hooks/$nvhook_key.0001"
mount --bind /proc {shlex.quote(str(image))}/proc
chroot {shlex.quote(str(image))} /bin/sh /front.sh "$@" | sed 's/^/image:/'
"""
    proc = _run(script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["host:done", "image:python"], proc.stdout + proc.stderr


def test_container_key_is_none_in_the_images_view(tmp_path: Path) -> None:
    image = _image(tmp_path)
    code = (f"import os, subprocess, sys; sys.path.insert(0, {str(REPO)!r})\n"
            "from nvhook.launch.hook_records import container_key\n"
            "host = container_key()\n"
            f"subprocess.run(['mount', '--bind', '/proc', {str(image / 'proc')!r}], check=True)\n"
            f"os.chroot({str(image)!r}); os.chdir('/')\n"
            "print(host, container_key())\n")
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c",
                           code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    host, in_image = proc.stdout.split()
    assert host.split("-")[0].isdigit() and in_image == "None", proc.stdout
