"""Compiling the simulated driver's C sources with the system gcc. Effects: files in `out`.

Each distinct source is compiled once per ABI; the stub libraries are then linked from one
object file, each with its own SONAME (-Wl,-soname), which keeps a 64-GPU root at about a
second of compile time.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

from nvhook.errors import SimError
from nvmount.records import record

log = logging.getLogger(__name__)

SOURCE_DIR = Path(__file__).resolve().parent
CFLAGS = ("-O0", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wno-unused-function")


@record
class Toolchain:
    gcc: str
    driver_version: str
    cuda_version: int  # 12040
    m32: bool  # `gcc -m32` produces shared objects here

    def defines(self) -> tuple[str, ...]:
        return (
            f'-DNVSIM_DRIVER_VERSION="{self.driver_version}"',
            f"-DNVSIM_CUDA_VERSION={self.cuda_version}",
        )


def find_toolchain(driver_version: str, cuda_version: int, work: Path, want32: bool) -> Toolchain:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise SimError("build simulated driver: no C compiler found on PATH "
                       "(install gcc and libc6-dev, e.g. with packaging/setup.sh)")
    m32 = want32 and _probe_m32(gcc, work)
    return Toolchain(gcc, driver_version, cuda_version, m32)


def _probe_m32(gcc: str, work: Path) -> bool:
    src = work / "probe32.c"
    src.write_text("int nvsim_probe(void) { return 0; }\n")
    proc = subprocess.run(
        [gcc, "-m32", "-shared", "-fPIC", str(src), "-o", str(work / "probe32.so")],
        capture_output=True, check=False,
    )
    if proc.returncode != 0:
        log.info("no 32-bit libraries: gcc -m32 does not work here (install gcc-multilib)")
    return proc.returncode == 0


def run_gcc(tc: Toolchain, args: list[str], what: str) -> None:
    argv = [tc.gcc, *args]
    log.debug("running %s", " ".join(argv))
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = " ".join(proc.stderr.strip().splitlines()[-3:])
        raise SimError(f"build {what}: gcc exited with {proc.returncode}: {tail} "
                       "(is libc6-dev installed? for 32-bit, gcc-multilib)")


def arch_flags(m32: bool) -> list[str]:
    return ["-m32"] if m32 else []


def compile_object(tc: Toolchain, source: str, out: Path, m32: bool, *extra: str) -> Path:
    run_gcc(
        tc,
        [*arch_flags(m32), *CFLAGS, *tc.defines(), *extra, "-c", str(SOURCE_DIR / source),
         "-o", str(out)],
        f"{source} ({'32' if m32 else '64'}-bit)",
    )
    return out


def link_stub(tc: Toolchain, obj: Path, out: Path, soname: str, m32: bool,
              needed: tuple[Path, ...] = ()) -> None:
    """A shared object with SONAME `soname` and DT_NEEDED entries for the `needed` files."""
    args = [*arch_flags(m32), "-shared", "-nostdlib", f"-Wl,-soname,{soname}", str(obj)]
    if needed:
        args += ["-Wl,--no-as-needed", *map(str, needed)]
    run_gcc(tc, [*args, "-o", str(out)], out.name)


def build_library(tc: Toolchain, source: str, out: Path, soname: str, m32: bool) -> None:
    """A library with behaviour (fake NVML, fake CUDA): compile and link in one go."""
    run_gcc(
        tc,
        [*arch_flags(m32), *CFLAGS, *tc.defines(), "-shared", f"-Wl,-soname,{soname}",
         str(SOURCE_DIR / source), "-o", str(out), "-lpthread"],
        out.name,
    )


def build_program(tc: Toolchain, source: str, out: Path, *libs: str) -> None:
    run_gcc(
        tc,
        ["-O0", "-Wall", *tc.defines(), str(SOURCE_DIR / source), "-o", str(out), *libs],
        out.name,
    )
