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
    """`<bundle>/config.json`; for a "/" bundle the runtime's (`runtime_spec_candidates`),
    never `/config.json` (SpecError when none is found: what the state gave, what to do)."""
    if not no_bundle(state.bundle):
        return go_join(resolve_bundle(state.bundle, cwd), "config.json")
    import os

    tried = runtime_spec_candidates(state, _runtime_argvs(), _host_uid(os.geteuid()))
    for path in tried:
        if os.path.isfile(path):
            return path
    where = f" (the state names the rootfs {state.root})" if state.root else ""
    raise SpecError(
        f"could not open OCI spec: the state's bundle is \"/\"{where}, not a bundle "
        f"directory, and the runtime's config.json is not at {', '.join(tried) or '-'} "
        "(run the hook from the runtime wrapper, or with a runtime that names the bundle)")


CRUN_STATE_DIRS = ("/run/crun", "/run/user/{uid}/crun")  # crun's default --root: root, others
MAX_ID = 1024
MAX_ANCESTORS = 4  # the runtime is the hook's parent, or a launcher's


def runtime_spec_candidates(state: State, argvs: list[list[str]], euid: int) -> list[str]:
    """Where the container's config.json is when the state's bundle is "/" (crun 1.28 gives
    createRuntime hooks its working directory, "/", when Podman runs it with --userns=auto or
    rootless --userns=nomap and a CDI device): the `--bundle` of the runtime among the hook's
    ancestors (`argvs`, nearest first), crun's copy in its state dir (`--root`, else its
    default for `euid`, the hook's uid in the initial namespace) by the state's container id;
    each used only if its root.path is the state's rootfs (`check_spec_root`). Pure."""
    cid = state.id
    valid = bool(cid) and len(cid) <= MAX_ID and cid not in (".", "..") and all(
        c.isascii() and (c.isalnum() or c in "._-") for c in cid)
    out: list[str] = []
    for argv in argvs:
        if "create" not in argv and "run" not in argv:
            continue  # not a runtime's create (the launcher's front, a shell)
        bundle, root = _flag(argv, "--bundle", "-b"), _flag(argv, "--root")
        if bundle.startswith("/"):
            out.append(go_join(bundle, "config.json"))
        if root.startswith("/") and valid:
            out.append(go_join(root, cid, "config.json"))
        break
    if valid:
        base = CRUN_STATE_DIRS[0] if euid == 0 else CRUN_STATE_DIRS[1].format(uid=euid)
        out.append(f"{base}/{cid}/config.json")
    return list(dict.fromkeys(out))


def _flag(argv: list[str], *names: str) -> str:
    """The value of the last of `names` in `argv` (`--name value` or `--name=value`)."""
    value = ""
    for i, word in enumerate(argv):
        for name in names:
            if word == name and i + 1 < len(argv):
                value = argv[i + 1]
            elif word.startswith(name + "="):
                value = word[len(name) + 1:]
    return value


def _runtime_argvs() -> list[list[str]]:
    """The command lines of the hook's nearest ancestors (bounded reads of /proc)."""
    import os

    argvs: list[list[str]] = []
    pid = os.getppid()
    for _ in range(MAX_ANCESTORS):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as stream:
                argvs.append([w.decode("utf-8", "replace")
                              for w in stream.read(65536).split(b"\0")[:-1]])
            with open(f"/proc/{pid}/stat", "rb") as stream:
                pid = int(stream.read(4096).rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        if pid <= 1:
            break
    return argvs


def _host_uid(euid: int) -> int:
    """`euid` as the parent user namespace sees it: a rootless engine's hook is root in the
    engine's namespace and its crun keeps state under the user's /run/user/UID."""
    from nvmount.api import map_to_host, parse_id_map
    from nvmount.errors import NvmountError

    try:
        with open("/proc/self/uid_map", "rb") as stream:
            mapped = map_to_host(euid, parse_id_map(stream.read(65536).decode("ascii", "replace")))
    except (OSError, NvmountError):
        return euid
    return euid if mapped is None else mapped


def load_bundle_spec(state: State, cwd: str | None) -> Spec:
    """The container's config.json: the bundle's; for a "/" bundle the first of the runtime's
    (`runtime_spec_candidates`) whose root.path is the state's rootfs (`check_spec_root`)."""
    import os

    from nvhook.hook.oci import parse_spec, read_spec_file

    if not no_bundle(state.bundle):
        path = bundle_spec_path(state, cwd)
        return parse_spec(path, read_spec_file(path))
    tried = runtime_spec_candidates(state, _runtime_argvs(), _host_uid(os.geteuid()))
    why = ""
    for path in (p for p in tried if os.path.isfile(p)):
        spec = parse_spec(path, read_spec_file(path))
        try:
            check_spec_root(state, spec)
        except SpecError as err:
            why = f": {err}"
            continue
        return spec
    raise _none_of(state, tried, why)


def _none_of(state: State, tried: list[str], why: str) -> SpecError:
    where = f" (the state names the rootfs {state.root})" if state.root else ""
    return SpecError(
        f"could not open OCI spec: the state's bundle is \"/\"{where}, not a bundle "
        f"directory, and no config.json of the runtime's is this container's (tried "
        f"{', '.join(tried) or 'none: no container id'}){why} (run the hook from the runtime "
        "wrapper, or with a runtime that names the bundle)")


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
