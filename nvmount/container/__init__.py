"""Stage container (reads only): the target container. `open.open_container` holds its init
with a pidfd, opens its mount namespace and finds its device cgroup; `layout` decides where
driver files land in its rootfs (libnvc-spec §2.2); `types` holds the records.
"""
