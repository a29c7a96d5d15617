"""nvmount: the mount engine (what libnvidia-container's `configure` does, fd-safe).

Callers use it through one door, `api` (the verbs discover, plan_only, configure_container,
configure_with_plan and the records). The stages are packages; their order is the data flow
(`pipeline.configure_container` only orders them, `effects.Run` holds the effectful half,
`requests` the records at the boundary):

    discover/   driver root, ld.so.cache, ELF, NVML (in a child), files, devices -> DriverInventory
    plan/       selection, requirements, plan_mounts (pure)                   -> MountPlan
    container/  open the target (pidfd, ns/mnt, owner, device cgroup), layout -> ContainerHandle
    apply/      clone sources, enter the mount ns, run the plan, journal       -> ApplyResult
    cgroup/     allow the plan's device rules (v1 file, v2 BPF)
    ldcache/    update the container's ld.so.cache (sandboxed host ldconfig)
    systemd/    the device rules registered with the container's systemd scope (DeviceAllow=)

Shared below all stages: `fs/` (in-root path operations on fds, the trusted procfs handle),
`_libc` and `_bpf` (the only ctypes besides `discover/_nvml`), `errors`, `fds`,
`privileges`, `faults`, `timing`, `capabilities`, `log`, `records`, `choices`, `bounds`,
`jsonio`, `cachefile`. Arrows only point down or forward: no stage imports a later one, a
record lives in the earliest stage that needs it, no module imports `nvhook`. Package
`__init__`s import nothing, so nothing pulls in ctypes until a stage needs it.
"""
