"""The runtime wrapper's `create` (and `run`): decide, then edit the bundle's config.json.

Stage: between runc's command line and runc. Reads config.json once; writes it at most once.

1. A cheap look at the raw bytes (`may_want_gpus`): a config.json that names none of
   NVIDIA_VISIBLE_DEVICES, CUDA_VERSION, the CDI annotation prefixes, the configured swarm
   variables (and, when volume-mount device lists are accepted, `nvidia-container-devices`)
   and has no `\\u` or `\\/` escape cannot be a GPU container: it is passed on untouched,
   nothing more is imported (the launcher makes this test itself, `Settings.needles`).
2. A request in CDI mode (CDI names in `cdi.k8s.io/` annotations, accepted volume mounts,
   or NVIDIA_VISIBLE_DEVICES of a container the policy lets ask: `nvhook.hook.request.cdi_request`):
   their edits from the CDI spec dirs (`nvhook.cdi.resolve`), and nothing else.
3. Otherwise the hook's own decision (`nvhook.hook.request.derive_request`, on the same bytes, with
   the whole config file; the mode is resolved here, `nvhook.runtime.modes`): no GPU request,
   nothing changes; its errors fail the create.
4. Spec delivery (`mode = "auto"`, the default, and `jit-cdi`): the wrapper plans the
   container and delivers the whole plan before runc runs (`nvhook.runtime.spec_delivery`): no hook
   process unless something is left for one. No driver found: legacy delivery, with a
   warning. Selection and requirement errors fail the create, as they would fail the hook.
5. Legacy delivery: our prestart hook (`edit.add_prestart_hook`; kept if NVIDIA's or ours is
   there) with an explicit env naming the config file the wrapper used, so the hook decides
   from the same file.
6. One atomic rewrite of config.json (`bundle.write_document`).

NVIDIA's wrapper adds its hook to every container; nvhook's only to GPU containers, so a
non-GPU container's config.json is byte-for-byte what the caller wrote.
"""

from __future__ import annotations

import os

from nvhook.errors import ConfigError, WrapperError
from nvhook.launch.runtime_log import RuntimeLog
from nvhook.launch.settings import Settings
from nvhook.runtime.bundle import BundleFile, decode_document, open_bundle, write_document

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from nvhook.config.model import HookConfig
    from nvhook.hook.request import ContainerRequest
    from nvmount.api import PhaseTimer

HOOK_FALLBACK = "/usr/bin/nvidia-container-runtime-hook"


def may_want_gpus(data: bytes, settings: Settings) -> bool:
    """False only when config.json cannot ask for GPUs (step 1 of the module docstring; the
    sh launcher makes the same test with `grep -F`)."""
    return any(n.encode("utf-8", "surrogateescape") in data for n in settings.needles())


def prepare_bundle(bundle_dir: str, settings: Settings, log: RuntimeLog,
                   environ: Mapping[str, str], own_dir: str | None) -> bool:
    """Edit `<bundle_dir>/config.json` for a GPU container; whether it was rewritten."""
    with open_bundle(bundle_dir) as bundle:
        if not may_want_gpus(bundle.data, settings):
            log.debug(f"{bundle.path}: no NVIDIA variable, not a GPU container: unchanged")
            return False
        doc = gpu_document(bundle, bundle_dir, settings, log, environ, own_dir)
        if doc is None:
            return False
        write_document(bundle, doc)
        log.info(f"{bundle.path}: rewritten for a GPU container")
        return True


def gpu_document(bundle: BundleFile, bundle_dir: str, settings: Settings, log: RuntimeLog,
                 environ: Mapping[str, str], own_dir: str | None) -> dict[str, Any] | None:
    """The edited document, or None when the container wants no GPU or nothing changes."""
    from nvhook.config.model import config_from_document
    from nvhook.hook.oci import parse_spec, resolve_rootfs
    from nvhook.runtime.modes import SPEC, delivery, describe
    from nvmount.api import PhaseTimer
    from nvmount.log import install

    install(log)  # the engine's records go to the wrapper's log files
    timer = PhaseTimer()
    with timer.phase("config"):  # the file the settings came from, validated whole
        try:
            config = config_from_document(settings.document, settings.path)
        except ConfigError as err:
            from nvhook.launch.settings import named_by

            raise ConfigError(f"error loading config: {err}{named_by(settings.origin)}") from err
    with timer.phase("spec"):
        spec = parse_spec(bundle.path, bundle.data)
        doc = decode_document(bundle)
        if cdi_edit(doc, spec, config, log):
            return doc
        request = _request(spec, config)
    if request is None:
        log.debug(f"{bundle.path}: not a GPU container: unchanged")
        return None
    chosen = delivery(config)
    log.info(f"GPU container: {describe(config, chosen)}")
    if chosen == SPEC:
        from nvhook.runtime.spec_delivery import deliver_spec

        left = deliver_spec(doc, request, bundle, resolve_rootfs(spec, bundle_dir), config, log,
                            timer)
        if left is not None:
            _spec_hooks(doc, left, config, own_dir, environ, log)
            _timing(config, timer, bundle_dir, hook=bool(left))
            return doc
    return doc if _add_hook(doc, config, own_dir, environ, log, "legacy") else None


