"""Stage apply: run a plan inside the container's mount namespace. `steps.apply_plan` (with
`clone_sources` on the host side first), `mounts` (the new mount API on fds), `namespace`
(enter and always come back), `journal` (every effect with its undo, rolled back in reverse).
"""
