"""What `nvhook doctor` says about the CDI specs of the spec dirs: the rules of `nvhook cdi
check` (nvhook's specs regenerated and compared; another tool's checked for validity and for
what this host no longer has, never called stale by nvhook's stamp), and whether each
installed engine can read each spec (`nvhook.cdi.engines`). Effects: reads the specs, runs
the generator and the engines' `--version`.
"""

from __future__ import annotations

from nvhook.errors import NvhookError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from typing import Any

    from nvhook.config.model import HookConfig

Finding = tuple[str, str, str]  # (level, message, fix)


def findings(config: HookConfig, path_env: str) -> list[Finding]:
    from nvhook.cdi.check import spec_files
    from nvhook.cdi.engines import installed

    dirs = config.runtime.modes_cdi_spec_dirs
    ours = spec_files(dirs)
    if not ours:
        return [("info", "no nvidia.com/gpu CDI spec (podman --device nvidia.com/gpu=N and the "
                 "device plugin's cdi strategy need one)",
                 "nvhook cdi generate --output /etc/cdi/nvidia.yaml")]
    engines = installed(path_env)
    out: list[Finding] = []
    for path in spec_files(dirs, kind=None):
        out += _spec_findings(path, config, engines, gpu=path in ours)
    return out


def _spec_findings(path: str, config: HookConfig, engines: dict[str, tuple[str, str]], *,
                   gpu: bool) -> list[Finding]:
    from nvhook.cdi.check import author, read_spec
    from nvmount.errors import NvmountError

    try:
        spec = read_spec(path)
    except NvhookError as err:
        return [("warn", str(err), f"nvhook cdi generate --output {path} (or regenerate it "
                 "with the tool that wrote it)")]
    who = author(spec)
    out = []
    try:
        out += [_fresh(path, spec, config) if who == "nvhook" else
                _foreign(path, spec, who, config.nvhook.proc_root or "/proc")] if gpu else []
    except (NvhookError, NvmountError) as err:
        out.append(("warn", f"{path}: {err}", f"nvhook cdi generate --output {path}"))
    out += _readable(path, spec, who, engines)
    return out


def _fresh(path: str, spec: dict[str, Any], config: HookConfig) -> Finding:
    from nvhook.cdi.check import differences, regenerate
    from nvhook.cdi.heal import missing_gpus, only_all, only_all_note
    from nvhook.cdi.recorded import policy

    if only_all(spec):
        return ("warn", f"{path} {only_all_note(spec)}", f"nvhook cdi generate --output {path}")
    config = policy(spec, config, path, explicit=False, hook_path=None)
    why = differences(spec, regenerate(spec, config)) or missing_gpus(
        spec, config.nvhook.proc_root or "/proc")
    if why:
        return ("warn", f"{path} is stale: {'; '.join(why)}", "nvhook cdi check --refresh")
    return ("ok", f"{path}: current", "")


def _foreign(path: str, spec: dict[str, Any], who: str, proc_root: str) -> Finding:
    from nvhook.cdi.heal import incomplete, only_all, only_all_note

    gone = ([only_all_note(spec)] if only_all(spec) else []) + incomplete(spec, proc_root)
    if gone:
        return ("warn", f"{path} ({who}'s) does not match this host: "
                f"{'; '.join(gone[:3])}", f"regenerate it with {who} (nvhook never rewrites "
                "another tool's spec)")
    return ("ok", f"{path}: valid ({who}'s, cdiVersion {spec['cdiVersion']})", "")


def _readable(path: str, spec: dict[str, Any], who: str,
              engines: dict[str, tuple[str, str]]) -> list[Finding]:
    from nvhook.cdi.document import minimal_version, version_key
    from nvhook.cdi.engines import newest_readable, unreadable

    version = spec["cdiVersion"]
    cannot = unreadable(version, engines)
    if not cannot:
        return []
    lowest = minimal_version(spec)
    reads = [newest_readable(e, v) for e, (_, v) in engines.items()]
    floor = min((r for r in reads if r), key=version_key)
    if who == "nvhook" and version_key(lowest) <= version_key(floor):
        fix = f"nvhook cdi generate --output {path} --cdi-version {lowest}"
    else:
        fix = f"upgrade {cannot[0].split()[0]}, or regenerate the spec with a cdiVersion it reads"
    return [("warn", f"{path} (cdiVersion {version}, {who}'s) cannot be read by "
             f"{', '.join(cannot)}", fix)]
