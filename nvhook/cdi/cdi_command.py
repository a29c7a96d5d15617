"""`nvhook cdi`: generate, check, list, refresh, hook.

    nvhook cdi generate [--output PATH] [--format yaml|json] [--device-name-strategy S]
                        [--vendor V] [--class C] [--cdi-version X.Y.Z] [--hook-path PATH]
                        [--no-hook] [--device-id ID ...] [--no-all-device]
    nvhook cdi check [--spec PATH] [--refresh] [--hook-path PATH]
    nvhook cdi list [--spec PATH]
    nvhook cdi refresh --output PATH [--wait SECONDS]     (the refresh units)
    nvhook cdi hook apply ARGS                             (run by the OCI runtime)

`--config PATH` (global) names the config.toml whose driver root and capabilities are used.
Without `--spec`, check and list read every nvidia.com/gpu spec in the config's CDI spec dirs
(`nvidia-container-runtime.modes.cdi.spec-dirs`). check exits 1 when a spec is invalid,
stale (ours) or names devices this host no longer has (anyone's).
"""

from __future__ import annotations

import os
import sys

from nvhook.errors import CdiError, NvhookError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    import argparse
    from typing import Any

    from nvhook.cdi.generate import GenerateOptions
    from nvhook.config.model import HookConfig
    from nvhook.flags import GlobalOptions


def _parser() -> argparse.ArgumentParser:
    import argparse

    parser = argparse.ArgumentParser(prog="nvhook cdi", description="CDI specs of this host")
    sub = parser.add_subparsers(dest="action", required=True)
    gen = sub.add_parser("generate", help="write the CDI spec of this host's GPUs")
    gen.add_argument("--output", metavar="PATH", help="file to write (default: stdout)")
    _generation(gen)
    check = sub.add_parser("check", help="is a spec on disk valid and still true here?")
    check.add_argument("--hook-path", help="the launcher its hooks run (default: the spec's)")
    check.add_argument("--spec", metavar="PATH", help="the spec (default: the spec dirs')")
    check.add_argument("--refresh", action="store_true",
                       help="rewrite nvhook's stale specs atomically (never another tool's)")
    lst = sub.add_parser("list", help="the device names the specs provide")
    lst.add_argument("--spec", metavar="PATH", help="the spec (default: the spec dirs')")
    ref = sub.add_parser("refresh", help="write or update nvhook's spec at PATH (the units)")
    ref.add_argument("--output", metavar="PATH", required=True)
    ref.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                     help="wait this long for the driver to be ready (default 0)")
    _generation(ref)
    hook = sub.add_parser("hook", help="the spec's hook (the runtime runs it)")
    hook.add_argument("name")
    hook.add_argument("args", nargs=argparse.REMAINDER)  # (run without argparse: main)
    return parser


def _generation(parser: argparse.ArgumentParser) -> None:
    from nvhook.cdi.document import VERSIONS
    from nvhook.cdi.spec import STRATEGIES

    parser.add_argument("--format", choices=("yaml", "json"),
                        help="default: json for a .json output, else yaml")
    parser.add_argument("--device-name-strategy", choices=STRATEGIES, default="index",
                        help="index: `0`, `0:1` and the UUIDs; uuid: UUIDs only; type-index: "
                             "`gpu0`, `mig0:1`")
    parser.add_argument("--vendor", default="nvidia.com")
    parser.add_argument("--class", dest="device_class", default="gpu")
    parser.add_argument("--cdi-version", choices=VERSIONS[2:], default="",
                        help="write this cdiVersion (default: the lowest that fits, 0.5.0 "
                             "for the default names: Podman 4.3 reads it)")
    parser.add_argument("--hook-path", default="",
                        help="the nvhook launcher the spec's hook runs (default: this "
                             "installation's: /usr/bin/nvhook, nvhook install's, the venv's)")
    parser.add_argument("--no-hook", action="store_true",
                        help="no hook (no links, ld.so.cache or procfs view in containers)")
    parser.add_argument("--device-id", action="append", metavar="ID",
                        help="only these GPUs / MIG devices (index or UUID; repeatable)")
    parser.add_argument("--no-all-device", action="store_true", help="no `all` device")


def options_of(args: argparse.Namespace) -> GenerateOptions:
    from nvhook.cdi.generate import GenerateOptions

    ids = tuple(i for v in args.device_id or ["all"] for i in v.split(",") if i)
    return GenerateOptions(strategy=args.device_name_strategy, vendor=args.vendor,
                           device_class=args.device_class, cdi_version=args.cdi_version,
                           hook_path=args.hook_path, hooks=not args.no_hook,
                           device_ids=ids or ("all",), all_device=not args.no_all_device)


def main(argv: list[str], opts: GlobalOptions) -> int:
    if argv[:1] == ["hook"] and len(argv) > 1:  # hooks' own flags are not argparse's
        from nvhook.cdi.spec_hook import main_hook

        return main_hook(argv[1], argv[2:], opts)
    args = _parser().parse_args(argv)
    from nvhook.hook.prestart import config_for

    config = config_for(opts)
    if args.action == "generate":
        return _generate(args, config)
    if args.action == "check":
        return _check(args, config, explicit=_explicit_config(opts))
    if args.action == "refresh":
        return _refresh(args, config)
    return _list(args, config)


