"""`nvhook cdi`: generate, check, list, hook.

    nvhook cdi generate [--output PATH] [--format yaml|json]
                        [--device-name-strategy index|uuid|type-index] [--hook-path PATH]
    nvhook cdi check [--spec PATH] [--refresh] [--hook-path PATH]
    nvhook cdi list [--spec PATH]
    nvhook cdi hook create-symlinks|update-ldcache|procfs [ARGS]   (run by the OCI runtime)

`--config PATH` (global) names the config.toml whose driver root and capabilities are used.
Without `--spec`, check and list read every nvidia.com/gpu spec in the config's CDI spec dirs
(`nvidia-container-runtime.modes.cdi.spec-dirs`). check exits 1 when a spec is stale (after
`--refresh`: when one could not be rewritten).
"""

from __future__ import annotations

import argparse
import sys

from nvhook.errors import NvhookError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvhook.config.model import HookConfig
    from nvhook.flags import GlobalOptions


def _parser() -> argparse.ArgumentParser:
    from nvhook.cdi.generate import DEFAULT_HOOK
    from nvhook.cdi.spec import STRATEGIES

    parser = argparse.ArgumentParser(prog="nvhook cdi", description="CDI specs of this host")
    sub = parser.add_subparsers(dest="action", required=True)
    gen = sub.add_parser("generate", help="write the CDI spec of this host's GPUs")
    gen.add_argument("--output", metavar="PATH", help="file to write (default: stdout)")
    gen.add_argument("--format", choices=("yaml", "json"),
                     help="default: json for a .json output, else yaml")
    gen.add_argument("--device-name-strategy", choices=STRATEGIES, default="index",
                     help="index: `0`, `0:1` and the UUIDs; uuid: UUIDs only; type-index: "
                          "`gpu0`, `mig0:1`")
    gen.add_argument("--hook-path", default=DEFAULT_HOOK,
                     help=f"the nvhook launcher the spec's hooks run (default {DEFAULT_HOOK})")
    check = sub.add_parser("check", help="is a spec on disk still true for this host?")
    check.add_argument("--hook-path", help="the launcher its hooks run (default: the spec's)")
    check.add_argument("--spec", metavar="PATH", help="the spec (default: the spec dirs')")
    check.add_argument("--refresh", action="store_true", help="rewrite stale specs atomically")
    lst = sub.add_parser("list", help="the device names the specs provide")
    lst.add_argument("--spec", metavar="PATH", help="the spec (default: the spec dirs')")
    hook = sub.add_parser("hook", help="a hook of the spec (the runtime runs it)")
    hook.add_argument("name")
    hook.add_argument("args", nargs=argparse.REMAINDER)
    return parser


def main(argv: list[str], opts: GlobalOptions) -> int:
    if argv[:1] == ["hook"] and len(argv) > 1:  # hooks' own flags are not argparse's
        from nvhook.cdi.hooks import main_hook

        return main_hook(argv[1], argv[2:], opts)
    args = _parser().parse_args(argv)
    from nvhook.prestart import config_for

    config = config_for(opts)
    if args.action == "generate":
        return _generate(args, config)
    if args.action == "check":
        return _check(args, config)
    return _list(args, config)


def _generate(args: argparse.Namespace, config: HookConfig) -> int:
    from nvhook.cdi.generate import format_of, host_spec, render, write_atomically

    spec = host_spec(config, hook_path=args.hook_path, strategy=args.device_name_strategy)
    text = render(spec, format_of(args.output, args.format))
    if args.output:
        write_atomically(args.output, text)
        sys.stderr.write(f"nvhook cdi: wrote {args.output}: {len(spec['devices'])} devices, "
                         f"cdiVersion {spec['cdiVersion']}\n")
    else:
        sys.stdout.write(text)
    return 0


def _targets(args: argparse.Namespace, config: HookConfig) -> list[str]:
    from nvhook.cdi.check import spec_files

    if args.spec:
        return [args.spec]
    found = spec_files(config.runtime.modes_cdi_spec_dirs)
    if not found:
        raise NvhookError("cdi: no nvidia.com/gpu spec in "
                          f"{', '.join(config.runtime.modes_cdi_spec_dirs)} (generate one: "
                          "nvhook cdi generate --output /etc/cdi/nvidia.yaml)")
    return found


def _check(args: argparse.Namespace, config: HookConfig) -> int:
    from nvhook.cdi.check import differences, read_spec
    from nvhook.cdi.generate import DEFAULT_HOOK, format_of, host_spec, render, write_atomically

    stale = 0
    for path in _targets(args, config):
        old = read_spec(path)
        names = [d.get("name") for d in old["devices"]]
        strategy = "uuid" if names and all(str(n).startswith(("GPU-", "MIG-", "all"))
                                           for n in names) else "index"
        hooks = (old.get("containerEdits") or {}).get("hooks") or [{}]
        hook_path = args.hook_path or hooks[0].get("path") or DEFAULT_HOOK
        new = host_spec(config, hook_path=hook_path, strategy=strategy)
        why = differences(old, new)
        if not why:
            print(f"{path}: current")
            continue
        if args.refresh:
            write_atomically(path, render(new, format_of(path, None)))
            print(f"{path}: refreshed ({'; '.join(why)})")
        else:
            stale += 1
            print(f"{path}: stale: {'; '.join(why)} (fix: nvhook cdi check --refresh)")
    return 1 if stale else 0


def _list(args: argparse.Namespace, config: HookConfig) -> int:
    from nvhook.cdi.check import device_names, read_spec

    for path in _targets(args, config):
        for name in device_names(read_spec(path)):
            print(name)
    return 0
