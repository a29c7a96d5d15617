"""The hooks of NVIDIA 1.20's CDI specs, done by nvhook in the container's root (the grammar
and dispatch: `nvhook.compat.cdihook.nvidia_cdi_hook`). Stage: apply.

    create-symlinks --link TARGET::LINK ...   links, replacing what is there (Root.symlink)
    update-ldcache --folder DIR ...           the cache written by nvhook (cdihook.ldcache),
                                              else the sandboxed host ldconfig on the
                                              container (nvmount.ldcache), compat dirs first
    enable-cuda-compat --host-driver-version  /etc/ld.so.conf.d/00-compat-*.conf when the
                                              image's compat libcuda should win (cudacompat)
    disable-device-node-modification          ModifyDeviceFiles: 0 in the params view (params)
    update-application-profile                EGLVisibleDGPUDevices for the container's GPUs
    apply-cuda-memory-limits --gpu-id UUID    NVML's per-cgroup CUDA memory limits (memlimits)
    chmod --mode M --path P ...               (deprecated) chmod inside the rootfs

Optional targets (the application profile, the compat conf file, params) that cannot be
written - a read-only /etc, a FIFO or a symlink loop where a directory should be - are a
warning and the container starts, where NVIDIA's hook fails it (update-application-profile
with a read-only /etc/nvidia: NVIDIA/nvidia-container-toolkit#2026).
"""

from __future__ import annotations

import os
import stat

from nvhook.errors import NvhookError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvhook.compat.cdihook.run import HookRun
    from nvhook.compat.cdihook.target import Target
    from nvhook.compat.urfave import Parsed
    from nvmount.api import CgroupTarget
    from nvmount.fs.procfs import ProcFs
    from nvmount.fs.rootfs import Root


class HookError(NvhookError):
    """A hook failed: the container must not start."""


def _optional(run: HookRun, what: str, err: Exception) -> None:
    """A warning naming `what` and why: the system's words where a system call failed (`what`
    names the path; a `Root` error's own path and rootfs would repeat it)."""
    if not isinstance(err, OSError) and isinstance(err.__cause__, OSError):
        err = err.__cause__
    why = (err.strerror or str(err)).lower() if isinstance(err, OSError) else str(err)
    run.log.warning(f"{what}: {why} (skipped: the container starts without it)")


# -- create-symlinks -------------------------------------------------------------------------
def create_symlinks(run: HookRun, p: Parsed) -> None:
    from nvmount.errors import NvmountError
    from nvmount.fs.paths import EntryKind

    links: list[tuple[str, str]] = []
    for spec in dict.fromkeys(p.strings("link")):
        parts = spec.split("::")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise HookError(f"invalid symlink specification {spec[:200]}")
        links.append((parts[0], parts[1]))
    if not links:
        return
    target = run.target(p)

    def act(root: Root, _: ProcFs) -> None:
        for text, link in links:
            try:
                made = any(c.kind is EntryKind.SYMLINK
                           for c in root.symlink(link, text, *target.owner, replace=True))
            except (OSError, NvmountError) as err:
                why = err.strerror if isinstance(err, OSError) else str(err)
                raise HookError(f"failed to create link [{text} {link}]: {why}") from err
            run.log.debug(f"{'created' if made else 'kept'} link {link} -> {text}")

    run.in_root(target, act)


# -- update-ldcache --------------------------------------------------------------------------
def update_ldcache(run: HookRun, p: Parsed) -> None:
    from nvmount.api import resolve_ldconfig

    folders = list(dict.fromkeys(p.strings("folder")))
    ldconfig = p.string("ldconfig-path")
    if not ldconfig:
        raise HookError("ldconfig-path must be specified")
    for folder in folders:
        if not folder.startswith("/") or "\n" in folder or "\0" in folder:
            raise HookError(f"--folder {folder[:200]!r}: not an absolute container path")
    path = resolve_ldconfig("@" + ldconfig.removeprefix("@"))
    target = run.target(p)
    config = run.config()
    if config.nvhook.ldcache == "write" and _write_ldcache(run, target, folders):
        return
    from nvhook.compat.cdihook.ldcache import compat_dirs

    compat = run.in_root(target, lambda root, procfs: compat_dirs(root, procfs))
    dirs = tuple(dict.fromkeys([*compat, *folders]))
    _run_ldconfig(run, target, dirs, path)


