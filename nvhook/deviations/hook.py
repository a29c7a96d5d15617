"""Deviations of the hook, the engine, CDI and driver coverage from NVIDIA's (docs/hook.md lists
them; `nvhook.deviations` joins them with the tools' ones)."""

from __future__ import annotations

HOOK: tuple[tuple[str, str, str], ...] = (
    (
        "Repeated device ids",
        "`0,0` or `0,1,0` (in NVIDIA_VISIBLE_DEVICES, swarm variables, volume-mount lists, "
        "NVIDIA_IMEX_CHANNELS, MIG lists) are de-duplicated, keeping the first occurrence",
        "NVIDIA's index map leaves an empty slot (`--device=,0`): an accident, not a contract",
    ),
    (
        "Requirement order",
        "NVIDIA_REQUIRE_* values are ordered by variable name, the legacy `cuda>=X.Y` last",
        "NVIDIA iterates a Go map (random order); a stable order makes runs reproducible",
    ),
    (
        "Config file lookup",
        "`--config` > NVIDIA_CTK_CONFIG_FILE_PATH > `$XDG_CONFIG_HOME/nvidia-container-runtime/"
        "config.toml` (if it exists) > `/etc/nvidia-container-runtime/config.toml`; "
        "`/run/nvidia/driver/etc/...` is not consulted",
        "the toolkit's current (v1.18+) order; falling through a missing XDG file to /etc keeps "
        "a root shell with XDG_CONFIG_HOME from silently ignoring the system config",
    ),
    (
        "Config files named by the environment",
        "NVIDIA_CTK_CONFIG_FILE_PATH must be absolute and name a trusted file (a regular file "
        "owned by root or the hook's user, writable by no one else, in directories no one else "
        "can write to, and for a root hook not inside its starting directory, the bundle), else "
        "the hook fails naming the variable; a relative or untrusted `$XDG_CONFIG_HOME` file is "
        "skipped with a warning",
        "older runtimes and wrappers hand the hook the container's environment: NVIDIA resolves "
        "a relative path against the bundle, so the image supplied the whole config (and with "
        "it a host log file to write)",
    ),
    (
        "Host paths root uses",
        "the cache dir, debug and timing logs, CDI spec dirs and files, CSV mount specs, `cdi "
        "generate --output`, `config default --output`, the configs `runtime configure` edits and "
        "the launchers `install` writes must be trusted: every directory root's and writable by no "
        "one else (or sticky), walked with O_NOFOLLOW (root's own symlinks followed), files "
        "regular and opened O_NONBLOCK, logs also single-linked, modes set with fchmod without "
        "setuid/setgid bits; else a one-line error naming the component, or for logs, caches and "
        "CDI specs a warning (the spec ignored, nothing written); `install` refuses code (nvhook, "
        "its dependencies, the interpreter) a user could change",
        "NVIDIA opens these as named (a symlink planted in a group-writable log directory made "
        "root append to a file of the user's choosing, a FIFO there blocked every start; a user's "
        "CDI spec could redefine `nvidia.com/gpu=0` with a read-write host mount; root ran a "
        "user's checkout), and the CDI library reads any spec file in its directories",
    ),
    (
        "Nothing from the hook's environment",
        "the MPS pipe directory is `[nvhook] mps-pipe-directory` (default /tmp/nvidia-mps), not "
        "CUDA_MPS_PIPE_DIRECTORY; binaries are searched in a fixed PATH "
        "(`/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`), not $PATH",
        "an image could otherwise choose a host directory to be bound into the container "
        "(CUDA_MPS_PIPE_DIRECTORY=/etc with driver root /)",
    ),
    (
        "IPC mounts read-only",
        "the persistenced and fabricmanager sockets and the MPS pipe directory are bound "
        "`ro,nosuid,nodev,noexec` (NVIDIA: read-write); connect() and writing to a FIFO work on "
        "a read-only mount, creating or removing entries in the host directory does not",
        "NVIDIA documents no need for the container to write into these host directories",
    ),
    (
        "Input budgets",
        "at most 32 NVIDIA_REQUIRE_* variables, 8192 characters and 512 conditions each, 2048 "
        "conditions in all, version numbers of at most 10 digits per component; device ids of "
        "at most 256 characters, indexes and IMEX channels of at most 10 digits; each is an "
        "error naming the variable",
        "NVIDIA has no bounds: 32 long requirement variables cost a root process seconds per "
        "start, and a 5000-digit number crashed the parser",
    ),
    (
        "ldconfig's input and output",
        "ldconfig reads a configuration nvhook writes (the image's ld.so.conf and includes, "
        "parsed by nvhook: regular files only, each file once, bounded), runs on a nodev view "
        "inside the container's cgroups and writes to sandbox tmpfs mounts; the cache is "
        "installed into /etc by rename; ldconfig is not run when a library directory holds a "
        "symlink to a FIFO",
        "glibc's ldconfig opens its temp files without O_EXCL, reads any include and blocks on "
        "FIFOs: an image's device node got written, /dev/zero grew it to 1 GiB, an include "
        "cycle spun until the 10 s limit",
    ),
    (
        "Stricter config values",
        "unknown `nvidia-container-runtime.mode` or `modes.legacy.cuda-compat-mode` values, and "
        "relative `[nvhook]` paths, fail at load with the key, the value and the allowed set",
        "NVIDIA maps an unknown cuda-compat-mode silently to `disabled` and reports an unknown "
        "mode only as the misleading 'invoking the hook directly' error",
    ),
    (
        "Mode detection",
        "`mode = auto` resolves, as NVIDIA 1.20's hook does, from the devices in effect after "
        "the request's policy (accepted volume mounts, `cdi/` ones included, else the "
        "variables a privileged or accepted container sets): `cdi` when they are all fully "
        "qualified CDI names, `csv` (a driver root with /etc/nv_tegra_release) or else "
        "`legacy`; no dlopen of NVML or dxcore to probe; `csv` is handled by the hook's own "
        "engine; a WSL2 root (/dev/dxg) is legacy with the WSL backend",
        "probing loads libraries into a root process and costs time; NVML and WSL hosts "
        "resolve to legacy in NVIDIA too",
    ),
    (
        "Invalid supported-driver-capabilities",
        "an unknown capability in `supported-driver-capabilities` fails with 1.17.8's one-line "
        "error naming the key, the value and the allowed set",
        "NVIDIA 1.20 exits 1 with no message at all (a reflection panic is swallowed): the "
        "container fails and nobody can tell why",
    ),
    (
        "Error texts",
        "NVIDIA's text is kept as the start of each message, followed by the subject (file, "
        "key) and a hint in parentheses; JSON and TOML decoder details are Python's; every "
        "error is one line (the ldconfig error's newline becomes ': ')",
        "the user must see which file or key is wrong and what to do; Go's decoder texts "
        "cannot be reproduced faithfully",
    ),
    (
        "Tracebacks",
        "`--debug` prints a Python traceback before the error line; NVIDIA prints a Go stack",
        "different language",
    ),
    (
        "Hostile state and spec",
        "a pid that is negative, not an integer or above 2^31-1 is refused; a state or spec "
        "larger than 4 MiB is refused; `config.json` must be a regular file; duplicate JSON "
        "keys: the last one wins as a whole",
        "NVIDIA wraps a negative pid to uint64, reads unbounded input, blocks on a FIFO, and "
        "Go merges duplicate objects field by field (an accident of its decoder)",
    ),
    (
        "Command line",
        "flags are accepted after the command too; an unknown flag after `prestart` is a usage "
        "error (exit 2); an unknown command says so before the usage; extra commands (info, "
        "list, sim, demo, install) and `--dry-run`",
        "NVIDIA ignores everything after the command, so a mistyped `--dryrun` would run for "
        "real; poststart/poststop still ignore their arguments",
    ),
    (
        "Version output",
        "`--version` prints `nvhook version <v> (NVIDIA Container Runtime Hook v1.17.8 "
        "compatible)`",
        "it is not NVIDIA's binary",
    ),
    (
        "Log verbosity",
        "the mode lines (`Auto-detected mode as 'legacy'`) are info: on stderr with `--debug`, "
        "always in the `nvidia-container-cli.debug` file; the 'Ignoring devices' line is a "
        "warning and always shown",
        "an error stays one line on stderr instead of following routine lines",
    ),
    (
        "No nvidia-container-cli",
        "the decision goes to the in-process engine (nvmount) instead of an execve of "
        "nvidia-container-cli: hook-spec 1.15-1.17 (CLI lookup, argv, environment) do not apply; "
        "`nvidia-container-cli.path` and `.environment` are read and type-checked but unused",
        "nvhook replaces the CLI",
    ),
    (
        "MIG device lists",
        "NVIDIA_MIG_CONFIG_DEVICES / NVIDIA_MIG_MONITOR_DEVICES are split into ids (trimmed, "
        "empties dropped) in the request; the privilege rule still applies to the raw value",
        "the engine needs ids; NVIDIA hands the raw string to nvidia-container-cli, which "
        "splits it",
    ),
    (
        "Graphics: no non-GLVND GL libraries",
        "with GLVND (the default) the driver's libGL, libEGL, libGLESv1_CM and "
        "libGLESv2.so.<version> are not mounted; the GLVND libraries, ICD and vendor files "
        "are",
        "NVIDIA's CDI spec mounts them next to the GLVND ones: ldconfig (its update-ldcache "
        "hook, or any later run in the container) then points libGL.so.1 at NVIDIA's legacy "
        "libGL and the image's GLVND dispatcher is replaced; libnvc mounts them only with "
        "no-glvnd, as nvhook does",
    ),
    (
        "Graphics: the allocator",
        "libnvidia-allocator (a compute library in libnvc's lists) is also mounted for "
        "graphics and display, with the gbm/nvidia-drm_gbm.so link to it",
        "GBM loads it through that link; NVIDIA's current toolkit gives it to graphics too",
    ),
    (
        "CDI: one self-contained hook",
        "a generated spec has one `createRuntime` hook, `nvhook cdi hook apply`, whose "
        "arguments carry every input (driver root, links, library folders, ld.so.cache "
        "entries, the devices' nodes, proc entries and links): no config, NVML or discovery "
        "at container start; it narrows /proc/driver/nvidia to the granted GPUs, writes the "
        "application profile and the ld.so.cache; a device is granted when its edits' "
        "`NVHOOK_CDI_DEVICE_<KEY>` variable names it and config.json's cgroup rules allow "
        "its nodes; the hook adds no cgroup rule; a read-only link or profile target is a "
        "warning; the spec sets NVIDIA_VISIBLE_DEVICES=void and carries a stamp (driver, "
        "majors, files, driver state, options) in its hook's environment",
        "NVIDIA's spec runs five hook processes and leaves every GPU of the host visible in "
        "/proc/driver/nvidia; createRuntime hooks see the state a prestart hook sees (the "
        "container's host pid), which the fd-safe engine needs; cdiVersion 0.5.0 (Podman "
        "4.3) has no annotations to hold the stamp",
    ),
    (
        "CDI: container paths",
        "a spec's container paths are the legacy hook's for the same request on an image of "
        "the driver root's own layout (binaries in /usr/bin, libraries flattened into the "
        "multiarch or lib64 directory); device nodes carry the host node's mode (and owner "
        "when not root), no additionalGids, so the default spec stays at cdiVersion 0.5.0",
        "NVIDIA mounts each file at its host path (a Debian package's nvidia-smi ends up off "
        "PATH); 0.7.0 (NVIDIA 1.19.1+) is refused by Podman < 5.1, containerd < 1.7.16, "
        "Docker < 26.1 and CRI-O < 1.30",
    ),
    (
        "load-kmods",
        "the hook creates missing control and requested IMEX channel nodes itself from "
        "/proc/devices (mode 0666, fd-safe) and runs the host's modprobe only on the real "
        "host; a compute request without /dev/nvidia-uvm warns",
        "libnvc delegates to the nvidia-modprobe setuid binary and silently leaves a missing "
        "uvm node out",
    ),
    (
        "ld.so.cache paths",
        "both ldcache modes list every library under the name an ldconfig run in the container "
        "gives its directory (the first name in the image's ld.so.conf order: /lib/<triplet> on"
        " a merged-/usr image), the development links libcuda.so and libnvidia-opticalflow.so "
        "included, and the written cache carries no generator text",
        "NVIDIA's CLI puts its library directory first on ldconfig's command line, so the "
        "image's own libraries change paths (/usr/lib/...) and a later ldconfig in the "
        "container changes them back; its ldconfig runs before the SONAME links exist, so the "
        "development links dangle then and stay out of its cache",
    ),
    (
        "Graphics and video files on every layout",
        "the EGL platform libraries come from the ld.so.cache or the standard library "
        "directories, Debian's unversioned libglxserver_nvidia.so is found (and mounted under "
        "its versioned name with the link), and the VDPAU driver is mounted in <libs>/vdpau for"
        " video (outside the ld.so.cache)",
        "NVIDIA's legacy CLI mounts none of them; its CDI spec finds them only next to libcuda "
        "(nothing on Debian's layout) and keeps host paths; libvdpau loads drivers only from "
        "its module directory",
    ),
    (
        "info",
        "`nvhook info` shows the inventory container starts use: the cached one while the "
        "driver's files and proc facts are unchanged (`--fresh` queries NVML and says whether "
        "the cache matched)",
        "what a container gets is what matters, and NVML is the slow part (seconds per GPU "
        "without persistence mode)",
    ),
    (
        "Optional targets",
        "the application profile (graphics, display) and the graphics links (gbm, GLX, "
        "/dev/dri/by-path) on a read-only target in the image are skipped with a warning and "
        "the container starts",
        "none of them is needed to run CUDA; NVIDIA's update-application-profile hook aborts "
        "every container when /etc/nvidia is read-only (1.20.0, its issue #2026)",
    ),
)
