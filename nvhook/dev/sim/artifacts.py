"""The compiled part of a simulated driver (libraries, binaries), optionally cached.

Effects: files in a staging tree `usr/lib/x86_64-linux-gnu`, `usr/lib/i386-linux-gnu`,
`usr/bin`, then copied into a root. With a cache directory, a staging tree is kept per
(driver version, CUDA version, 32-bit wanted, digest of the sources and catalog) and reused,
so later roots cost no compilation (the test fixtures build many roots).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

from nvhook.dev.sim import catalog
from nvhook.dev.sim.compile import (
    CFLAGS,
    SOURCE_DIR,
    Toolchain,
    build_library,
    build_program,
    compile_object,
    find_toolchain,
    link_stub,
)

log = logging.getLogger(__name__)

COMPLETE = ".complete"


def source_digest() -> str:
    """Digest of everything a build depends on besides the versions."""
    h = hashlib.sha256(repr((CFLAGS, catalog.LIBRARIES, catalog.BINARIES)).encode())
    for source in sorted(SOURCE_DIR.glob("*.[ch]")):
        h.update(source.name.encode() + b"\0" + source.read_bytes())
    return h.hexdigest()[:16]


def obtain_artifacts(version: str, cuda: int, want32: bool, cache_dir: Path | None,
                     work: Path) -> Path:
    """A complete staging tree for these versions: from the cache, or freshly built."""
    if cache_dir is None:
        stage = work / "stage"
        _build(stage, find_toolchain(version, cuda, work, want32), work)
        return stage
    entry = cache_dir / f"{version}-{cuda}-{'32' if want32 else '64'}-{source_digest()}"
    if (entry / COMPLETE).is_file():
        log.debug("reusing compiled simulated driver from %s", entry)
        return entry
    cache_dir.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".build-", dir=cache_dir))
    _build(stage, find_toolchain(version, cuda, work, want32), work)
    (stage / COMPLETE).touch()
    try:
        stage.rename(entry)
    except OSError:  # another process filled the entry first: use theirs
        shutil.rmtree(stage, ignore_errors=True)
    return entry


def install_artifacts(stage: Path, root: Path) -> bool:
    """Copy the staging tree into `root`; returns whether it has 32-bit libraries."""
    for dirpath, _, filenames in os.walk(stage):
        rel = Path(dirpath).relative_to(stage)
        (root / rel).mkdir(parents=True, exist_ok=True)
        for name in filenames:
            if name != COMPLETE:
                shutil.copy2(Path(dirpath) / name, root / rel / name)
    return (stage / catalog.LIB32_DIR.lstrip("/")).is_dir()


def _build(stage: Path, tc: Toolchain, work: Path) -> None:
    _build_libraries(stage, tc, work, m32=False)
    if tc.m32:
        _build_libraries(stage, tc, work, m32=True)
    bin_dir = stage / "usr/bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    build_program(tc, "nvidia_smi.c", bin_dir / "nvidia-smi", "-ldl")
    tool = work / "tool_stub"
    build_program(tc, "tool_stub.c", tool)
    for name, _ in catalog.BINARIES:
        if name != "nvidia-smi":
            shutil.copy2(tool, bin_dir / name)
    tools = stage / catalog.SIM_TOOLS_DIR.lstrip("/")  # not a driver directory
    tools.mkdir(parents=True, exist_ok=True)
    build_program(tc, "prestart.c", tools / "nvsim-prestart")


def _build_libraries(stage: Path, tc: Toolchain, work: Path, m32: bool) -> None:
    lib_dir = stage / (catalog.LIB32_DIR if m32 else catalog.LIB_DIR).lstrip("/")
    lib_dir.mkdir(parents=True, exist_ok=True)
    suffix = "32" if m32 else "64"
    stub = compile_object(tc, "stub.c", work / f"stub{suffix}.o", m32)
    tls = compile_object(tc, "stub.c", work / f"tls{suffix}.o", m32, "-DNVSIM_ABI_NOTE")
    # A link-time stand-in for libc: every stub DT_NEEDs libc.so.6 as the real ones do (so
    # ldconfig marks 32-bit entries "libc6", not plain "ELF") without the cost of linking
    # against the real libc 60 times.
    libc = work / f"libc{suffix}.so.6"
    link_stub(tc, stub, libc, "libc.so.6", m32)
    by_name = {lib.name: lib for lib in catalog.LIBRARIES}
    version = tc.driver_version
    for lib in catalog.LIBRARIES:
        if m32 and not lib.has32:
            continue
        out = lib_dir / lib.file_name(version)
        if lib.source == "nvml":
            build_library(tc, "fake_nvml.c", out, lib.soname(version), m32)
        elif lib.source == "cuda":
            build_library(tc, "fake_cuda.c", out, lib.soname(version), m32)
        else:
            needed = (libc, *(lib_dir / by_name[n].file_name(version) for n in lib.needs))
            link_stub(tc, tls if lib.source == "tls" else stub, out, lib.soname(version), m32,
                      needed)
