"""Stage discover: the host driver's inventory (libnvc-spec §1, §5, §7). Reads, never writes.

`driver.discover_driver` -> `inventory.DriverInventory`, from `driver_root` (confined
lookups in the driver root), `ldcache` (ld.so.cache parser), `elf` (library selector),
`_nvml` + `nvml_worker` (NVML in a short-lived unprivileged child), `files` (libraries,
binaries, firmware, IPC) and `devices` (control nodes, GPU nodes, MIG, IMEX); `procfiles`
reads the /proc/driver/nvidia files the procfs view copies.
"""
