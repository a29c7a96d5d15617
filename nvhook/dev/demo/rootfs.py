"""Minimal container root filesystems built from the host (the demo's and the e2e tests' image).

Stage: demo/test support, off the hook's path. Reads host files (libc, the dynamic loader,
busybox-static, the static ldconfig) and writes only under the destination directory.

Three flavours, chosen to exercise the engine's layout rules (libnvc-spec §2.2):

- GLIBC: Debian 12 shape (merged /usr, etc/debian_version, /sbin/ldconfig, a populated
  etc/ld.so.cache); driver libraries land in /usr/lib/x86_64-linux-gnu.
- MUSL_LIKE: the same Debian shape but without ldconfig, ld.so.conf or ld.so.cache, like an
  Alpine image: libraries must resolve through the SONAME links the engine creates.
- NON_DEBIAN: Fedora shape (no etc/debian_version, libc in /usr/lib64); driver libraries land
  in /usr/lib64.
"""

from __future__ import annotations

import enum
import os
import shutil
import struct
import subprocess
from pathlib import Path

from nvhook.errors import NvhookError

MULTIARCH = "x86_64-linux-gnu"
LOADER = "ld-linux-x86-64.so.2"
HOST_LIBS = ("libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", LOADER)
OPTIONAL_HOST_LIBS = frozenset({"libdl.so.2", "libpthread.so.0", "librt.so.1"})
HOST_LIB_DIRS = (f"/lib/{MULTIARCH}", f"/usr/lib/{MULTIARCH}", "/lib64", "/usr/lib64")
BUSYBOX_CANDIDATES = ("/bin/busybox", "/usr/bin/busybox")
LDCONFIG_CANDIDATES = ("/sbin/ldconfig.real", "/sbin/ldconfig", "/usr/sbin/ldconfig")
PT_INTERP = 3


class RootfsFlavor(enum.Enum):
    GLIBC = "glibc"
    MUSL_LIKE = "musl-like"
    NON_DEBIAN = "non-debian"

    @property
    def libs_dir(self) -> str:
        """Container dir of libc in this flavour (where the engine puts driver libraries)."""
        return "/usr/lib64" if self is RootfsFlavor.NON_DEBIAN else f"/usr/lib/{MULTIARCH}"


def build_rootfs(dest: Path, flavor: RootfsFlavor = RootfsFlavor.GLIBC) -> Path:
    """Create a minimal rootfs of `flavor` at `dest` (must not exist); return `dest`."""
    try:
        dest.mkdir(parents=True)
        _make_skeleton(dest, flavor)
        _install_libc(dest, flavor)
        _install_busybox(dest)
        _write_etc(dest, flavor)
        if flavor is not RootfsFlavor.MUSL_LIKE:
            ldconfig = find_host_file(LDCONFIG_CANDIDATES, "ldconfig")
            shutil.copy2(ldconfig, dest / "usr/sbin/ldconfig")
            _run_ldconfig(dest)
    except OSError as err:
        raise NvhookError(
            f"build test rootfs {dest}: {err} (run as root on a glibc x86-64 host)"
        ) from err
    return dest


