"""The fd-safe layer under the stages: `root.RootDir` (an opened rootfs and openat2
RESOLVE_IN_ROOT lookups), `rootfs.Root` (creation and rollback of exactly what was created),
`walk.Walker` (the creating walk), `paths` (pure helpers), `procfs.ProcFs` (a verified
procfs handle for readlink checks); on the host side, `trusted` (the rules for every host path
that config or a user can name and root opens, reads or writes).
"""
