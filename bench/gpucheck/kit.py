"""Build the kit a GPU machine needs to run bench/gpucheck/validate.py: what cannot be fetched
there (it has no network) and is not part of the checkout.

    sudo .venv/bin/python bench/gpucheck/kit.py [--out .gpukit]

The kit (git-ignored, ~15 MB, carried with the working tree):

    bin/runc            runc from this machine (a sh front that finds its libseccomp in lib/)
    lib/                runc's binary and libseccomp.so.2
    site/               python-prctl (prctl.py, _prctl for CPython 3.9-3.13, libcap linked in
                        statically): the hook's one compiled dependency
    rootfs/             a minimal glibc image (nvhook.dev.demo.rootfs) holding /usr/bin/nvprobe
    MANIFEST            what was put in, from where

Needs root (the image's files are root's), gcc, libcap-dev, runc, busybox-static and the
pyenv interpreters (packaging/setup.sh and pyenv provide them); a missing CPython version is
left out with a line.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO))
PYTHONS = ("3.9", "3.10", "3.11", "3.12", "3.13")
RUNC_FRONT = """#!/bin/sh
# runc from the kit: its libseccomp beside it (nvhook's launchers drop LD_* for themselves only)
here=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH="$here/../lib" exec "$here/../lib/runc" "$@"
"""


def _run(*argv: str, **kw: object) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw).stdout  # type: ignore[call-overload, no-any-return]


def runc(kit: Path) -> str:
    binary = shutil.which("runc") or "/usr/sbin/runc"
    lib = kit / "lib"
    shutil.copy2(os.path.realpath(binary), lib / "runc")
    for line in _run("ldd", binary).splitlines():
        if "libseccomp" in line:
            shutil.copy2(os.path.realpath(line.split("=>")[1].split()[0]), lib / "libseccomp.so.2")
    (kit / "bin/runc").write_text(RUNC_FRONT)
    (kit / "bin/runc").chmod(0o755)
    return f"runc {_run(binary, '--version').splitlines()[0]}"


def _interpreters() -> dict[str, str]:
    root = subprocess.run(
        ["pyenv", "root"], capture_output=True, text=True, check=False
    ).stdout.strip() or os.path.expanduser("~/.pyenv")
    found = {}
    for version in PYTHONS:
        cands = sorted(glob.glob(f"{root}/versions/{version}.*/bin/python{version}"))
        system = shutil.which(f"python{version}")
        if cands or system:
            found[version] = cands[-1] if cands else str(system)
    return found


def prctl(kit: Path) -> list[str]:
    """python-prctl's sdist, compiled per CPython with libcap.a (no libcap2 needed there)."""
    work = Path(tempfile.mkdtemp(prefix="nvhook-kit-"))
    try:
        _run(
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-binary",
            ":all:",
            "--no-deps",
            "-d",
            str(work),
            "python-prctl",
        )
        (sdist,) = work.glob("python-prctl-*.tar.gz")
        with tarfile.open(sdist) as tar:
            tar.extractall(work)
        src = next(work.glob("python-prctl-*/"))
        shutil.copy2(src / "prctl.py", kit / "site/prctl.py")
        built = []
        for version, python in _interpreters().items():
            include = _run(
                python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"
            ).strip()
            suffix = _run(
                python, "-c", "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"
            ).strip()
            _run(
                "gcc",
                "-O2",
                "-shared",
                "-fPIC",
                f"-I{include}",
                str(src / "_prctlmodule.c"),
                "-o",
                str(kit / "site" / f"_prctl{suffix}"),
                "-Wl,-Bstatic",
                "-lcap",
                "-Wl,-Bdynamic",
            )
            built.append(version)
        return [f"python-prctl {sdist.name} for CPython {', '.join(built)}"]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def rootfs(kit: Path) -> str:
    from nvhook.dev.demo.rootfs import build_rootfs

    root = build_rootfs(kit / "rootfs")
    _run(
        "gcc",
        "-O2",
        "-Wall",
        "-o",
        str(root / "usr/bin/nvprobe"),
        str(REPO / "bench/gpucheck/probe.c"),
        "-ldl",
    )
    return "rootfs nvhook.dev.demo.rootfs (glibc of this machine) + nvprobe"


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="bench/gpucheck/kit.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", default=str(REPO / ".gpukit"), help="the kit (default .gpukit)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.stderr.write("kit: needs root (the image's files must be root's)\n")
        return 1
    kit = Path(args.out)
    shutil.rmtree(kit, ignore_errors=True)
    for sub in ("bin", "lib", "site"):
        (kit / sub).mkdir(parents=True)
    os.chmod(kit, 0o755)
    lines = [runc(kit), *prctl(kit), rootfs(kit)]
    (kit / "MANIFEST").write_text("\n".join(lines) + "\n")
    print(f"kit: {kit} ({_run('du', '-sh', str(kit)).split()[0]})\n" + "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