def copy_rootfs(src: Path, dest: Path) -> Path:
    """Copy a built rootfs (modes, links, owners kept) to `dest`, which must not exist."""
    proc = subprocess.run(
        ["cp", "-a", "--", str(src), str(dest)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise NvhookError(f"copy test rootfs {src} to {dest}: {proc.stderr.strip()}")
    return dest


def find_host_file(candidates: tuple[str, ...], what: str) -> Path:
    for cand in candidates:
        if os.path.isfile(cand):
            return Path(cand)
    hint = "apt-get install busybox-static" if what == "busybox" else "is this a glibc host?"
    raise NvhookError(f"find host {what}: none of {', '.join(candidates)} exists ({hint})")


def _make_skeleton(root: Path, flavor: RootfsFlavor) -> None:
    for d in ("usr/bin", "usr/sbin", "usr/lib", "usr/lib64", f"usr/lib/{MULTIARCH}", "etc",
              "proc", "sys", "dev", "root", "run", "var", "home"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "tmp").mkdir(mode=0o1777)
    os.chmod(root / "tmp", 0o1777)
    for name, target in (("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib"),
                         ("lib64", "usr/lib64")):
        (root / name).symlink_to(target)
    (root / "var/run").symlink_to("/run")
    if flavor is RootfsFlavor.NON_DEBIAN:
        os.rmdir(root / f"usr/lib/{MULTIARCH}")


def _install_libc(root: Path, flavor: RootfsFlavor) -> None:
    libdir = root / flavor.libs_dir.lstrip("/")
    for name in HOST_LIBS:
        try:
            src = find_host_file(tuple(f"{d}/{name}" for d in HOST_LIB_DIRS), name)
        except NvhookError:
            if name in OPTIONAL_HOST_LIBS:
                continue
            raise
        shutil.copy2(os.path.realpath(src), libdir / name)  # content, not the host's link
    if flavor is not RootfsFlavor.NON_DEBIAN:
        (root / "usr/lib64" / LOADER).symlink_to(f"../lib/{MULTIARCH}/{LOADER}")


def _install_busybox(root: Path) -> None:
    busybox = find_host_file(BUSYBOX_CANDIDATES, "busybox")
    if _elf_interpreter(busybox):
        raise NvhookError(
            f"use host {busybox}: it is dynamically linked (apt-get install busybox-static)"
        )
    bindir = root / "usr/bin"
    shutil.copy2(busybox, bindir / "busybox")
    applets = subprocess.run(
        [str(busybox), "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    for applet in applets:
        if applet in ("busybox", "ldconfig") or "/" in applet:
            continue  # never replace the binary itself with a link to itself
        link = bindir / applet
        if not link.exists():
            link.symlink_to("busybox")


def _write_etc(root: Path, flavor: RootfsFlavor) -> None:
    etc = root / "etc"
    (etc / "passwd").write_text(
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n"
    )
    (etc / "group").write_text("root:x:0:\nvideo:x:44:\nnogroup:x:65534:\n")
    (etc / "hostname").write_text("nvhook-demo\n")
    if flavor is RootfsFlavor.NON_DEBIAN:
        (etc / "os-release").write_text('ID=fedora\nNAME="nvhook test (non-Debian layout)"\n')
    else:
        debian = Path("/etc/debian_version")
        (etc / "debian_version").write_text(debian.read_text() if debian.is_file() else "12.0\n")
        (etc / "os-release").write_text('ID=debian\nNAME="nvhook test (Debian layout)"\n')
    if flavor is RootfsFlavor.MUSL_LIKE:
        return  # no ld.so.conf, no cache: like an Alpine image
    (etc / "ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    confd = etc / "ld.so.conf.d"
    confd.mkdir()
    (confd / "libc.conf").write_text("/usr/local/lib\n")
    if flavor is RootfsFlavor.NON_DEBIAN:
        (confd / "lib64.conf").write_text("/usr/lib64\n/usr/local/lib64\n")
    else:
        (confd / f"{MULTIARCH}.conf").write_text(
            f"/usr/local/lib/{MULTIARCH}\n/lib/{MULTIARCH}\n/usr/lib/{MULTIARCH}\n"
        )


def _run_ldconfig(root: Path) -> None:
    proc = subprocess.run(
        [str(root / "usr/sbin/ldconfig"), "-r", str(root)],
        capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0:
        raise NvhookError(f"run ldconfig -r {root}: {proc.stderr.strip()} (are you root?)")


def _elf_interpreter(path: Path) -> bool:
    """True when the ELF file at `path` asks for a dynamic loader (PT_INTERP)."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:
            return False  # not 64-bit ELF: let the exec fail with a clear error later
        phoff, = struct.unpack_from("<Q", head, 32)
        phentsize, phnum = struct.unpack_from("<HH", head, 54)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    return any(
        struct.unpack_from("<I", table, i * phentsize)[0] == PT_INTERP for i in range(phnum)
    )
