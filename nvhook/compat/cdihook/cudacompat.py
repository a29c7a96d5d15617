"""`enable-cuda-compat`'s decision: should the image's CUDA forward-compatibility libcuda be
used instead of the host driver's? Pure: parsing bytes handed in, comparing versions.

NVIDIA 1.20 (cmd/nvidia-cdi-hook/cudacompat) decides from the image's one
`<compat root>/libcuda.so.*.*`:

1. its ELF note section `.note.cuda.fwd_compatibility` (owner "NVIDIA Corporation", a JSON
   description `{"CUDA Version": "12.4", "Driver": [535, 550], ...}`), when present: with a
   host driver version, the host driver's major must be listed and the compat library's
   version must be newer than the host driver's; without one, the note's CUDA version must be
   newer than `--host-cuda-version`;
2. without a note: never with `--host-cuda-version`; else the compat library's major must be
   greater than the host driver's.

Versions are read loosely (as Masterminds/semver's NewVersion: an optional "v", one to three
numbers, leading zeros allowed, a pre-release sorting below its release). Every read of the
file is bounded: a hostile image gets "no note", never a large allocation.
"""

from __future__ import annotations

import struct

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable

    Reader = Callable[[int, int], bytes]  # (offset, size) -> bytes (maybe fewer at EOF)

NOTE_SECTION = b".note.cuda.fwd_compatibility"
NOTE_OWNER = "NVIDIA Corporation"
SHT_NOTE = 7
MAX_SECTIONS = 4096
MAX_SHSTRTAB = 1 << 20
MAX_NOTE = 64 << 10


def parse_version(text: str) -> tuple[int, int, int, int, str] | None:
    """(major, minor, patch, release rank, pre-release) or None when not a version."""
    core, _, _build = text.strip().removeprefix("v").partition("+")
    core, dash, pre = core.partition("-")
    parts = core.split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isascii() and p.isdigit() for p in parts):
        return None
    if dash and not pre:
        return None
    nums = [int(p) for p in parts] + [0] * (3 - len(parts))
    return nums[0], nums[1], nums[2], 0 if dash else 1, pre


def read_note(read: Reader) -> dict[str, object] | None:
    """The JSON description of the forward-compatibility note, None without one. ValueError
    for a file that is not a readable ELF object."""
    ident = read(0, 64)
    if len(ident) < 52 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) or \
            ident[5] not in (1, 2):
        raise ValueError("not an ELF object")
    is64, order = ident[4] == 2, "<" if ident[5] == 1 else ">"
    if is64:
        shoff, = struct.unpack_from(order + "Q", ident, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", ident, 0x3A)
    else:
        shoff, = struct.unpack_from(order + "I", ident, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", ident, 0x2E)
    want = 64 if is64 else 40
    if shnum == 0 or shnum > MAX_SECTIONS or shentsize < want or shstrndx >= shnum:
        return None
    table = read(shoff, shnum * shentsize)
    if len(table) < shnum * shentsize:
        raise ValueError("truncated section headers")
    fmt = order + ("IIQQQQIIQQ" if is64 else "IIIIIIIIII")
    headers = [struct.unpack_from(fmt, table, i * shentsize) for i in range(shnum)]
    # (name, type, flags, addr, offset, size, link, info, addralign, entsize)
    names = headers[shstrndx]
    strtab = read(names[4], min(names[5], MAX_SHSTRTAB))
    for h in headers:
        if h[1] != SHT_NOTE or h[5] > MAX_NOTE:
            continue
        end = strtab.find(b"\0", h[0])
        if strtab[h[0]:end if end >= 0 else None] == NOTE_SECTION:
            return parse_note(read(h[4], h[5]), order, h[8])
    return None


def _align(size: int, to: int) -> int:
    to = to if to > 0 and to & (to - 1) == 0 else 1
    return (size + to - 1) & ~(to - 1)


def parse_note(data: bytes, order: str, align: int) -> dict[str, object] | None:
    """The note's JSON description when its owner is NVIDIA's (as NVIDIA trims and aligns)."""
    import json

    if len(data) < 12:
        return None
    namesz, descsz, _ = struct.unpack_from(order + "III", data, 0)
    if namesz == 0 or descsz == 0:
        return None
    name_end = 12 + _align(namesz, align)
    if data[12:name_end].strip(b"\0").decode("latin-1") != NOTE_OWNER:
        return None
    desc = data[name_end:name_end + descsz].strip(b"\0")
    try:
        doc = json.loads(desc.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise ValueError(f"could not unmarshal JSON data: {err}") from err
    return doc if isinstance(doc, dict) else None


def use_compat(compat_version: str, note: dict[str, object] | None, host_driver: str,
               host_cuda: str) -> tuple[bool, str]:
    """(use the compat libraries?, why) - NVIDIA 1.20's rules (module doc)."""
    compat, driver, cuda = (parse_version(v) for v in (compat_version, host_driver, host_cuda))
    if note is not None:
        if compat is None or driver is None:
            wanted = parse_version(str(note.get("CUDA Version") or ""))
            if cuda is not None and wanted is not None and wanted > cuda:
                return True, f"its CUDA {note.get('CUDA Version')} is newer than {host_cuda}"
            return False, "no host driver version to compare with its note"
        drivers = note.get("Driver")
        if not isinstance(drivers, list) or driver[0] not in drivers:
            return False, f"its note does not list host driver branch {driver[0]}"
        if compat > driver:
            return True, f"{compat_version} is newer than host driver {host_driver}"
        return False, f"{compat_version} is not newer than host driver {host_driver}"
    if host_cuda or compat is None or driver is None:
        return False, "no forward-compatibility note to decide from"
    if driver[0] < compat[0]:
        return True, f"major {compat[0]} is newer than host driver {host_driver}"
    return False, f"major {compat[0]} is not newer than host driver {host_driver}"
