"""nvhook: the OCI prestart hook that gives containers NVIDIA GPUs.

Pipeline (module names are the stages): cli -> oci (state, spec) -> config -> request
-> nvmount (driver inventory -> plan -> apply -> ldcache -> cgroup).
"""

__version__ = "0.1.0"