def _write_ldcache(run: HookRun, target: Target, folders: list[str]) -> bool:
    """The image's ld.so.cache written by nvhook (`nvhook.compat.cdihook.ldcache`); False
    when that falls back to ldconfig."""
    from nvhook.compat.cdihook.ldcache import write_cache
    from nvmount.api import Fallback
    from nvmount.errors import LdcacheError

    try:
        done = run.in_root(target, lambda root, procfs: write_cache(
            root, procfs, folders, target.owner,
            host_run=target.in_container and target.ns_rootfs != "/"))
    except Fallback as why:
        run.log.debug(f"ld.so.cache left to ldconfig: {why}")
        return False
    except LdcacheError as err:
        if run.config().nvhook.ldconfig_required:
            raise HookError(f"{err} (ldconfig-required = true)") from err
        _optional(run, "update the ld.so.cache", err)
        return True
    run.log.debug(f"ld.so.cache: {done}")
    return True


def _run_ldconfig(run: HookRun, target: Target, dirs: tuple[str, ...], path: str) -> None:
    """The sandboxed host ldconfig (nvmount.ldcache) on the container: in its cgroups (a hook
    inside the container is in them already, as its children are)."""
    from nvmount.api import process_cgroups, run_ldconfig
    from nvmount.errors import CgroupError

    cgroups: tuple[CgroupTarget, ...] = ()
    if not target.in_container:
        try:
            cgroups = process_cgroups(target.host_pid)
        except CgroupError as err:
            run.log.warning(f"ldconfig runs outside the container's cgroups: {err}")
    result = run_ldconfig(mntns_fd=target.mntns_fd, rootfs=target.ns_rootfs, dirs=dirs,
                          ldconfig_path=path, uid=target.owner[0], gid=target.owner[1],
                          libc=run.libc, cgroups=cgroups)
    for note in result.notes:
        run.log.warning(f"ldconfig: {note}")
    if not result.ok:
        if run.config().nvhook.ldconfig_required:
            raise HookError(f"{result.warning} (ldconfig-required = true)")
        _optional(run, "update the ld.so.cache", ValueError(result.warning))
    else:
        run.log.debug(f"ldconfig for {', '.join(dirs) or 'the configured dirs'}: ok")


# -- enable-cuda-compat ----------------------------------------------------------------------
def enable_cuda_compat(run: HookRun, p: Parsed) -> None:
    host_driver, host_cuda = p.string("host-driver-version"), p.string("host-cuda-version")
    if not host_driver and not host_cuda:
        return
    compat_root = p.string("cuda-compat-container-root")
    target = run.target(p)

    def act(root: Root, procfs: ProcFs) -> None:
        found = _compat_lib(run, root, procfs, compat_root, host_driver, host_cuda)
        if found is not None:
            _write_compat_conf(run, root, procfs, found, target.owner)

    run.in_root(target, act)


def _compat_lib(run: HookRun, root: Root, procfs: ProcFs, compat_root: str, host_driver: str,
                host_cuda: str) -> str | None:
    """The container directory of the compat libcuda to use, None to leave things alone."""
    from nvhook.compat.cdihook import files

    listed = files.list_dir(root, compat_root)
    if listed is None:
        run.log.debug("No CUDA forward compatibility libraries directory in container")
        return None
    from nvhook.compat.cdihook import cudacompat
    fd, names = listed
    try:
        libs = sorted(n for n in names if n.startswith("libcuda.so.") and "." in n[11:]
                      and stat.S_ISREG(getattr(files.stat_entry(fd, n), "st_mode", 0)))
        if len(libs) != 1:
            if libs:
                run.log.warning(f"Unexpected number of CUDA compat libraries in container: "
                                f"{libs[:8]}")
            return None
        lib = files.open_regular(fd, libs[0], procfs)
        if lib is None:
            return None
        try:
            note = cudacompat.read_note(lambda offset, size: os.pread(lib, size, offset))
        except (OSError, ValueError) as err:
            run.log.warning(f"failed to get ELF header from CUDA compat library: {err}")
            note = None
        finally:
            os.close(lib)
        use, why = cudacompat.use_compat(libs[0].removeprefix("libcuda.so."), note,
                                         host_driver, host_cuda)
        run.log.debug(f"CUDA compat library {libs[0]}: {'use' if use else 'skip'} ({why})")
        return root.real_path(fd) if use else None
    finally:
        os.close(fd)


def _write_compat_conf(run: HookRun, root: Root, procfs: ProcFs, directory: str,
                       owner: tuple[int, int]) -> None:
    from nvhook.compat.cdihook import files
    from nvhook.compat.cdihook.ldcache import COMPAT_PREFIX, COMPAT_SUFFIX, LDSO_CONF_D
    from nvmount.errors import NvmountError

    data = f"{directory}\n".encode()
    try:
        listed = files.list_dir(root, LDSO_CONF_D)
        if listed is not None:
            fd, names = listed
            try:
                for name in names:
                    if name.startswith(COMPAT_PREFIX) and name.endswith(COMPAT_SUFFIX) and \
                            files.read_small(fd, name, procfs) == data:
                        return  # a restarted container: written before
            finally:
                os.close(fd)
        name = f"{COMPAT_PREFIX}{os.urandom(16).hex()}{COMPAT_SUFFIX}"
        root.write_file(f"{LDSO_CONF_D}/{name}", data, 0o644, *owner, parents=0o755)
    except (OSError, NvmountError) as err:
        _optional(run, f"add {directory} to {LDSO_CONF_D}", err)


