"""F11: environment injection into the privileged hook (CVE-2025-23266 "NVIDIAScape") and the
Python-specific variants security.md §1 asks for (registered into `attacks.CASES`).

The image's ENV reaches runc as the spec's `process.env`; runc runs prestart hooks with the
hook entry's own `env` and cwd = the bundle. Every payload is planted twice: at the rootfs
top level (`ADD poc.so /`) and in the bundle directory (the hook's cwd, what
`/proc/self/cwd` means for the hook). Each payload creates a random host marker when run.

Two families:
- `F11-image-env-*`: the variables in `process.env` (the real attack);
- `F11-hook-env-*`: the same PYTHON* variables in the hook entry's own env - the worst case
  of a runtime that leaks the container env into hooks (runc < 1.3 createContainer hooks,
  crun without `env`). The launcher runs `python3 -IS`, so they must have no effect.
  Dynamic-loader variables (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT) in the hook's own env are
  out of scope: the loader runs them before any interpreter line (cli.py says so; nvhook's
  hook entries always carry an explicit env).
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.security.attacks import Expect, Scenario, case
from tests.security.fixtures import AttackRig, HostOracle, compile_poc

PY_MODULES = ("sitecustomize", "usercustomize", "json", "ctypes", "logging", "argparse",
              "tomllib", "enum", "dataclasses", "typing", "struct", "evilmod", "errno", "stat")


def _payload_py(marker: str) -> str:
    return (f"import os as _o\n_fd = _o.open({marker!r}, _o.O_CREAT | _o.O_WRONLY, 0o644)\n"
            "_o.write(_fd, b'owned')\n_o.close(_fd)\nclass X(Warning):\n    pass\n")


def _plant_everything(rig: AttackRig, marker: str) -> tuple[Path, ...]:
    """Payload files in a staging dir; returns the staged entries (copied into both places)."""
    stage = rig.tmp / f"payload-{os.path.basename(marker)}"
    if stage.exists():
        return tuple(stage.iterdir())
    stage.mkdir()
    poc = compile_poc(stage / "poc.so", marker)
    for lib in ("libz.so.1", "libexpat.so.1", "libm.so.6"):
        (stage / lib).write_bytes(poc.read_bytes())
    for mod in PY_MODULES:
        (stage / f"{mod}.py").write_text(_payload_py(marker))
    (stage / "startup.py").write_text(_payload_py(marker))
    (stage / "evil.pth").write_text(f"import os; open({marker!r}, 'w').write('owned')\n")
    enc = stage / "lib/python3.11/encodings"
    enc.mkdir(parents=True)
    (enc / "__init__.py").write_text(_payload_py(marker))
    (stage / "gconv-modules").write_text("module  INTERNAL  EVIL//  poc  1\n"
                                         "module  EVIL//  INTERNAL  poc  1\n")
    (stage / "poc.c").unlink(missing_ok=True)
    return tuple(stage.iterdir())


def _copy_into(entries: tuple[Path, ...], dest: Path) -> None:
    import shutil

    for entry in entries:
        target = dest / entry.name
        if target.exists() or target.is_symlink():
            continue  # never clobber the rootfs' own lib dirs etc.
        if entry.is_dir():
            shutil.copytree(entry, target)
        else:
            shutil.copy2(entry, target)


def _scenario(rig: AttackRig, o: HostOracle, image_env: tuple[str, ...],
              hook_env: tuple[str, ...]) -> Scenario:
    marker = o.marker("/tmp", "HOST_PRELOAD")
    entries = _plant_everything(rig, marker)

    def mutate(rootfs: Path) -> None:
        _copy_into(entries, rootfs)
        _copy_into(entries, rootfs.parent)  # the bundle dir: the hook's cwd
        o.markers.append(str(rootfs / marker.lstrip("/")))  # the container never runs them

    return Scenario(Expect.START, {"mutate": mutate, "env": image_env, "hook_env": hook_env})


_CWD = "/proc/self/cwd"
LOADER_ENV = {
    "LD_PRELOAD": (f"LD_PRELOAD={_CWD}/poc.so:{_CWD}/rootfs/poc.so:/poc.so",),
    "LD_LIBRARY_PATH": (f"LD_LIBRARY_PATH={_CWD}:{_CWD}/rootfs:/",),
    "LD_AUDIT": (f"LD_AUDIT={_CWD}/poc.so:{_CWD}/rootfs/poc.so",),
    "GCONV_PATH": (f"GCONV_PATH={_CWD}:{_CWD}/rootfs", "CHARSET=EVIL"),
}
PYTHON_ENV = {
    "PYTHONPATH": (f"PYTHONPATH={_CWD}:{_CWD}/rootfs:/",),
    "PYTHONSTARTUP": (f"PYTHONSTARTUP={_CWD}/startup.py", "PYTHONINSPECT=1"),
    "PYTHONHOME": (f"PYTHONHOME={_CWD}", ),
    "PYTHONWARNINGS": ("PYTHONWARNINGS=ignore::evilmod.X", f"PYTHONPATH={_CWD}"),
    "PYTHONINSPECT": ("PYTHONINSPECT=1",),
    "PYTHONUSERBASE": (f"PYTHONUSERBASE={_CWD}", "PYTHONNOUSERSITE="),
    "PYTHONSAFEPATH-off": ("PYTHONSAFEPATH=", "PYTHONDONTWRITEBYTECODE=1"),
}


for _name, _env in {**LOADER_ENV, **PYTHON_ENV}.items():
    def _image(rig: AttackRig, o: HostOracle, env: tuple[str, ...] = _env) -> Scenario:
        return _scenario(rig, o, env, ())
    case(f"F11-CVE-2025-23266-image-env-{_name}")(_image)

for _name, _env in PYTHON_ENV.items():
    def _hook(rig: AttackRig, o: HostOracle, env: tuple[str, ...] = _env) -> Scenario:
        return _scenario(rig, o, (), env)
    case(f"F11-CVE-2025-23266-hook-env-{_name}")(_hook)


@case("F11-module-shadowing-files-only")
def f11_files(rig: AttackRig, o: HostOracle) -> Scenario:
    """sitecustomize.py, json.py, ctypes.py ... at the rootfs top and in the bundle, no env."""
    return _scenario(rig, o, (), ())


@case("F11-CVE-2025-23266-nvidiascape-exact")
def f11_exact(rig: AttackRig, o: HostOracle) -> Scenario:
    """The public PoC: ENV LD_PRELOAD=/proc/self/cwd/poc.so, ADD poc.so /."""
    return _scenario(rig, o, (f"LD_PRELOAD={_CWD}/poc.so",), ())
