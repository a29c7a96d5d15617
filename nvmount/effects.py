"""The effectful half of `configure_container`: mounts, device cgroup, ldconfig, rollback.

Stage: orchestration (see `nvmount.pipeline`). `Run.execute` clones the plan's sources on the
host, enters the container's mount namespace to apply the plan, leaves, updates the device
cgroup and runs ldconfig; each phase with its stage's capabilities. On any failure it undoes
the cgroup changes and re-enters the namespace to roll the mount journal back.
"""

from __future__ import annotations

from nvmount.errors import LdcacheError, NvmountError
from nvmount.log import get_logger
from nvmount.requests import Effects

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount._libc import Libc
    from nvmount.apply.steps import ApplyResult
    from nvmount.cgroup.common import CgroupChange
    from nvmount.container.open import ContainerHandle
    from nvmount.faults import Faults
    from nvmount.fds import Cleanup
    from nvmount.fs.procfs import ProcFs
    from nvmount.fs.rootfs import Root
    from nvmount.ldcache.ldconfig import LdconfigResult
    from nvmount.plan.types import MountPlan
    from nvmount.requests import EngineOptions
    from nvmount.timing import PhaseTimer

log = get_logger(__name__)


class Run:
    """The effectful part of one `configure_container`, with its two journals."""

    def __init__(self, handle: ContainerHandle, plan: MountPlan, options: EngineOptions,
                 libc: Libc, faults: Faults, timer: PhaseTimer, stack: Cleanup) -> None:
        from nvmount.apply.journal import Journal


        self.handle, self.plan, self.options = handle, plan, options
        self.libc, self.faults, self.timer, self.stack = libc, faults, timer, stack
        self.mounts = Journal("container mounts")
        self.cgroup_changes: list[CgroupChange] = []
        self.root: Root | None = None  # the rootfs opened in the container's namespace
        self.warnings: list[str] = []

    def execute(self) -> Effects:
        from nvmount import privileges as P
        from nvmount.fs.procfs import ProcFs

        try:
            with P.stage(P.Stage.MOUNT):
                procfs = self.stack.enter_context(ProcFs.open(self.libc))
            with self.timer.phase("mounts"), P.stage(P.Stage.MOUNT):
                applied = self._mount(procfs)
            with self.timer.phase("cgroup"), P.stage(P.Stage.CGROUP):
                self._still_alive("after the mounts")
                cgroup = self._cgroup()
            with self.timer.phase("ldcache"), P.stage(P.Stage.LDCACHE):
                ldconfig, ldcache = self._ldcache(procfs)
                self._still_alive("after ldconfig" if ldconfig else "after the ld.so.cache")
        except BaseException as err:
            self._rollback(err)
            raise
        self.mounts.commit()
        for change in self.cgroup_changes:
            change.close()
        unit = self._systemd_unit()
        if unit is not None:
            with self.timer.phase("cgroup"), P.stage(P.Stage.CGROUP):
                self._systemd(unit)
        return Effects(applied, cgroup, ldconfig, tuple(self.warnings), ldcache)

    def _still_alive(self, when: str) -> None:
        """The container's init must outlive every phase: when it died (the runtime gives up
        on the container), undo everything instead of finishing on a dead container."""
        from nvmount.errors import ContainerError

        try:
            self.handle.check_alive()
        except ContainerError as err:
            raise ContainerError(f"{when}: {err}") from err

    def _mount(self, procfs: ProcFs) -> ApplyResult:
        from nvmount.apply.mounts import peer_groups
        from nvmount.apply.namespace import entered
        from nvmount.apply.steps import apply_plan, clone_sources, close_sources
        from nvmount.fs.rootfs import Root

        self.handle.check_alive()
        if self.options.sim_procfs:  # imported before setns: the container may be pivoted
            from nvmount.apply import simproc
        host_peers = peer_groups(procfs)  # before setns: the peer groups of the host
        sources = clone_sources(self.plan, self.libc, self.faults)
        try:
            with entered(self.handle.mntns_fd, self.libc):
                root = Root.open(self.handle.ns_rootfs, self.libc, procfs=procfs,
                                 require_proc_dir=True, ns_root=self.handle.ns_rootfs == "/")
                self.stack.callback(root.close)
                self.root = root
                root.check_proc_mounted()
                if self.options.sim_procfs:
                    simproc.mount_sim_proc_driver(root, self.mounts, self.libc, procfs,
                                                  faults=self.faults, host_peers=host_peers)
                applied = apply_plan(self.plan, root, sources, self.mounts, self.libc,
                                     procfs=procfs, owner=(self.handle.uid, self.handle.gid),
                                     faults=self.faults, host_peers=host_peers,
                                     optional=self.options.optional)
        finally:
            if not len(self.mounts):
                close_sources(sources)
        return applied

    def _cgroup(self) -> str:
        """Allow the plan's device rules. A fault point precedes each cgroup write: one per
        rule in v1, one for the atomic replacement in v2."""
        from nvmount.cgroup.allow import allow_devices
        from nvmount.cgroup.common import should_skip_cgroups

        skip = should_skip_cgroups(self.options.no_cgroups, self.handle.hook_in_userns)
        target = self.handle.cgroup
        if skip is not None or target is None or not self.plan.device_rules:
            why = skip or ("no device cgroup" if target is None else "no rules")
            log.info("device cgroup left alone: %s", why)
            return f"unchanged: {why}"
        change = allow_devices(target, self.plan.device_rules, self.libc,
                               lambda step: self._cgroup_point(step, target.path))
        self.cgroup_changes.append(change)
        return change.describe()

    def _systemd_unit(self) -> str | None:
        """The systemd scope whose DeviceAllow= should hold the plan's rules (runc's or
        crun's systemd driver), or None: a cgroupfs path, no rules, or cgroups left alone."""
        from nvmount.cgroup.common import should_skip_cgroups, systemd_scope

        target = self.handle.cgroup
        if target is None or not self.plan.device_rules or \
                should_skip_cgroups(self.options.no_cgroups, self.handle.in_userns):
            return None
        return systemd_scope(target.path)

    def _systemd(self, unit: str) -> None:
        """The rules also go to the unit, so that a daemon-reload keeps them: last, after
        every effect that can fail, and never fatal (a warning)."""
        from nvmount.systemd.register import register_quietly

        warning = register_quietly(unit, self.plan.device_rules)
        if warning is not None:
            self.warnings.append(warning)

    def _cgroup_point(self, step: str, path: str) -> None:
        try:
            self.faults(step)
        except OSError as err:
            from nvmount.errors import CgroupError

            raise CgroupError(f"{step} in {path}: {err.strerror}") from err

    def _ldcache(self, procfs: ProcFs) -> tuple[LdconfigResult | None, str]:
        """Update the container's ld.so.cache: written by the hook (`ldcache = "write"`, the
        default) unless that falls back, else by the sandboxed host ldconfig."""
        if not self.plan.ldconfig_dirs and not self.plan.ldcache_entries:
            return None, "unchanged: no library directories"
        if self.options.ldcache_mode == "write" and self.root is not None:
            from nvmount.ldcache.write import Fallback

            try:
                return None, self._write_ldcache(self.root, procfs)
            except Fallback as why:
                log.info("ld.so.cache left to ldconfig: %s", why)
        return self._ldconfig(), "ldconfig"

    def _write_ldcache(self, root: Root, procfs: ProcFs) -> str:
        from nvmount.apply.namespace import entered
        from nvmount.ldcache.write import update_ldcache

        try:
            self.faults("write ld.so.cache")
        except OSError as err:
            raise LdcacheError(f"write ld.so.cache: {err.strerror}") from err
        self._still_alive("before the ld.so.cache")
        try:
            with entered(self.handle.mntns_fd, self.libc):
                done = update_ldcache(root, procfs, self.plan,
                                      (self.handle.uid, self.handle.gid), self.mounts)
        except LdcacheError as err:
            if self.options.ldconfig_required:
                raise LdcacheError(f"{err} (ldconfig-required = true)") from err
            log.warning("%s (the container starts anyway: SONAME links are in place)", err)
            self.warnings.append(str(err))
            return f"failed: {err}"
        log.info("ld.so.cache: %s", done)
        return done

    def _ldconfig(self) -> LdconfigResult:
        from nvmount.container.cgroup import process_cgroups
        from nvmount.errors import CgroupError
        from nvmount.ldcache.ldconfig import LdconfigResult, run_ldconfig
        from nvmount.ldcache.setting import resolve_ldconfig

        path = resolve_ldconfig(self.options.ldconfig)
        try:
            self.faults("ldconfig")
        except OSError as err:
            raise LdcacheError(f"run ldconfig {path}: {err.strerror}") from err
        self._still_alive("before ldconfig")  # its cache rewrite is the one effect kept
        try:  # the sandbox runs in every cgroup of the container (memory, pids, cpu, devices)
            cgroups = process_cgroups(self.handle.pid, self.options.host_proc)
        except CgroupError as err:
            result = LdconfigResult(ran=False, ok=False, reason=str(err),
                                    warning=f"ldconfig not run: {err}")
        else:
            result = run_ldconfig(mntns_fd=self.handle.mntns_fd, rootfs=self.handle.ns_rootfs,
                                  dirs=self.plan.ldconfig_dirs, ldconfig_path=path,
                                  uid=self.handle.uid, gid=self.handle.gid,
                                  timeout=self.options.ldconfig_timeout, libc=self.libc,
                                  cgroups=cgroups)
        for note in result.notes:
            log.warning("ldconfig: %s", note)
        if not result.ok:
            if self.options.ldconfig_required:
                raise LdcacheError(f"{result.warning} (ldconfig-required = true)")
            log.warning("%s (the container starts anyway: SONAME links are in place)",
                        result.warning)
            self.warnings.append(result.warning)
        return result

    def _rollback(self, err: BaseException) -> None:
        from nvmount.apply.namespace import entered

        failures: list[str] = []
        while self.cgroup_changes:
            change = self.cgroup_changes.pop()
            try:
                change.undo()
            except NvmountError as undo_err:
                failures.append(str(undo_err))
        if len(self.mounts):
            try:
                with entered(self.handle.mntns_fd, self.libc):
                    failures += self.mounts.rollback()
            except NvmountError as ns_err:
                failures.append(f"re-enter the mount namespace to roll back: {ns_err}")
        if failures:
            log.error("rollback incomplete: %s", "; ".join(failures))
            if isinstance(err, NvmountError):
                from nvmount._compat import add_note

                add_note(err, "rollback incomplete: " + "; ".join(failures))
