"""Stage ldcache (last): the container's ld.so.cache. `ldconfig.run_ldconfig` runs the host
ldconfig from a sealed memfd in `sandbox` (fresh namespaces, no capabilities, `seccomp`
deny-list, rlimits, timeout); the rewrite of the image's cache is the one effect not undone.
"""
