"""Where nvhook deliberately differs from NVIDIA's nvidia-container-runtime-hook v1.17.8.

The one list of deviations: the README's "Deviations from NVIDIA's hook" section repeats it
(a test keeps the two in step). Each entry is (topic, what nvhook does, why).
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
        "Stricter config values",
        "unknown `nvidia-container-runtime.mode` or `modes.legacy.cuda-compat-mode` values, and "
        "relative `[nvhook]` paths, fail at load with the key, the value and the allowed set",
        "NVIDIA maps an unknown cuda-compat-mode silently to `disabled` and reports an unknown "
        "mode only as the misleading 'invoking the hook directly' error",
    ),
    (
        "Mode detection",
        "`mode = auto` resolves to `cdi` (only fully qualified CDI names requested) or else "
        "`legacy`; no platform probing (no dlopen of NVML or dxcore, no Tegra files)",
        "nvhook is the legacy hook; probing loads libraries into a root process and costs time; "
        "NVML and WSL hosts resolve to legacy in NVIDIA too, and nvhook has no csv mode",
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
)
