"""The hook commands: `prestart` runs the pipeline, `poststart`/`poststop` are no-ops.

Pipeline (hook-spec 1.2; the order decides which error wins): config -> state (stdin) -> spec
-> request -> engine. Errors in the config, the state, the spec's shape, `process.env` or
`process.capabilities` fail every container; a container that wants no GPU then exits 0
silently. `--dry-run` prints the decision as one JSON object and changes nothing:

    {"gpu_container": true, "request": {...} | null,
     "container": {"pid": 4242, "bundle": "/abs/bundle", "rootfs": "/abs/bundle/rootfs"},
     "plan": {...}}            # only when the engine found a driver

Reads: the config file, stdin, `<bundle>/config.json`; everything else is the engine's.
"""

from __future__ import annotations

import os
import sys

from nvmount.log import DEBUG, get_logger

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvhook.config.model import HookConfig
    from nvhook.flags import GlobalOptions
    from nvhook.hook.oci import Spec, State
    from nvhook.hook.request import ContainerRef, ContainerRequest

_PRESTART_FLAGS = {"dry-run": False}


def main(argv: list[str], opts: GlobalOptions) -> int:
    """`argv[0]` is the command (prestart, poststart or poststop), then its arguments."""
    command, args = argv[0], argv[1:]
    if command != "prestart":
        return 0  # poststart, poststop: succeed without reading stdin, whatever the arguments
    from nvhook.flags import take_flags

    values, extra = take_flags(args, _PRESTART_FLAGS, leading=False, strict=True)
    if extra:
        get_logger(__name__).debug("ignoring extra arguments %s", extra)
    return run_prestart(opts, dry_run=bool(values.get("dry-run")))


def run_prestart(opts: GlobalOptions, *, dry_run: bool, stdin_fd: int = 0) -> int:
    """The prestart pipeline; in dry-run, print the decision (and the engine's plan)."""
    from nvhook.config.load import load_config
    from nvhook.hook.locate import load_bundle_spec
    from nvhook.hook.oci import load_state
    from nvhook.hook.request import derive_request
    from nvmount.api import PhaseTimer

    timer = PhaseTimer()
    with timer.phase("config"):
        config = load_config(opts.config_path, os.environ, cwd=opts.cwd)
    if config.cli.debug and not dry_run:
        from nvhook.logs import attach_log_file

        attach_log_file(config.cli.debug)
    if config.unknown_keys and (opts.debug or config.cli.debug):
        _warn_unknown_keys(config)
    delivery = os.environ.get("NVHOOK_RUNTIME_DELIVERY")  # nvhook.runtime.modes.DELIVERY_ENV
    with timer.phase("spec"):
        state = load_state(opts.stdin if opts.stdin is not None else stdin_fd)
        spec = load_bundle_spec(state, opts.cwd)
        request = derive_request(spec, _wrapper_resolved(config, delivery))
    if request is None:
        _log_not_gpu(state)
        if dry_run:
            _print_decision(None, container_ref(state, spec, opts.cwd), None)
        return 0
    ref = container_ref(state, spec, opts.cwd)
    _log_request(request, ref)
    from nvhook.hook.mount import run_engine

    delivered = None
    if config.nvhook.runtime_mode != "legacy":  # the runtime wrapper may have delivered part
        from nvhook.hook.spec_mode import delivered_by_spec

        delivered = delivered_by_spec(spec)
    plan = run_engine(request, ref, config, dry_run=dry_run, debug=opts.debug, timer=timer,
                      delivered=delivered, env=spec.env)
    if dry_run:
        _print_decision(request, ref, plan)
    return 0


def _wrapper_resolved(config: HookConfig, delivery: str | None) -> HookConfig:
    """The hook the runtime wrapper added (its entry's env names the delivery it chose) skips
    NVIDIA's mode check: the wrapper resolved the mode (`nvhook.runtime.modes`); with
    `mode = "jit-cdi"` the check would refuse the rest of a spec delivery. Any other hook
    (Docker's `--gpus`) keeps it."""
    if delivery not in ("legacy", "spec") or config.runtime_hook.skip_mode_detection:
        return config
    from nvmount.records import replace

    return replace(config, runtime_hook=replace(config.runtime_hook, skip_mode_detection=True))


def container_ref(state: State, spec: Spec, cwd: str | None) -> ContainerRef:
    """pid, absolute bundle and rootfs (the state's, else root.path against the bundle:
    `nvhook.hook.locate`)."""
    from nvhook.hook.locate import container_rootfs
    from nvhook.hook.oci import resolve_bundle
    from nvhook.hook.request import ContainerRef

    rootfs, note = container_rootfs(state, spec, cwd)
    if note:
        get_logger(__name__).warning("%s", note)
    return ContainerRef(pid=state.pid, bundle=resolve_bundle(state.bundle, cwd), rootfs=rootfs)


def _warn_unknown_keys(config: HookConfig) -> None:
    get_logger(__name__).warning(
        "config %s: unknown keys ignored: %s (see `nvhook config check`)", config.path,
        ", ".join(config.unknown_keys))


def _log_not_gpu(state: State) -> None:
    get_logger(__name__).debug(
        "container pid %d bundle %s: not a GPU container", state.pid, state.bundle
    )


def _log_request(request: ContainerRequest, ref: ContainerRef) -> None:
    log = get_logger(__name__)
    if log.isEnabledFor(DEBUG):
        log.debug("GPU container pid %d rootfs %s: %s", ref.pid, ref.rootfs, request.to_json())


def decision_json(
    request: ContainerRequest | None, ref: ContainerRef, plan: dict[str, object] | None
) -> dict[str, object]:
    """The dry-run document (docs/hook.md)."""
    document: dict[str, object] = {
        "gpu_container": request is not None,
        "request": None if request is None else request.to_json(),
        "container": ref.to_json(),
    }
    if plan is not None:
        document["plan"] = plan
    return document


def _print_decision(
    request: ContainerRequest | None, ref: ContainerRef, plan: dict[str, object] | None
) -> None:
    import json

    sys.stdout.write(json.dumps(decision_json(request, ref, plan), indent=2) + "\n")
    sys.stdout.flush()


def config_for(opts: GlobalOptions) -> HookConfig:
    """The configuration the hook would use with these options (for other commands)."""
    from nvhook.config.load import load_config

    return load_config(opts.config_path, os.environ, cwd=opts.cwd)
