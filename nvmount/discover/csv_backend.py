"""The Tegra CSV discovery backend (NVIDIA's `csv` mode): the driver is what the mount
specification files say, not what NVML reports (Jetson's integrated GPU has no NVML).

`<mount-spec-path>/*.csv` (nvidia-container-runtime.modes.csv.mount-spec-path), lines
`kind, path` with kind one of dev, lib, sym, dir (case-insensitive; `#` comments, blank lines
skipped), paths absolute in the driver root. Bounded: 64 files, 4096 lines and 4096 characters
a line. The result has the inventory's shape (`DriverInventory`): `dev` entries are control
nodes (character devices, any major), `lib` entries files and `dir` entries directories bound
at their own paths (FileKind CONFIG / DIRECTORY in `graphics`, gated by every capability),
`sym` entries links recreated with the host's link text (`links`). The report lists what was
found, what is missing (skipped) and what conflicts (one path listed with two kinds, or a
kind that does not match the file: a `dev` that is not a character device, a `sym` that is
not a link): conflicting paths are skipped too.
"""

from __future__ import annotations

import os
import stat

from nvmount.capabilities import DriverCapability as Cap
from nvmount.discover.inventory import DeviceNode, DriverFile, DriverInventory, FileKind
from nvmount.errors import DriverError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount.discover.driver_root import DriverRoot

KINDS = ("dev", "lib", "sym", "dir")
MAX_FILES = 64
MAX_LINES = 4096
MAX_LINE = 4096
TEGRA_RELEASE = "/etc/nv_tegra_release"


def is_tegra(root: DriverRoot) -> bool:
    """NVIDIA's Tegra test: /etc/nv_tegra_release in the driver root."""
    hit = root.resolve(TEGRA_RELEASE)
    return hit.exists and os.path.isfile(root.host(hit.path))


def read_specs(spec_dir: str) -> list[tuple[str, str, str]]:
    """(file name, kind, path) of every entry of the *.csv files, in file and line order; the
    directory and files must be root's alone (`nvmount.fs.trusted`: they name what is mounted
    into containers)."""
    from nvmount.errors import TrustError
    from nvmount.fs.trusted import list_dir, read_file

    try:
        names = [n for n in list_dir(spec_dir, "read CSV mount specs")
                 if n.endswith(".csv")][:MAX_FILES]
    except TrustError as err:
        raise DriverError(str(err)) from err
    except OSError as err:
        raise DriverError(f"read CSV mount specs {spec_dir}: {err.strerror} (set "
                          "nvidia-container-runtime.modes.csv.mount-spec-path)") from err
    out: list[tuple[str, str, str]] = []
    for name in names:
        path = os.path.join(spec_dir, name)
        try:
            data = read_file(path, "read CSV mount spec", MAX_LINES * MAX_LINE)
        except TrustError as err:
            raise DriverError(str(err)) from err
        except OSError as err:
            raise DriverError(f"read CSV mount spec {path}: {err.strerror}") from err
        for number, raw in enumerate(data.decode("utf-8", "replace").splitlines()[:MAX_LINES],
                                     1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            kind, sep, value = line[:MAX_LINE].partition(",")
            kind, value = kind.strip().lower(), value.strip()
            if not sep or kind not in KINDS or not value.startswith("/"):
                raise DriverError(f"CSV mount spec {path} line {number}: {line[:200]!r} is not "
                                  "`dev|lib|sym|dir, /absolute/path`")
            out.append((name, kind, os.path.normpath(value)))
    return out


def csv_inventory(root: DriverRoot, spec_dir: str) -> DriverInventory:
    """The inventory the CSV files describe (see the module docstring)."""
    entries = read_specs(spec_dir)
    kinds: dict[str, set[str]] = {}
    for _, kind, path in entries:
        kinds.setdefault(path, set()).add(kind)
    nodes: list[DeviceNode] = []
    files: list[DriverFile] = []
    links: list[tuple[str, str]] = []
    report: list[str] = []
    for path in dict.fromkeys(p for _, _, p in entries):
        found = _entry(root, path, kinds[path], report)
        if isinstance(found, DeviceNode):
            nodes.append(found)
        elif isinstance(found, DriverFile):
            files.append(found)
        elif isinstance(found, tuple):
            links.append(found)
    report.insert(0, f"csv: {len(nodes)} devices, {len(files)} files and directories, "
                     f"{len(links)} links from {spec_dir}")
    version = _release(root)
    return DriverInventory(root=root.root, driver_version=version, cuda_version="", gpus=(),
                           libraries=(), libraries32=(), binaries=(), firmware=(), ipc=(),
                           control_nodes=tuple(nodes), proc_driver_dir="",
                           warnings=tuple(report), graphics=tuple(files),
                           links=tuple(links))


def _entry(root: DriverRoot, path: str, kinds: set[str],
           report: list[str]) -> DeviceNode | DriverFile | tuple[str, str] | None:
    if len(kinds) > 1:
        report.append(f"conflict: {path} is listed as {' and '.join(sorted(kinds))}")
        return None
    (kind,) = kinds
    host = root.host(path)
    try:
        st = os.lstat(host)
    except OSError:
        report.append(f"skipped: {path} ({kind}) is missing")
        return None
    if kind == "sym":
        if not stat.S_ISLNK(st.st_mode):
            report.append(f"conflict: {path} is listed as a link but is not one")
            return None
        return path, os.readlink(host)
    if stat.S_ISLNK(st.st_mode):  # dev/lib/dir: what the link names, inside the driver root
        hit = root.resolve(path)
        host = root.host(hit.path)
        try:
            st = os.stat(host)
        except OSError:
            report.append(f"skipped: {path} ({kind}) is a dangling link")
            return None
    if kind == "dev":
        if not stat.S_ISCHR(st.st_mode):
            report.append(f"conflict: {path} is listed as a device but is not one")
            return None
        return DeviceNode(host, path, os.major(st.st_rdev), os.minor(st.st_rdev))
    want_dir = kind == "dir"
    if stat.S_ISDIR(st.st_mode) != want_dir or not (want_dir or stat.S_ISREG(st.st_mode)):
        report.append(f"conflict: {path} is listed as a {kind} but is not one")
        return None
    return DriverFile(FileKind.DIRECTORY if want_dir else FileKind.CONFIG, host, path,
                      Cap.all(), _soname(host) if kind == "lib" else "")


def _soname(host: str) -> str:
    from nvmount.discover.elf import ElfFormatError, read_elf

    try:
        return read_elf(host).soname or ""
    except (OSError, ElfFormatError):
        return ""


def _release(root: DriverRoot) -> str:
    """"R35 (release), REVISION: 4.1" from nv_tegra_release's first line ("" without it)."""
    hit = root.resolve(TEGRA_RELEASE)
    try:
        with open(root.host(hit.path), "rb") as stream:
            first = stream.read(512).decode("utf-8", "replace").splitlines()[:1]
    except OSError:
        return ""
    text = first[0].lstrip("# ").split(",")[:2] if first else []
    return ",".join(t.strip() for t in text)
