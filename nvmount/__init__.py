"""nvmount: the mount engine (what libnvidia-container's `configure` does, fd-safe).

Pipeline: driver (inventory of the host driver) -> selection/requirements -> plan (pure)
-> apply (mounts inside the container's mount namespace) -> ldcache -> cgroup.
Imports are lazy: nothing here pulls in ctypes until a stage needs it.
"""
