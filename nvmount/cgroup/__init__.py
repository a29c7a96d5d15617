"""Stage cgroup: allow the plan's device rules in the container's device cgroup (found when
the container is opened: `nvmount.container.cgroup`). `allow.allow_devices` -> `v1`
(devices.allow/deny) or `bpf` (cgroup v2 device programs, replaced atomically); `common`
holds what both share.
"""
