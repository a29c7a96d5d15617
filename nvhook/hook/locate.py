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
    """`<bundle>/config.json`, never relative to a "/" bundle (SpecError then: what the
    state gave and what to do)."""
    if no_bundle(state.bundle):
        where = f" (the state names the rootfs {state.root})" if state.root else ""
        raise SpecError(
            f"could not open OCI spec: the state's bundle is \"/\"{where}, not a bundle "
            "directory: its config.json is not the container's (crun does this for a "
            "container in a user namespace; use a crun that names the bundle, or the hook "
            "through the runtime wrapper)")
    return go_join(resolve_bundle(state.bundle, cwd), "config.json")


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
