"""Which cdiVersion the installed container engines can read. Effects: runs `ENGINE --version`.

An engine reads the specs its vendored CDI library knows: library v0.X.Y knows cdiVersions up
to 0.X.0, and refuses a newer one (`invalid version`) or a field it does not know (`unknown
field additionalGids`: NVIDIA's specs are 0.7.0 since 1.19.1). The table is the library each
release vendors (its go.mod), from the first release with that library:

    podman      4.0 0.3.0 · 4.1 0.4.0 · 4.3 0.5.0 · 4.7 0.6.0 · 5.1 0.7.0 · 5.2 0.8.0 · 5.5 1.0.0
    containerd  1.7.0 0.5.0 · 1.7.12 0.6.0 · 1.7.16 0.7.0 · 1.7.27 0.8.0 · 2.0.5 1.0.0 ·
                2.2.1 1.1.0 (none before 1.7)
    docker      25.0 0.6.0 · 26.1 0.7.0 · 27.4 0.8.0 · 28.1 1.0.0 (none before 25; before 28.2
                only with `"features": {"cdi": true}`)
    cri-o       1.24 0.3.0 · 1.25 0.5.0 · 1.28 0.6.0 · 1.30 0.7.0 · 1.31 0.8.0 · 1.33 1.0.0 ·
                1.35 1.1.0
"""

from __future__ import annotations

import re
import subprocess

from nvhook.cdi.document import version_key

READS: dict[str, tuple[tuple[str, str], ...]] = {
    "podman": (("4.0.0", "0.3.0"), ("4.1.0", "0.4.0"), ("4.3.0", "0.5.0"), ("4.7.0", "0.6.0"),
               ("5.1.0", "0.7.0"), ("5.2.0", "0.8.0"), ("5.5.0", "1.0.0")),
    "containerd": (("1.7.0", "0.5.0"), ("1.7.12", "0.6.0"), ("1.7.16", "0.7.0"),
                   ("1.7.27", "0.8.0"), ("2.0.0", "0.8.0"), ("2.0.5", "1.0.0"),
                   ("2.2.1", "1.1.0")),
    "docker": (("25.0.0", "0.6.0"), ("26.1.0", "0.7.0"), ("27.4.0", "0.8.0"),
               ("28.1.0", "1.0.0")),
    "cri-o": (("1.24.0", "0.3.0"), ("1.25.0", "0.5.0"), ("1.28.0", "0.6.0"),
              ("1.30.0", "0.7.0"), ("1.31.0", "0.8.0"), ("1.33.0", "1.0.0"),
              ("1.35.0", "1.1.0")),
}
BINARIES = {"podman": "podman", "containerd": "containerd", "docker": "dockerd",
            "cri-o": "crio"}
_VERSION = re.compile(r"(?<![\d.])(\d+)\.(\d+)\.(\d+)")


def newest_readable(engine: str, version: str) -> str | None:
    """The newest cdiVersion `engine` at `version` reads; None: it has no CDI."""
    found = None
    for first, cdi in READS[engine]:
        if _key(version) >= _key(first):
            found = cdi
    return found


def _key(version: str) -> tuple[int, ...]:
    match = _VERSION.search(version)
    return tuple(int(g) for g in match.groups()) if match else (0, 0, 0)


def installed(path_env: str, *, timeout: float = 10) -> dict[str, tuple[str, str]]:
    """{engine: (binary, version)} of the engines on `path_env`."""
    from nvhook.programs import trusted_which

    found = {}
    for engine, name in BINARIES.items():
        binary = trusted_which(name, path_env)
        if binary is None:  # absent, or where a user could have put it: not run
            continue
        try:
            proc = subprocess.run([binary, "--version"], capture_output=True, text=True,
                                  timeout=timeout, check=False, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            continue
        match = _VERSION.search(proc.stdout + proc.stderr)
        if match:
            found[engine] = (binary, match.group(0))
    return found


def unreadable(spec_version: str, engines: dict[str, tuple[str, str]]) -> list[str]:
    """`engine version (reads up to X)` for each engine with CDI that cannot read a spec of
    `spec_version`."""
    out = []
    for engine, (_, version) in sorted(engines.items()):
        newest = newest_readable(engine, version)
        if newest is not None and version_key(spec_version.removeprefix("v")) > \
                version_key(newest):
            out.append(f"{engine} {version} (reads up to {newest})")
    return out
