"""nvhook: the OCI prestart hook that gives containers NVIDIA GPUs, and its tools.

Hook path (module names are the stages): cli -> commands -> prestart: config -> oci (state,
spec) -> request (device_lists, semver) -> engine (the bridge) -> nvmount. Support: flags,
isolation (process hygiene), logs, errors. Tools beside the engine, never imported by it or
by the hook path: sim/ (the simulated driver), demo/, install_cmd, driver_cmds (info, list).
Programs beside the hook: runtime/ (the runc wrapper nvhook-runtime), configure/ (`nvhook
runtime configure`), and compat/: NVIDIA's command surfaces, each a thin parser of NVIDIA's
grammar over nvhook's own commands and engine (nvcli: nvidia-container-cli; nvctk: nvidia-ctk;
cdihook: nvidia-cdi-hook and `nvidia-ctk hook`).
"""

__version__ = "0.1.0"
