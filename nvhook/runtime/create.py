"""The runtime wrapper's `create` (and `run`): decide, then edit the bundle's config.json.

Stage: between runc's command line and runc. Reads config.json once; writes it at most once.

1. A cheap look at the raw bytes (`may_want_gpus`): a config.json that names none of
   NVIDIA_VISIBLE_DEVICES, CUDA_VERSION, the CDI annotation prefixes, the configured swarm
   variables (and, when volume-mount device lists are accepted, `nvidia-container-devices`)
   and has no `\\u` or `\\/` escape cannot be a GPU container: it is passed on untouched,
   nothing more is imported (the launcher makes this test itself, `Settings.needles`).
2. CDI device names (in NVIDIA_VISIBLE_DEVICES, or `cdi.k8s.io/` annotations): their edits
   from the CDI spec dirs (`nvhook.cdi.resolve`), and nothing else.
3. Otherwise the hook's own decision (`nvhook.request.derive_request`, on the same bytes, with
   the whole config file): no GPU request, nothing changes; its errors fail the create.
4. A GPU container gets our prestart hook (`edit.add_prestart_hook`; kept if NVIDIA's or ours
   is there) with an explicit env naming the config file the wrapper used, so the hook
   decides from the same file.
5. With `[nvhook] runtime-mode = "spec"` the wrapper also plans the container (the engine's
   dry run, on the container's rootfs) and writes the runtime's share into the spec
   (`spec.spec_entries`); the hook applies the rest. No driver found: legacy delivery, with a
   warning. Selection and requirement errors fail the create, as they would fail the hook.
6. One atomic rewrite of config.json (`bundle.write_document`).

NVIDIA's wrapper adds its hook to every container; nvhook's only to GPU containers, so a
non-GPU container's config.json is byte-for-byte what the caller wrote.
"""

from __future__ import annotations

import os

from nvhook.errors import WrapperError
from nvhook.runtime.bundle import BundleFile, decode_document, open_bundle, write_document
from nvhook.runtime.log import RuntimeLog
from nvhook.runtime.settings import Settings

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from nvhook.config.model import HookConfig
    from nvhook.request import ContainerRequest
    from nvhook.runtime.spec import SpecEntries

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
    from nvhook.config.load import load_config
    from nvhook.oci import parse_spec, resolve_rootfs

    config = load_config(settings.path, environ)
    spec = parse_spec(bundle.path, bundle.data)
    cdi = cdi_document(bundle, spec, config, log)
    if cdi is not None:
        return cdi
    request = _request(spec, config)
    if request is None:
        log.debug(f"{bundle.path}: not a GPU container: unchanged")
        return None
    from nvhook.runtime.edit import add_prestart_hook, existing_gpu_hook, hook_entry

    doc = decode_document(bundle)
    changed = False
    if existing_gpu_hook(doc) is None:
        path = find_hook(config.runtime_hook.path, own_dir, environ.get("PATH", ""))
        changed = add_prestart_hook(doc, hook_entry(path, config.path))
        log.info(f"GPU container: added prestart hook {path}")
    else:
        log.info(f"GPU container: kept the prestart hook {existing_gpu_hook(doc)}")
    if config.nvhook.runtime_mode == "spec":
        entries = plan_entries(request, resolve_rootfs(spec, bundle_dir), config, log)
        changed = _add_entries(doc, entries, log) or changed
    return doc if changed else None


def cdi_document(bundle: BundleFile, spec: Any, config: HookConfig,
                 log: RuntimeLog) -> dict[str, Any] | None:
    """CDI mode (hook-spec 3.4): the document with the requested CDI devices' edits, or None
    when the container names no CDI device (`nvhook.cdi.resolve`)."""
    from nvhook.cdi.resolve import apply_devices, requested
    from nvhook.device_lists import is_qualified_cdi_name

    doc = decode_document(bundle)
    annotations = doc.get("annotations")
    names = requested(list(spec.env), annotations if isinstance(annotations, dict) else {},
                      config.runtime.modes_cdi_annotation_prefixes, is_qualified_cdi_name)
    if not names:
        return None
    used = apply_devices(doc, names, config.runtime.modes_cdi_spec_dirs)
    log.info(f"CDI devices {', '.join(names)}: edits of {', '.join(used)} applied")
    return doc


def _request(spec: Any, config: HookConfig) -> ContainerRequest | None:
    from nvhook.errors import RequestError
    from nvhook.request import MODE_ERROR, derive_request

    try:
        return derive_request(spec, config)
    except RequestError as err:
        if str(err) != MODE_ERROR:
            raise
        raise WrapperError(
            f"nvidia-container-runtime.mode = {config.runtime.mode!r}: the container names no "
            "CDI device (request them as nvidia.com/gpu=N in NVIDIA_VISIBLE_DEVICES or a "
            'cdi.k8s.io/ annotation, or set nvidia-container-runtime.mode = "legacy")') from err


def find_hook(configured: str, own_dir: str | None, path_env: str) -> str:
    """`nvidia-container-runtime-hook.path`: absolute as is; a name is looked up in the
    wrapper's own directory, then PATH and the default directories."""
    if configured.startswith("/"):
        return configured
    from nvhook.runtime.lowlevel import search_dirs

    dirs = ([own_dir] if own_dir else []) + search_dirs(path_env)
    for directory in dirs:
        candidate = os.path.join(directory, configured)
        if directory.startswith("/") and os.access(candidate, os.X_OK) and \
                os.path.isfile(candidate):
            return candidate
    raise WrapperError(
        f"find the prestart hook {configured}: not in {own_dir or '-'} nor on PATH (install it "
        "with `nvhook install`, or set nvidia-container-runtime-hook.path)")


def plan_entries(request: ContainerRequest, rootfs: str, config: HookConfig,
                 log: RuntimeLog) -> SpecEntries | None:
    """Spec mode: the runtime's share of the container's plan; None when no driver."""
    from nvhook.engine import engine_options, engine_request
    from nvhook.runtime.spec import device_nodes, spec_entries
    from nvmount import engine
    from nvmount._libc import Libc

    plan = engine.plan_only(engine_request(request), rootfs, engine_options(config), Libc())
    if plan is None:
        log.warning("spec mode: no NVIDIA driver found; the prestart hook delivers everything")
        return None
    modes: dict[str, int] = {}
    for node in device_nodes(plan):
        try:
            modes[node.source] = os.stat(node.source).st_mode
        except OSError as err:
            raise WrapperError(f"spec mode: stat device node {node.source}: "
                               f"{err.strerror}") from err
    return spec_entries(plan, modes)


def _add_entries(doc: dict[str, Any], entries: SpecEntries | None, log: RuntimeLog) -> bool:
    from nvhook.runtime.edit import add_devices, add_mounts

    if entries is None:
        return False
    nodes, rules = add_devices(doc, entries.devices, entries.rules)
    mounts = add_mounts(doc, entries.mounts)
    log.info(f"spec mode: added {mounts} mounts, {nodes} device nodes and {rules} device rules "
             "to the spec")
    return bool(nodes or rules or mounts)
