"""Where the container is: its rootfs, from the OCI state first, `config.json` second (pure).

Runtimes say more in the state than the OCI runtime-spec asks for, and it is the better
source: crun names the rootfs it set up in `root` (with a user namespace, the intermediate
mount point `/var/tmp/intermediate-mountpoint-*`, and a bundle of "/": NVIDIA's #1971),
`runc state` and `crun state` name it in `rootfs`. Only where neither does is `root.path`
of the bundle's `config.json` used; a relative one is relative to the bundle (the runtime-spec
says so; runc and crun start hooks in the bundle, where NVIDIA resolves it against the
working directory: the same place). A person who pipes `runc state ID` into the hook from
another directory gets the bundle's rootfs and one line saying what was taken relative to
what, never a path under their own working directory.
"""

from __future__ import annotations

from nvhook.errors import SpecError
from nvhook.hook.oci import go_clean, go_join, resolve_bundle
from nvmount.bounds import shorten

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvhook.hook.oci import Spec, State


def no_bundle(bundle: str) -> bool:
    """Whether the state's bundle names no bundle directory: crun hands a container in a user
    namespace "/" (its hooks' working directory), where no `config.json` is the container's."""
    return go_clean(bundle) == "/" if bundle else False


def bundle_spec_path(state: State, cwd: str | None) -> str:
    """`<bundle>/config.json`; for a "/" bundle crun's own copy (`runtime_spec_path`), never
    `/config.json` (SpecError when there is none: what the state gave and what to do)."""
    if not no_bundle(state.bundle):
        return go_join(resolve_bundle(state.bundle, cwd), "config.json")
    import os

    path = runtime_spec_path(state, _host_uid(os.geteuid()))
    if path and os.path.isfile(path):
        return path
    where = f" (the state names the rootfs {state.root})" if state.root else ""
    raise SpecError(
        f"could not open OCI spec: the state's bundle is \"/\"{where}, not a bundle "
        f"directory, and crun's copy {path or '(no container id in the state)'} is missing "
        "(the runtime ran with another --root? run the hook from the runtime wrapper)")


CRUN_STATE_DIRS = ("/run/crun", "/run/user/{uid}/crun")  # crun's default --root: root, others
MAX_ID = 1024


def runtime_spec_path(state: State, euid: int) -> str:
    """crun's copy of the container's config.json in its state directory (default --root), for
    a state whose bundle is "/" (crun 1.28 gives createRuntime hooks its working directory,
    "/", when Podman runs it there: `--userns=auto` with a CDI device); "" when the state
    names no valid container id (pure)."""
    cid = state.id
    if not cid or len(cid) > MAX_ID or cid in (".", "..") or not all(
            c.isascii() and (c.isalnum() or c in "._-") for c in cid):
        return ""
    base = CRUN_STATE_DIRS[0] if euid == 0 else CRUN_STATE_DIRS[1].format(uid=euid)
    return f"{base}/{cid}/config.json"


def _host_uid(euid: int) -> int:
    """`euid` as the parent user namespace sees it: a rootless engine's hook is root in the
    engine's namespace and its crun keeps state under the user's /run/user/UID."""
    from nvmount.container.open import map_to_host, parse_id_map
    from nvmount.errors import NvmountError

    try:
        with open("/proc/self/uid_map", "rb") as stream:
            mapped = map_to_host(euid, parse_id_map(stream.read(65536).decode("ascii", "replace")))
    except (OSError, NvmountError):
        return euid
    return euid if mapped is None else mapped


def load_bundle_spec(state: State, cwd: str | None) -> Spec:
    """The container's config.json (`bundle_spec_path`), checked (`check_spec_root`)."""
    from nvhook.hook.oci import parse_spec, read_spec_file

    path = bundle_spec_path(state, cwd)
    spec = parse_spec(path, read_spec_file(path))
    check_spec_root(state, spec)
    return spec


def check_spec_root(state: State, spec: Spec) -> None:
    """A config.json found by the container's id must be that container's: its root.path is
    the rootfs the state names (SpecError otherwise)."""
    if no_bundle(state.bundle) and state.root and go_clean(spec.root_path) != go_clean(
            state.root):
        raise SpecError(f"could not open OCI spec: {spec.path} names the rootfs "
                        f"{shorten(repr(spec.root_path))}, the state {state.root}: not this "
                        "container's (run the hook from the runtime wrapper)")


def container_rootfs(state: State, spec: Spec | None, cwd: str | None) -> tuple[str, str]:
    """(absolute, lexically clean rootfs, a note for the log or ""): the state's `root` or
    `rootfs` when absolute; else `root.path`, a relative one joined to the bundle."""
    if state.root.startswith("/"):
        return go_clean(state.root), ""
    if spec is None:
        raise SpecError("resolve rootfs: the state names no rootfs and there is no config.json "
                        "(give the state's bundle)")
    path = spec.root_path
    if "\0" in path:
        raise SpecError(f"resolve rootfs {shorten(repr(path))} of {spec.path}: root.path "
                        "contains a NUL byte (expected a directory path)")
    if path.startswith("/"):
        return go_clean(path), ""
    bundle = spec.path[:-len("/config.json")] if spec.path.endswith("/config.json") else ""
    if not bundle.startswith("/"):
        bundle = resolve_bundle(state.bundle, cwd)
    rootfs = go_join(bundle, path)
    if cwd is None or go_clean(cwd) == bundle:
        return rootfs, ""
    return rootfs, (f"root.path {shorten(repr(path))} of {spec.path} is relative: taken "
                    f"relative to the bundle {bundle}, not to the working directory {cwd}")
