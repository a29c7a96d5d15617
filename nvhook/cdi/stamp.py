"""The stamp of a spec nvhook generated: what it was made from, so that `nvhook cdi check`
knows the spec is ours, whether it is still true, and how to make it again.

    driver=550.54.15;majors=nvidia-frontend:195,...;digest=sha256:...;state=sha256:...;
    strategy=index;kind=nvidia.com/gpu;version=;ids=all;alldev=1;hooks=1;config=/etc/...

- `digest`: every host path the spec names (type, size, mtime, inode, device number);
- `state`: the driver's own state, read from procfs without NVML (`driver_state`): its
  version, the majors of its nodes, its GPUs (`gpus/`), its MIG instances
  (`capabilities/gpu*/mig/gi*/ci*`): what a MIG reconfiguration, a GPU hot-plug or a module
  reload changes. The refresh unit compares it every few seconds for almost nothing;
- the generation options and the config file, so a refresh regenerates the same spec.

Effects: stat and listdir of the driver's files and procfs.
"""

from __future__ import annotations

import hashlib
import os

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Iterable

MAX_ENTRIES = 10_000
OPTION_KEYS = ("strategy", "kind", "version", "ids", "alldev", "hooks", "config")


def make_stamp(driver_version: str, majors: dict[str, int], paths: Iterable[str],
               state: str, options: dict[str, str]) -> str:
    shown = ",".join(f"{name}:{major}" for name, major in sorted(majors.items()))
    parts = [f"driver={driver_version}", f"majors={shown}", f"digest={paths_digest(paths)}",
             f"state={state}"]
    parts += [f"{k}={options[k]}" for k in OPTION_KEYS if k in options
              and ";" not in options[k] and "\n" not in options[k]]
    return ";".join(parts)


def paths_digest(paths: Iterable[str]) -> str:
    """sha256 of the type, size, mtime, inode and device number of each path."""
    digest = hashlib.sha256()
    for path in sorted(set(paths)):
        try:
            st = os.stat(path)
            fact = f"{st.st_mode:o}:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}:{st.st_rdev}"
        except OSError:
            fact = "missing"
        digest.update(f"{path}\0{fact}\n".encode("utf-8", "surrogateescape"))
    return f"sha256:{digest.hexdigest()[:32]}"


def parse_stamp(text: str) -> dict[str, str]:
    return dict(part.partition("=")[::2] for part in text.split(";") if "=" in part)


def driver_state(proc_root: str) -> str:
    """sha256 of the driver's state in procfs ("none" without /proc/driver/nvidia)."""
    top = os.path.join(proc_root, "driver/nvidia")
    if not os.path.isdir(top):
        return "none"
    facts = [_read(os.path.join(top, "version"))]
    facts += sorted(line for line in _read(os.path.join(proc_root, "devices")).splitlines()
                    if "nvidia" in line)
    facts += ["gpu " + name for name in _names(os.path.join(top, "gpus"))]
    caps = os.path.join(top, "capabilities")
    for gpu in _names(caps):
        for gi in _names(os.path.join(caps, gpu, "mig")):
            facts.append(f"{gpu}/{gi}")
            facts += [f"{gpu}/{gi}/{ci}" for ci in _names(os.path.join(caps, gpu, "mig", gi))
                      if ci.startswith("ci")]
    text = "\n".join(facts).encode("utf-8", "surrogateescape")
    return "sha256:" + hashlib.sha256(text).hexdigest()[:32]


def _read(path: str) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        return os.read(fd, 1 << 16).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def _names(path: str) -> list[str]:
    try:
        with os.scandir(path) as entries:
            names: list[str] = []
            for entry in entries:
                if len(names) >= MAX_ENTRIES:
                    break
                names.append(entry.name)
    except OSError:
        return []
    return sorted(names)