# -- disable-device-node-modification --------------------------------------------------------
def disable_device_node_modification(run: HookRun, p: Parsed) -> None:
    from nvhook.compat.cdihook import params
    from nvmount.errors import NvmountError

    config = run.config()
    proc_root = config.nvhook.proc_root or "/proc"
    data = params.read_host_file(proc_root, "params")
    new = params.modified(data) if data is not None else None
    if new is None:
        return
    target = run.target(p)

    def act(root: Root, procfs: ProcFs) -> None:
        if root.exists(params.PARAMS) or not config.nvhook.sim_procfs:
            params.bind_params(root, procfs, run.libc, new)
        else:
            params.sim_view(root, procfs, run.libc, proc_root, new)

    try:
        run.in_root(target, act, mounts=True)
    except (OSError, NvmountError) as err:
        _optional(run, f"show ModifyDeviceFiles: 0 in {params.PARAMS}", err)


# -- apply-cuda-memory-limits (NVIDIA's #1995/#2075, expected in 1.21) -----------------------
def apply_cuda_memory_limits(run: HookRun, p: Parsed) -> None:
    from nvhook.hook import memlimits

    uuids = p.strings("gpu-id")
    if any(not u.strip() for u in uuids):
        raise HookError("apply-cuda-memory-limits: gpu-id must not be empty")
    target = run.target(p)
    done = memlimits.apply(memlimits.env_of(target.config), target.host_pid,
                           p.string("driver-root"), uuids)
    if done:
        run.log.debug(done)


# -- update-application-profile --------------------------------------------------------------
def update_application_profile(run: HookRun, p: Parsed) -> None:
    target = run.target(p)
    run.in_root(target, lambda root, _: _app_profile(run, root, target.owner))


def _app_profile(run: HookRun, root: Root, owner: tuple[int, int]) -> None:
    from nvhook.compat.cdihook import files
    from nvmount.api import APP_PROFILE_FILE, app_profile_bytes, gpu_mask
    from nvmount.errors import NvmountError

    listed = files.list_dir(root, "/dev")
    if listed is None:
        return
    fd, names = listed
    minors = []
    try:
        for name in names:
            st = files.stat_entry(fd, name) if name.startswith("nvidia") and \
                name[6:].isdigit() else None
            if st is not None and stat.S_ISCHR(st.st_mode):
                minors.append(os.minor(st.st_rdev))
    finally:
        os.close(fd)
    mask, dropped = gpu_mask(sorted(minors))
    for minor in dropped:
        run.log.warning(f"dropping invalid minor number {minor}: must be in range [0, 63]")
    if not mask:
        return
    try:
        root.write_file(APP_PROFILE_FILE, app_profile_bytes(mask), 0o444, *owner,
                        replace=True, parents=0o555)
    except (OSError, NvmountError) as err:
        _optional(run, f"write the application profile {APP_PROFILE_FILE}", err)


# -- chmod (deprecated) ----------------------------------------------------------------------
def chmod(run: HookRun, p: Parsed) -> None:
    from nvmount.errors import PathError

    mode_text, paths = p.string("mode").strip(), p.strings("path")
    if not mode_text:
        raise HookError("a non-empty mode must be specified")
    try:
        mode = int(mode_text, 8)
    except ValueError as err:
        raise HookError(f"failed to parse mode as octal: {mode_text[:40]}") from err
    if mode > 0o7777 or any(not path.strip() for path in paths):
        raise HookError("paths must not be empty" if mode <= 0o7777 else
                        f"invalid file mode {mode_text[:40]}")
    if not paths:
        return

    def act(root: Root, procfs: ProcFs) -> None:
        for path in paths:
            try:
                fd = root.open_path(path, os.O_PATH)
            except PathError as err:
                run.log.debug(f"Skipping path {path}: {err}")
                continue
            try:
                if stat.S_IMODE(os.fstat(fd).st_mode) != mode:
                    os.chmod(f"thread-self/fd/{fd}", mode, dir_fd=procfs.fd)
            except PermissionError as err:
                run.log.debug(f"Ignoring permission error with chmod: {err}")
            finally:
                os.close(fd)

    run.in_root(run.target(p), act)
