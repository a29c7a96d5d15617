"""nvidia-cdi-hook and `nvidia-ctk hook`: the hooks NVIDIA's CDI specs (and 1.20's jit-cdi
runtime) name, in NVIDIA's grammar, done by nvhook fd-safe in the container's root.

    launcher   the launchers' POSIX sh front: noop and the hooks done by their group's first
               hook exit without Python; the rest runs the Python launcher (text only)
    cmd        the grammar: global flags, the hook table, errors as NVIDIA's tools print them
    batch      the first hook of a group does the group's work, and leaves a `record`
    record     that record: where, which container, its format (read by the sh front)
    target     which container, in which mount namespace (createContainer hooks run inside it)
    hooks      each hook (create-symlinks, update-ldcache, enable-cuda-compat,
               disable-device-node-modification, update-application-profile, chmod, noop)
    ldcache    update-ldcache's ld.so.cache writer: ldconfig's entries for what is mounted
    files      links and files in the rootfs (temporary name + rename, never following)
    params     the params view (a read-only file bind from a detached tmpfs)
    cudacompat the forward-compatibility decision (ELF note, versions; pure)
"""
