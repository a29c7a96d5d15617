"""Stage plan (pure): what a container gets. `selection.select_devices` (which GPUs and MIG
devices), `requirements` (NVIDIA_REQUIRE_* checked against the inventory), and
`mounts.plan_mounts` -> `types.MountPlan` (tmpfs, files, binds, symlinks, device rules),
with the procfs view (`procfs`) and device nodes (`devices`). No I/O.
"""
