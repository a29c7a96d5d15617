"""Stage container (reads only): the target container. `open.open_container` holds its init
with a pidfd and opens its mount namespace; `cgroup` finds its device cgroup (read only);
`layout` decides where driver files land in its rootfs (libnvc-spec §2.2, its record
`ContainerLayout` is the plan's input: `nvmount.plan.types`).
"""