def _add_hook(doc: dict[str, Any], config: HookConfig, own_dir: str | None,
              environ: Mapping[str, str], log: RuntimeLog, chosen: str) -> bool:
    """Our prestart hook, unless NVIDIA's or ours is there already; whether it was added."""
    from nvhook.runtime.edit import add_prestart_hook, existing_gpu_hook, hook_entry

    if existing_gpu_hook(doc) is not None:
        log.info(f"GPU container: kept the prestart hook {existing_gpu_hook(doc)}")
        return False
    path = find_hook(config.runtime_hook.path, own_dir, environ.get("PATH", ""))
    log.info(f"GPU container: added prestart hook {path}")
    return add_prestart_hook(doc, hook_entry(path, config.path, chosen))


def _spec_hooks(doc: dict[str, Any], left: tuple[str, ...], config: HookConfig,
                own_dir: str | None, environ: Mapping[str, str], log: RuntimeLog) -> None:
    """Spec delivery: no GPU hook of anyone's, but ours when something is left for it."""
    from nvhook.runtime.edit import remove_gpu_hooks

    removed = remove_gpu_hooks(doc)
    if removed:
        log.info(f"spec delivery: removed the prestart hook {', '.join(removed)}")
    if left:
        log.info(f"spec delivery: the prestart hook does the rest: {'; '.join(left)}")
        _add_hook(doc, config, own_dir, environ, log, "spec")


def _timing(config: HookConfig, timer: PhaseTimer, bundle_dir: str, *, hook: bool) -> None:
    """`[nvhook] timing-log`: the wrapper's own record of a spec delivery (`"wrapper": true`)."""
    if config.nvhook.timing_log:
        from nvmount.api import append_record

        try:  # noqa: SIM105 (contextlib: one more import on every GPU create)
            append_record(config.nvhook.timing_log, timer.record(
                container=os.path.basename(bundle_dir.rstrip("/")), wrapper=True, hook=hook))
        except OSError:
            pass


def cdi_edit(doc: dict[str, Any], spec: Any, config: HookConfig, log: RuntimeLog) -> bool:
    """CDI mode (hook-spec 3.4): apply the requested CDI devices' edits to `doc`; False (and
    `doc` unchanged) when the container's request is not in CDI mode. The request goes through
    the same policy as any other (`nvhook.hook.request.cdi_request`) before anything is resolved
    (`nvhook.cdi.resolve`)."""
    from nvhook.hook.request import cdi_request

    names = cdi_request(spec, doc.get("annotations"), config)
    if not names:
        return False
    from nvhook.cdi.resolve import apply_devices  # a CDI request only

    used = apply_devices(doc, names, config.runtime.modes_cdi_spec_dirs,
                         config.nvhook.cache_dir)
    log.info(f"CDI devices {', '.join(names)}: edits of {', '.join(used)} applied")
    return True


def _request(spec: Any, config: HookConfig) -> ContainerRequest | None:
    """The hook's decision without the hook's own mode check: the wrapper has resolved the
    mode (`nvhook.runtime.modes`) and the hook it adds is told so."""
    from nvhook.hook.request import derive_request
    from nvmount.records import replace

    return derive_request(spec, replace(config, runtime_hook=replace(
        config.runtime_hook, skip_mode_detection=True)))


def find_hook(configured: str, own_dir: str | None, path_env: str) -> str:
    """`nvidia-container-runtime-hook.path`: absolute as is; a name is looked up in the
    wrapper's own directory, then PATH and the default directories."""
    if configured.startswith("/"):
        return configured
    from nvhook.launch.lowlevel import search_dirs

    dirs = ([own_dir] if own_dir else []) + search_dirs(path_env)
    for directory in dirs:
        candidate = os.path.join(directory, configured)
        if directory.startswith("/") and os.access(candidate, os.X_OK) and \
                os.path.isfile(candidate):
            return candidate
    raise WrapperError(
        f"find the prestart hook {configured}: not in {own_dir or '-'} nor on PATH (install it "
        "with `nvhook install`, or set nvidia-container-runtime-hook.path)")