def _explicit_config(opts: GlobalOptions) -> bool:
    from nvhook.config.load import CONFIG_PATH_ENV

    return bool(opts.config_path or os.environ.get(CONFIG_PATH_ENV))


def _generate(args: argparse.Namespace, config: HookConfig) -> int:
    from nvhook.cdi.generate import format_of, generate_spec, render, write_atomically

    spec = generate_spec(config, options_of(args))
    text = render(spec, format_of(args.output, args.format))
    if args.output:
        from nvhook.cdi.recorded import generate_warning

        write_atomically(args.output, text)
        warning = generate_warning(config.path)
        if warning:
            sys.stderr.write(warning + "\n")
        sys.stderr.write(f"nvhook cdi: wrote {args.output}: {len(spec['devices'])} devices, "
                         f"cdiVersion {spec['cdiVersion']}\n")
    else:
        sys.stdout.write(text)
    return 0


def _refresh(args: argparse.Namespace, config: HookConfig) -> int:
    from nvhook.cdi.generate import format_of, generate_spec, render
    from nvhook.cdi.refresh import refresh

    options = options_of(args)
    fmt = format_of(args.output, args.format)
    print(refresh(args.output, config, lambda c: generate_spec(c, options),
                  lambda spec: render(spec, fmt), wait=max(0.0, args.wait)))
    return 0


NVIDIA_KINDS = "nvidia.com/"  # nvidia.com/gpu, management.nvidia.com/gpu, DRA's claim specs


def _targets(args: argparse.Namespace, config: HookConfig) -> list[str]:
    from nvhook.cdi.check import spec_files

    if args.spec:
        return [args.spec]
    found = spec_files(config.runtime.modes_cdi_spec_dirs, NVIDIA_KINDS)
    if not found:
        raise NvhookError("cdi: no nvidia.com/gpu spec in "
                          f"{', '.join(config.runtime.modes_cdi_spec_dirs)} (generate one: "
                          "nvhook cdi generate --output /etc/cdi/nvidia.yaml)")
    return found


def _check(args: argparse.Namespace, config: HookConfig, *, explicit: bool) -> int:
    failed = 0
    for path in _targets(args, config):
        try:
            line, ok = check_one(path, config, refresh=args.refresh, hook_path=args.hook_path,
                                 explicit=explicit, named=bool(args.spec))
        except (NvhookError, CdiError) as err:
            if not args.spec:
                line, ok = f"{path}: {err}", False
            else:
                raise
        print(line)
        failed += not ok
    return 1 if failed else 0


def check_one(path: str, config: HookConfig, *, refresh: bool, hook_path: str | None,
              explicit: bool, named: bool) -> tuple[str, bool]:
    """(the line for `path`, whether it is fine)."""
    from nvhook.cdi.check import (
        author,
        differences,
        read_spec,
        regenerate,
        vanished,
    )
    from nvhook.cdi.heal import missing_gpus, only_all, only_all_note
    from nvhook.cdi.recorded import policy

    old = read_spec(path)
    who = author(old)
    if who != "nvhook":
        return _foreign(path, old, who, refresh=refresh, named=named,
                        proc_root=config.nvhook.proc_root or "/proc")
    if only_all(old):
        return f"{path}: {only_all_note(old)} (regenerate it without --device-id)", False
    config = policy(old, config, path, explicit=explicit, hook_path=hook_path)
    new = regenerate(old, config, hook_path=hook_path or None)
    proc_root = config.nvhook.proc_root or "/proc"
    why = differences(old, new) or missing_gpus(old, proc_root)
    if not why:
        return f"{path}: current", True
    if refresh:
        from nvhook.cdi.generate import format_of, render, write_atomically
        from nvhook.cdi.heal import checked

        write_atomically(path, render(checked(new, proc_root, path), format_of(path, None)))
        return f"{path}: refreshed ({'; '.join(why)})", True
    gone = [g for g in vanished(old) if g not in why]
    detail = "; ".join(why + gone[:3])
    return f"{path}: stale: {detail} (fix: nvhook cdi check --refresh)", False


def _foreign(path: str, spec: dict[str, Any], who: str, *, refresh: bool,
             named: bool, proc_root: str) -> tuple[str, bool]:
    from nvhook.cdi.heal import incomplete, only_all, only_all_note

    gone = incomplete(spec, proc_root)
    if only_all(spec):
        gone.insert(0, only_all_note(spec))
    if refresh and named:
        raise CdiError(f"cdi check --refresh: {path} was written by {who}, not nvhook: it is "
                       "never rewritten (regenerate it with the tool that wrote it)")
    what = f"written by {who}, cdiVersion {spec['cdiVersion']}, {len(spec['devices'])} devices"
    if gone:
        return (f"{path}: does not match this host: {'; '.join(gone[:3])} ({what}; "
                "regenerate it with the tool that wrote it)"), False
    note = ": not nvhook's, left as it is" if refresh else ""
    return f"{path}: valid ({what}){note}", True


def _list(args: argparse.Namespace, config: HookConfig) -> int:
    from nvhook.cdi.check import device_names, read_spec

    for path in _targets(args, config):
        for name in device_names(read_spec(path)):
            print(name)
    return 0
