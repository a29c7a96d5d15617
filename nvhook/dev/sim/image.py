"""A large container image for benchmarks: many shared libraries, as an application image has.

`add_libraries(rootfs, count=1000, dirs=20)` spreads `count` minimal ELF shared objects
(x86-64, each with its SONAME and a DT_NEEDED on libc.so.6, as ldconfig classifies real ones)
over `dirs` directories of a rootfs, with their SONAME links, lists the directories in
/etc/ld.so.conf.d/nvsim-image.conf and rebuilds the image's /etc/ld.so.cache with the host's
ldconfig (`-r`), as an image build would have. The ldcache step of a GPU container start then
has an image of realistic size to work on: NVIDIA's ldconfig runs over every configured
directory; nvhook merges its entries into the existing cache.

Stage: tooling (benchmarks), off the hook's path. Effects: files under `rootfs` only.
"""

from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path

from nvhook.errors import SimError

EM_X86_64 = 62
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME = 0, 1, 5, 10, 14
CONF = "etc/ld.so.conf.d/nvsim-image.conf"
# where an application image keeps libraries: the distribution's dir, /usr/local, /opt trees
FIRST_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/local/lib")


def shared_object(soname: str, needed: tuple[str, ...] = ("libc.so.6",)) -> bytes:
    """A minimal 64-bit little-endian ET_DYN object: one PT_LOAD, a PT_DYNAMIC with
    DT_STRTAB, DT_STRSZ, DT_SONAME and DT_NEEDED: what ld.so and ldconfig read."""
    strtab = bytearray(b"\0")
    offsets = {}
    for name in (soname, *needed):
        offsets[name] = len(strtab)
        strtab += name.encode() + b"\0"
    ehsize, phentsize, nph = 64, 56, 2
    strtab_at = ehsize + nph * phentsize
    dyn_at = strtab_at + len(strtab) + (-(strtab_at + len(strtab)) % 8)
    entries = [(DT_STRTAB, strtab_at), (DT_STRSZ, len(strtab)), (DT_SONAME, offsets[soname]),
               *((DT_NEEDED, offsets[n]) for n in needed), (DT_NULL, 0)]
    dynamic = b"".join(struct.pack("<qQ", tag, value) for tag, value in entries)
    total = dyn_at + len(dynamic)
    load = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, total, total, 0x1000)  # PT_LOAD r-x
    dyn = struct.pack("<IIQQQQQQ", 2, 6, dyn_at, dyn_at, dyn_at, len(dynamic), len(dynamic), 8)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    ehdr = ident + struct.pack("<HHIQQQIHHHHHH", 3, EM_X86_64, 1, 0, ehsize, 0, 0, ehsize,
                               phentsize, nph, 64, 0, 0)
    out = bytearray(total)
    out[0:ehsize] = ehdr
    out[ehsize:strtab_at] = load + dyn
    out[strtab_at:strtab_at + len(strtab)] = strtab
    out[dyn_at:total] = dynamic
    return bytes(out)


def library_dirs(dirs: int) -> tuple[str, ...]:
    """`dirs` container directories: the distribution's, /usr/local/lib, then /opt trees."""
    extra = tuple(f"/opt/nvsim-app/lib{i:02d}" for i in range(max(dirs - len(FIRST_DIRS), 0)))
    return (*FIRST_DIRS, *extra)[:dirs]


def add_libraries(rootfs: Path, count: int = 1000, dirs: int = 20,
                  ldconfig: str = "/sbin/ldconfig") -> tuple[str, ...]:
    """Add the libraries (module docstring); returns the directories, container paths."""
    where = library_dirs(dirs)
    for n in range(count):
        directory = rootfs / where[n % len(where)].lstrip("/")
        directory.mkdir(parents=True, exist_ok=True)
        soname = f"libnvsimapp{n:04d}.so.1"
        (directory / f"{soname}.2.3").write_bytes(shared_object(soname))
        link = directory / soname
        if not os.path.lexists(link):
            link.symlink_to(f"{soname}.2.3")
    conf = rootfs / CONF
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text("".join(f"{d}\n" for d in where))
    main = rootfs / "etc/ld.so.conf"
    if "include /etc/ld.so.conf.d/*.conf" not in (main.read_text() if main.exists() else ""):
        with open(main, "a", encoding="utf-8") as f:
            f.write("include /etc/ld.so.conf.d/*.conf\n")
    proc = subprocess.run([ldconfig, "-r", str(rootfs)], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise SimError(f"build the image's ld.so.cache in {rootfs}: {ldconfig} -r exited with "
                       f"{proc.returncode}: {proc.stderr.strip()[-300:]}")
    return where
