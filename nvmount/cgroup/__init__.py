"""Stage cgroup: the container's device cgroup. `find.find_cgroup` (which directory, read
only), `allow.allow_devices` -> `v1` (devices.allow/deny) or `bpf` (cgroup v2 device
programs, replaced atomically); `common` holds what both share.
"""
