"""Build dist/nvhook_<version>_all.deb from a staged tree with dpkg-deb (packaging/build-deb).

Why dpkg-deb and not debhelper/pybuild: nvhook is pure Python with no build step, so the
package is its sources laid out where Debian's python3 finds them
(/usr/lib/python3/dist-packages), its launchers, a conffile and a few data files. A staged
tree needs only dpkg-deb (present on every Debian system) and builds in about a second in CI,
where debhelper would pull a toolchain of build dependencies for no gain. The maintainer
scripts do what dh_python3 would generate: byte-compile on configure (py3compile), remove the
byte code before removal (py3clean), so `dpkg -r` leaves nothing behind.

Run with the system python3 from the repository: `packaging/build-deb [--output DIR]`.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
sys.path[:0] = [str(Path(__file__).resolve().parent), str(REPO)]  # debfiles, manpage; nvhook

import debfiles  # noqa: E402
import manpage  # noqa: E402

from nvhook import __version__  # noqa: E402

SITE = "usr/lib/python3/dist-packages"
DEV_TOOLS = "nvhook/dev"
PYTHON = "/usr/bin/python3"
# /usr/bin name -> launcher kind (nvhook.launch.write): NVIDIA's names are what runtimes run
LAUNCHERS = {"nvhook": "hook", "nvidia-container-runtime-hook": "hook", "nvhook-hook": "hook",
             "nvidia-container-runtime": "runtime", "nvhook-runtime": "runtime",
             "nvidia-container-cli": "cli", "nvidia-ctk": "ctk", "nvidia-cdi-hook": "cdihook"}
CONFFILE = "etc/nvidia-container-runtime/config.toml"
HOOKS_JSON = "usr/share/containers/oci/hooks.d/oci-nvidia-hook.json"


def stage(root: Path) -> None:
    """Lay out the package's files under `root`."""
    for package in ("nvhook", "nvmount"):
        shutil.copytree(REPO / package, root / SITE / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.o"))
    # nvhook/dev (the simulated driver, the demo) is for checkouts and tests, not for nodes
    shutil.rmtree(root / SITE / DEV_TOOLS)
    _dist_info(root / SITE / f"nvhook-{__version__}.dist-info")
    _launchers(root / "usr/bin")
    (root / "usr/bin/nvidia-container-toolkit").symlink_to("nvidia-container-runtime-hook")
    from nvhook.admin.configure import hooksd
    from nvhook.config.default import default_text

    _write(root / CONFFILE, default_text())
    _write(root / HOOKS_JSON, hooksd.render(hooksd.hook_document(
        "/usr/bin/nvidia-container-runtime-hook")))
    units = REPO / "packaging/systemd"
    for unit in sorted(p for p in units.rglob("*") if p.is_file()):  # and *.service.d/
        _write(root / "lib/systemd/system" / unit.relative_to(units), unit.read_text())
    for rule in sorted((REPO / "packaging/udev").glob("*.rules")):
        _write(root / "lib/udev/rules.d" / rule.name, rule.read_text())
    doc = root / "usr/share/doc/nvhook"
    _write(doc / "copyright", debfiles.COPYRIGHT)
    _write_gz(doc / "changelog.Debian.gz", debfiles.changelog(__version__))
    _write_gz(root / "usr/share/man/man1/nvhook.1.gz", manpage.render(__version__))
    for name in ("nvidia-container-runtime-hook", "nvidia-container-runtime",
                 "nvidia-container-cli", "nvhook-runtime", "nvhook-hook",
                 "nvidia-container-toolkit", "nvidia-ctk", "nvidia-cdi-hook"):
        (root / f"usr/share/man/man1/{name}.1.gz").symlink_to("nvhook.1.gz")


def _launchers(bindir: Path) -> None:
    from nvhook.launch.isolation import LOADER_VARIABLES, REEXEC_XOPTION
    from nvhook.launch.write import render

    for name, kind in LAUNCHERS.items():
        text = render(kind, PYTHON, [f"/{SITE}"], version=__version__,
                      loader=tuple(sorted(LOADER_VARIABLES)), xoption=REEXEC_XOPTION)
        _write(bindir / name, text, mode=0o755)


def _dist_info(directory: Path) -> None:
    """Enough metadata for importlib.metadata and pip to see the package (not to manage it)."""
    _write(directory / "METADATA", f"Metadata-Version: 2.1\nName: nvhook\nVersion: "
           f"{__version__}\nSummary: {debfiles.SUMMARY}\nLicense: Apache-2.0\n"
           "Requires-Python: >=3.9\n")
    _write(directory / "INSTALLER", "debian\n")
    _write(directory / "top_level.txt", "nvhook\nnvmount\n")
    _write(directory / "entry_points.txt", "[console_scripts]\nnvhook = nvhook.cli:main\n")


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)


def _write_gz(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0,
                                                filename="") as stream:
        stream.write(text.encode("utf-8"))
    path.chmod(0o644)


def debian_dir(root: Path) -> None:
    """DEBIAN/: control (with the installed size), conffiles, maintainer scripts, md5sums."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    size_kib = (sum(p.stat().st_size for p in files) + 1023) // 1024
    meta = root / "DEBIAN"
    _write(meta / "control", debfiles.control(__version__, size_kib))
    _write(meta / "conffiles", f"/{CONFFILE}\n")
    for name, text in debfiles.SCRIPTS.items():
        _write(meta / name, text, mode=0o755)
    sums = "".join(f"{hashlib.md5(p.read_bytes()).hexdigest()}  {p.relative_to(root)}\n"
                   for p in files if not str(p.relative_to(root)).startswith("etc/"))
    _write(meta / "md5sums", sums)


def build(output: Path) -> Path:
    work = REPO / "build" / "deb"
    shutil.rmtree(work, ignore_errors=True)
    root = work / f"nvhook_{__version__}_all"
    root.mkdir(parents=True)
    os.umask(0o022)
    stage(root)
    debian_dir(root)
    output.mkdir(parents=True, exist_ok=True)
    deb = output / f"nvhook_{__version__}_all.deb"
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1700000000"}
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(root), str(deb)],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    return deb


def main() -> int:
    parser = argparse.ArgumentParser(prog="packaging/build-deb",
                                     description="build dist/nvhook_<version>_all.deb")
    parser.add_argument("--output", default=str(REPO / "dist"), help="directory (default dist)")
    args = parser.parse_args()
    if shutil.which("dpkg-deb") is None:
        sys.stderr.write("build-deb: dpkg-deb not found (apt-get install dpkg)\n")
        return 1
    print(build(Path(args.output).resolve()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
