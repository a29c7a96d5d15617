"""CDI (Container Device Interface) for nvhook: `nvhook cdi generate|check|list|hook`.

Stage: commands, off the hook's path. The spec is a projection of the engine's own plan
(`spec`): the runtime's share of the plans for every GPU, MIG device and `all` become CDI
device nodes and mounts; what a runtime cannot do from a spec (symlinks, the ld.so.cache) is
done by hooks the spec names, which are nvhook's own (`hooks`: the same fd-safe engine).
`generate` builds and writes specs, `check` says whether a spec on disk is still true for this
host, `resolve` applies a spec's edits for the runtime wrapper, `yamlish` reads and writes the
YAML subset the specs use.
"""
