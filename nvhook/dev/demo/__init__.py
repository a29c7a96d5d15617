"""`nvhook demo` and the runc rig the e2e tests and the benchmark share (tooling, off the
hook's path): `rootfs` (minimal images built from the host), `bundle` (OCI bundles and runc
runs), `driver` (real or simulated driver, the hook launcher), `cmd` (the command).
"""
