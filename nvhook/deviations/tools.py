"""Deviations of the runtime wrapper, the CLI drop-ins, `runtime configure` and the nvidia-ctk /
nvidia-cdi-hook drop-ins from NVIDIA's (docs/runtimes.md lists them; `nvhook.deviations` joins
them with the hook's)."""

from __future__ import annotations

TOOLS: tuple[tuple[str, str, str], ...] = (
    (
        "Runtime wrapper: GPU containers only",
        "the wrapper adds the prestart hook only to a container the hook's own decision "
        "(`derive_request`) calls a GPU container; any other config.json is passed on byte for "
        "byte, so errors NVIDIA's hook raises for every container (an env entry without `=`, a "
        "malformed capabilities field) are not raised for a container that names no NVIDIA "
        "variable",
        "NVIDIA injects its hook into every container, which then costs every container a hook "
        "process; a non-GPU container should not depend on the GPU stack at all",
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
        "decide from the same file as the wrapper; NVIDIA falls back to an unchecked /usr/bin "
        "path",
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
        "never depend on the config being loadable; a GPU container's create loads and checks "
        "the whole file",
        "every runc call of every container pays for the wrapper: an interpreter start is ~10 "
        "ms, the launcher ~1 ms (NVIDIA's Go wrapper ~4 ms); a broken config must not stop the "
        "cleanup of running containers",
    ),
    (
        "Runtime wrapper: modes and output",
        "`mode = \"auto\"` resolves as NVIDIA 1.20's: CDI names only -> the CDI edits, Tegra "
        "-> csv (the hook's own), otherwise nvhook's spec delivery in place of jit-cdi "
        "(`jit-cdi` too; `legacy` adds the hook; `[nvhook] runtime-mode` forces one); CDI "
        "requests (annotations, accepted volume mounts, NVIDIA_VISIBLE_DEVICES, through the "
        "same policy as every request, as NVIDIA 1.20's runtime in cdi mode) are resolved from "
        "the CDI spec dirs, every spec read with PyYAML and type-checked; a spec whose device "
        "nodes are gone from the host is refused (NVIDIA's CDI library would inject it); "
        "`--version` prints `nvhook-runtime version <v> (NVIDIA Container Runtime v1.17.8 "
        "compatible)`, then the runtime's; errors are one line on stderr and an error record "
        "in runc's `--log` file, written also when the config cannot be loaded, naming the "
        "config file and what chose it (the launcher written by `nvhook install --config`, or "
        "NVIDIA_CTK_CONFIG_FILE_PATH)",
        "the wrapper applies CDI edits itself (no separate CDI runtime); it is not NVIDIA's "
        "binary; containerd and Docker show the last error of the `--log` file (NVIDIA's "
        "runtime writes none before its config loads: Docker then says `unable to retrieve OCI "
        "runtime error`, and blames a variable the launcher set)",
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
        "`--no-create-imex-channels` are accepted and do nothing; `--version` names nvhook as "
        "the build revision",
        "containerd's `--gpus` passes no `--root`, so a simulated or containerised driver must "
        "come from somewhere; nvhook loads no kernel modules, runs NVML unprivileged and "
        "ldconfig sandboxed",
    ),
    (
        "runtime configure",
        "docker: key order kept, the wrapper's absolute path, an existing entry's `args` kept; "
        "containerd: a drop-in holding the CRI plugin section in effect before it (config "
        "versions 1 and 2; CRI's default `runc` kept) or only the runtime (version 3), "
        "re-derived on every run, `runtime_type` always set, `container_annotations` "
        "`cdi.k8s.io/*`, no `runtime_root`/`runtime_engine`; the main file is only given one "
        "`imports` entry where it lacks one (a text edit, checked, with a backup; version 1 "
        "files too), and `--remove` gives it back byte for byte; a disabled CRI plugin is "
        "refused; crio: a drop-in in crio.conf.d; podman: the hooks.d file with an explicit "
        "env and `when: always`; a file that does not parse is refused, output is read back "
        "before it is written, a second run changes nothing",
        "daemons resolve a bare name on their own PATH at their start; NVIDIA 1.20 "
        "re-serialises containerd's main file, copies the CRI section without `runtimes.runc` "
        "(CRI then fails to load on a config without a runtimes table, such as Debian's), "
        "leaves version-1 files unimported and a CRI-disabled config silently useless; "
        "drop-ins without `runtime_type` are NVIDIA bugs users hit (painpoints 7)",
    ),
    (
        "nvidia-cdi-hook: where a hook works",
        "the container comes from the state's bundle (`root.path`); a hook inside the "
        "container's namespaces (a createContainer hook: its pid namespace is not /proc's, or "
        "the state's pid is its parent) works in its own mount namespace, any other enters the "
        "container's through a pidfd, never its own; every path is resolved in the rootfs "
        "(openat2 RESOLVE_IN_ROOT, no magic links), links and files are written to a temporary "
        "name and renamed, and no device, FIFO or socket of the image is opened",
        "runc gives createContainer hooks the init's pid in the container's pid namespace (1) "
        "while /proc is still the host's; NVIDIA's path-string resolution was CVE-2026-24260 "
        "and its ldconfig CVE-2025-23267",
    ),
    (
        "nvidia-cdi-hook: optional targets",
        "the application profile, the CUDA compat ld.so.conf.d file and the params view that "
        "cannot be written (a read-only /etc, a magic link or a FIFO where a directory "
        "belongs) are a warning and the container starts; an ldconfig failure is a warning "
        "unless `[nvhook] ldconfig-required`",
        "NVIDIA's update-application-profile fails every container when /etc/nvidia is "
        "read-only (1.20.0, NVIDIA/nvidia-container-toolkit#2026); none of them is needed to "
        "run CUDA",
    ),
    (
        "nvidia-cdi-hook: disable-device-node-modification and update-ldcache",
        "the read-only params copy is bound from a detached tmpfs (new mount API): nothing is "
        "created in the container; update-ldcache writes the container's ld.so.cache itself "
        "(`[nvhook] ldcache = \"write\"`): ldconfig's entries for what the runtime mounted in "
        "the folders and the links to it, in front of the image's own entries, which stay as "
        "its cache lists them (a missing SONAME link is made, as ldconfig makes it); where the "
        "writer cannot say exactly what ldconfig would (an image 00-compat-*.conf, a mount "
        "under glibc-hwcaps, an unusual library or cache) it runs the sandboxed host ldconfig "
        "with the image's 00-compat-*.conf directories first and the folders; no "
        "00-nvcr-*/zz-nvcr-* files are written into the image",
        "NVIDIA makes a scratch directory and a tmpfs inside the container's root and leaves "
        "them there, and its ldconfig reads every library directory of the image at every "
        "start; the compat-first order is the precedence NVIDIA's file names give",
    ),
    (
        "nvidia-cdi-hook: one process for a run of hooks",
        "the first of consecutive createContainer hooks of the same drop-in (same environment "
        "and global flags, no timeout, the state on stdin) does their work, in their order, "
        "before pivot_root; the others find root's record of it (/run/nvhook/cdi-hooks, named "
        "by the container's first process and its start time) and exit at once; an error in "
        "any of that work fails the first hook",
        "each hook is a Python interpreter here (about 10 ms of CPU before any work): six cost "
        "4x NVIDIA's Go hooks; the container gets byte for byte the same (tested), but the "
        "runtime's error names the first hook rather than the one whose work failed",
    ),
    (
        "nvidia-ctk cdi generate",
        "the spec is nvhook's (its hooks, `index` naming by index and UUID); --mode other than "
        "auto, nvml, wsl, csv, --disable-hook/--enable-hook, --config-search-path, "
        "--library-search-path, --ldconfig-path, the --csv.* flags, a --dev-root other than "
        "the driver root and feature flags other than no-additional-gids-for-device-nodes and "
        "disable-nvsandboxutils are refused by name",
        "one plan, several deliveries: a second generator would drift from the hook; a flag "
        "that would change nothing must not be silently accepted",
    ),
    (
        "nvidia-ctk runtime configure",
        "1.20's flags drive `nvhook runtime configure`: the installed wrapper's absolute path "
        "unless --nvidia-runtime-path; containerd and CRI-O only through a drop-in "
        "(--drop-in-config=\"\" is refused), --config-source=command refused; with "
        "--cdi.enabled daemon.json's other `features` are kept",
        "1.20 writes the bare `nvidia-container-runtime` that dockerd resolves on its own "
        "PATH, can rewrite containerd's main file, and drops daemon.json's other features",
    ),
    (
        "nvidia-ctk config, cdi list, system",
        "`config --set` edits the file line by line keeping its comments (a full rewrite only "
        "when a line edit cannot say it), knows nvhook's keys too and refuses an in-place "
        "result `config check` calls an error; `cdi list` without --spec-dir reads "
        "config.toml's spec-dirs; `create-dev-char-symlinks` searches DRIVER_ROOT/dev and "
        "--create-all uses the GPUs' real minors",
        "NVIDIA re-serializes the whole file; 1.20.0 searches /dev whatever --driver-root says "
        "and numbers GPU nodes by PCI index",
    ),
)
