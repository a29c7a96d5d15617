"""Where nvhook deliberately differs from NVIDIA's hook, runtime, CLI and nvidia-ctk (v1.17.8).

The one list of deviations: docs/hook.md and docs/runtimes.md repeat it (a test keeps them in
step). Each entry is (topic, what nvhook does, why).
"""

from __future__ import annotations

DEVIATIONS: tuple[tuple[str, str, str], ...] = (
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
        "`mode = auto` resolves to `cdi` (only fully qualified CDI names requested), `csv` (a "
        "driver root with /etc/nv_tegra_release) or else `legacy`; no dlopen of NVML or "
        "dxcore to probe; `csv` is handled by the hook's own engine; a WSL2 root (/dev/dxg) "
        "is legacy with the WSL backend",
        "probing loads libraries into a root process and costs time; NVML and WSL hosts "
        "resolve to legacy in NVIDIA too",
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
        "Runtime wrapper: GPU containers only",
        "the wrapper adds the prestart hook only to a container the hook's own decision "
        "(`derive_request`) calls a GPU container; any other config.json is passed on "
        "byte for byte, so errors NVIDIA's hook raises for every container (an env entry "
        "without `=`, a malformed capabilities field) are not raised for a container that "
        "names no NVIDIA variable",
        "NVIDIA injects its hook into every container, which then costs every container a "
        "hook process; a non-GPU container should not depend on the GPU stack at all",
    ),
    (
        "Runtime wrapper: command line",
        "runc's global flags are parsed as runc parses them (Go's flag grammar, checked "
        "against runc itself), the command is the first word after them; `create` and `run` "
        "are acted on; a `-b`/`--bundle` value is never a command",
        "NVIDIA treats any argument equal to `create` as the command (`runc delete create` "
        "edits the config.json of the working directory) and ignores `run`",
    ),
    (
        "Runtime wrapper: spec rewrite",
        "config.json is edited as JSON, keeping every field and the key order, and replaced "
        "atomically (new file in the bundle, same mode and owner, rename); it must be a "
        "regular file (no symlink, no FIFO) of at most 4 MiB and strict JSON (duplicate keys "
        "and NaN are refused)",
        "v1.17.8 re-encodes the spec through Go's typed struct, which drops unknown fields, "
        "adds zero values, and truncates the file in place",
    ),
    (
        "Runtime wrapper: hook entry",
        "the hook path is absolute (a name is looked up in the wrapper's own directory first, "
        "then PATH; not found is an error), the entry carries an explicit env (PATH, "
        "NVIDIA_CTK_CONFIG_FILE_PATH of the config the wrapper read, NVHOOK_RUNTIME_DELIVERY "
        "of the delivery it chose), and an `nvhook-hook` already present also counts",
        "without `env` runc hands the hook its own environment (CVE-2025-23266); the hook must "
        "decide from the same file as the wrapper; NVIDIA falls back to an unchecked "
        "/usr/bin path",
    ),
    (
        "Runtime wrapper: low-level runtime",
        "`nvidia-container-runtime.runtimes` defaults to `runc`, `crun`; a candidate that is "
        "the wrapper itself (same file) is skipped",
        "v1.20 dropped `docker-runc` too; a candidate resolving to the wrapper would exec "
        "itself forever",
    ),
    (
        "Runtime wrapper: launcher and configuration",
        "the installed wrapper is a POSIX sh launcher that execs the low-level runtime itself "
        "for every command but `create` and `run` and for a create whose config.json names no "
        "NVIDIA variable, from facts of the config file the Python wrapper keeps in "
        "/run/nvhook (trusted while newer than the file); `state`, `start`, `kill`, `delete` "
        "never depend on the config being loadable; a GPU container's create loads and "
        "checks the whole file",
        "every runc call of every container pays for the wrapper: an interpreter start is "
        "~10 ms, the launcher ~1 ms (NVIDIA's Go wrapper ~4 ms); a broken config must not "
        "stop the cleanup of running containers",
    ),
    (
        "Runtime wrapper: modes and output",
        "`mode = \"auto\"` resolves as NVIDIA 1.20's: CDI names only -> the CDI edits, Tegra "
        "-> csv (the hook's own), otherwise nvhook's spec delivery in place of jit-cdi "
        "(`jit-cdi` too; `legacy` adds the hook; `[nvhook] runtime-mode` forces one); "
        "`--version` prints `nvhook-runtime version <v> (NVIDIA Container Runtime v1.17.8 "
        "compatible)`, then the runtime's; errors are one line on stderr and an error record "
        "in runc's `--log` file, written also when the config cannot be loaded, naming the "
        "config file and what chose it (the launcher written by `nvhook install --config`, "
        "or NVIDIA_CTK_CONFIG_FILE_PATH)",
        "the wrapper applies CDI edits itself (no separate CDI runtime); it is not NVIDIA's "
        "binary; containerd and Docker show the last error of the `--log` file (NVIDIA's "
        "runtime writes none before its config loads: Docker then says `unable to retrieve "
        "OCI runtime error`, and blames a variable the launcher set)",
    ),
    (
        "Runtime wrapper: spec delivery, nvhook's jit-cdi",
        "the wrapper's create configures a GPU container before runc runs, in one process: "
        "devices, device rules and driver mounts in config.json, links and the ld.so.cache "
        "written into the rootfs in-root; NVIDIA_DRIVER_CAPABILITIES, NVIDIA_REQUIRE_* and the "
        "MIG variables count as in legacy mode; no hook process, so /proc/driver/nvidia shows "
        "every GPU of the node unless `[nvhook] narrow-procfs = true` adds the hook for it; "
        "Docker's `--gpus` hook is removed from the spec, as jit-cdi removes it",
        "jit-cdi mounts every driver file whatever the capabilities say, checks no "
        "requirement, and runs six hook processes (ldconfig among them) for what one process "
        "can write; runc refuses mounts under /proc, which only a hook can narrow",
    ),
    (
        "nvidia-container-cli drop-in",
        "reads config.toml (the usual lookup) for what its flags leave out: the driver root, "
        "ldcache and `[nvhook]`; `--load-kmods`, `--user`, `--no-pivot` and "
        "`--no-create-imex-channels` are accepted and do nothing; `--version` names nvhook "
        "as the build revision",
        "containerd's `--gpus` passes no `--root`, so a simulated or containerised driver "
        "must come from somewhere; nvhook loads no kernel modules, runs NVML unprivileged "
        "and ldconfig sandboxed",
    ),
    (
        "runtime configure",
        "docker: key order kept, the wrapper's absolute path, an existing entry's `args` "
        "kept; containerd: a drop-in only (the main file is never written; a note names the "
        "`imports` line it needs), config versions 2 and 3, `runtime_type` always set, no "
        "`runtime_root`/`runtime_engine`; crio: a drop-in in crio.conf.d; podman: the hooks.d "
        "file with an explicit env and `when: always`; a file that does not parse is "
        "refused, output is read back before it is written, a second run changes nothing",
        "daemons resolve a bare name on their own PATH at their start; rewriting containerd's "
        "main config and drop-ins without `runtime_type` are NVIDIA bugs users hit "
        "(painpoints 7)",
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
        "CDI: the procfs view and hook stage",
        "a generated spec's hooks are nvhook's own (`nvhook cdi hook "
        "create-symlinks|update-ldcache|procfs`) at `createRuntime`; `procfs` narrows "
        "/proc/driver/nvidia to the container's GPUs; the spec carries a stamp (driver "
        "version, majors, file digest) in its hooks' environment",
        "NVIDIA's CDI spec leaves every GPU of the host visible in /proc/driver/nvidia; "
        "createRuntime hooks see the state a prestart hook sees (the container's host pid), "
        "which the fd-safe engine needs; cdiVersion 0.5.0 (Podman 4.3) has no annotations to "
        "hold the stamp",
    ),
    (
        "load-kmods",
        "the hook creates missing control and requested IMEX channel nodes itself from "
        "/proc/devices (mode 0666, fd-safe) and runs the host's modprobe only on the real "
        "host; a compute request without /dev/nvidia-uvm warns",
        "libnvc delegates to the nvidia-modprobe setuid binary and silently leaves a missing "
        "uvm node out",
    ),
)
