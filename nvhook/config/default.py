"""The documented default `config.toml` (`nvhook config default`; the package's conffile).

Every active value is the built-in default (a test loads the text and compares it with an empty
file's configuration); keys whose default depends on the host or that are usually left out are
shown commented out, as `nvidia-ctk config default` does. Pure.
"""

from __future__ import annotations

_TEXT = '''\
# nvhook configuration (NVIDIA Container Toolkit's config.toml, read by nvhook's hook, runtime
# wrapper and nvidia-container-cli drop-in). Every active value is the built-in default (delete
# the line and nothing changes); commented lines are examples. Check an edited file with
# `nvhook config check`.

#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
#debug = "/var/log/nvidia-container-toolkit.log"
environment = []
#ldcache = "/etc/ld.so.cache"
# "@" names a host binary (".real" is preferred where it exists, as on Debian and Ubuntu)
ldconfig = "@/sbin/ldconfig"
load-kmods = true
#no-cgroups = false
#no-pivot = false
#path = "/usr/bin/nvidia-container-cli"
# the driver root; unset: a driver container's root (see [nvhook] driver-container-root), else /
#root = "/run/nvidia/driver"
#user = "root:video"

[nvidia-container-runtime]
#debug = "/var/log/nvidia-container-runtime.log"
log-level = "info"
mode = "auto"
runtimes = ["runc", "crun"]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
spec-dirs = ["/etc/cdi", "/var/run/cdi"]

[nvidia-container-runtime.modes.csv]
#compat-container-root = ""
mount-spec-path = "/etc/nvidia-container-runtime/host-files-for-container.d"

# NVIDIA 1.20's jit-cdi mode (read for compatibility; nvhook has no jit-cdi mode)
#[nvidia-container-runtime.modes.jit-cdi]
#nvcdi-disable-hooks = []
#nvcdi-feature-flags = []

[nvidia-container-runtime.modes.legacy]
cuda-compat-mode = "ldconfig"

[nvidia-container-runtime-hook]
path = "nvidia-container-runtime-hook"
skip-mode-detection = false

[nvidia-ctk]
path = "nvidia-ctk"

[features]
#allow-cuda-compat-libs-from-container = false
#allow-ldconfig-from-container = false
#allow-unknown-oci-spec-fields = false
#disable-cuda-compat-lib-hook = false
#disable-imex-channel-creation = false
#ignore-imex-channel-requests = false
#no-additional-gids-for-device-nodes = false

# nvhook's own settings (NVIDIA's tools ignore this table)
[nvhook]
# root-only caches of the parsed config and the driver inventory; "" turns them off
cache-dir = "/run/nvhook"
# the legacy hook sets NVML's CUDA memory limits on the container's cgroup v2 from
# NVIDIA_GPU_MEMORY_REQUEST(S)/LIMIT(S) in MiB, as nvidia-cdi-hook apply-cuda-memory-limits
# (NVML 13.4)
#cuda-memory-limits = false
# the driver root used when nvidia-container-cli.root is unset and a driver container (the GPU
# Operator's) has put a driver there; "" turns the detection off
driver-container-root = "/run/nvidia/driver"
# how the container's ld.so.cache is updated: "write" (nvhook writes it) or "ldconfig" (the
# host's ldconfig, sandboxed)
ldcache = "write"
#ldconfig-required = false
mps-pipe-directory = "/tmp/nvidia-mps"
# spec delivery: also narrow the container's /proc/driver/nvidia to its GPUs (a prestart hook
# does it: runc refuses mounts under /proc); false leaves it as NVIDIA's CDI modes do
narrow-procfs = false
# seconds the NVML helper may take to list the GPUs before it is killed; without persistence
# mode the driver initialises every GPU on that first open (seconds each: start
# nvidia-persistenced); a current inventory cache needs no NVML at all
nvml-timeout = 30
proc-root = "/proc"
# sysfs, where the DRM nodes (/dev/dri) of each GPU are found by PCI bus id
sys-root = "/sys"
# the runtime wrapper's delivery of a GPU container: "auto" follows
# nvidia-container-runtime.mode (auto and jit-cdi: "spec", the wrapper writes it all into the
# OCI spec and the rootfs before runc runs, no hook; legacy and csv: "legacy", the prestart
# hook does it); "legacy" or "spec" forces one
runtime-mode = "auto"
# append one line of phase timings per container start to this file
#timing-log = "/var/log/nvhook-timing.log"
'''


def default_text() -> str:
    """The default config.toml."""
    return _TEXT
