"""nvhook(1) in roff, from the same help texts the program prints (`nvhook --help`, the
command registry), plus the files and variables an admin needs. Pure text."""

from __future__ import annotations


def _escape(text: str) -> str:
    return text.replace("\\", "\\e").replace("-", "\\-").replace("\n.", "\n\\&.")


def render(version: str) -> str:
    from nvhook.commands import COMMANDS

    commands = "".join(f".TP\n.B {name}\n{_escape(cmd.help)}\n"
                       for name, cmd in COMMANDS.items())
    sections = [
        f'.TH NVHOOK 1 "2026" "nvhook {version}" "User Commands"',
        ".SH NAME",
        "nvhook, nvidia\\-container\\-runtime\\-hook, nvidia\\-container\\-runtime, "
        "nvidia\\-container\\-cli \\- NVIDIA GPU support for Linux containers",
        ".SH SYNOPSIS",
        ".B nvhook\n[\\fB\\-\\-config\\fR \\fIPATH\\fR] [\\fB\\-\\-debug\\fR] "
        "\\fICOMMAND\\fR [\\fIARGS\\fR]",
        ".br\n.B nvidia\\-container\\-runtime\\-hook\n[\\fB\\-config\\fR \\fIPATH\\fR] "
        "\\fBprestart\\fR",
        ".br\n.B nvidia\\-container\\-runtime\n\\fIRUNC\\-ARGS\\fR",
        ".SH DESCRIPTION",
        _escape("nvhook gives containers NVIDIA GPUs. Container runtimes run its OCI prestart "
                "hook (nvidia-container-runtime-hook), which reads the container's OCI spec, "
                "decides from NVIDIA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES and "
                "NVIDIA_REQUIRE_* which GPUs and driver files it gets, and mounts them into "
                "its root file system through file descriptors. nvidia-container-runtime wraps "
                "runc for Docker and containerd; nvidia-container-cli is a drop-in for "
                "NVIDIA's. Every command prints its own help with --help."),
        ".SH COMMANDS", commands.rstrip("\n"),
        ".SH OPTIONS",
        ".TP\n.BR \\-\\-config \" \" \\fIPATH\\fR\nthe config.toml to use "
        "(default: $NVIDIA_CTK_CONFIG_FILE_PATH, then /etc/nvidia\\-container\\-runtime/"
        "config.toml)",
        ".TP\n.B \\-\\-debug\nlog everything on stderr; show tracebacks",
        ".TP\n.B \\-\\-version\nprint the version",
        ".SH FILES",
        ".TP\n.I /etc/nvidia\\-container\\-runtime/config.toml\nthe configuration "
        "(\\fBnvhook config default\\fR prints the default, \\fBnvhook config check\\fR "
        "checks it)",
        ".TP\n.I /usr/share/containers/oci/hooks.d/oci\\-nvidia\\-hook.json\nthe hook for "
        "Podman and CRI\\-O",
        ".TP\n.I /run/nvhook\nroot\\-only caches of the parsed config and the driver inventory",
        ".SH EXIT STATUS",
        "0 on success, 1 on an error (one line on stderr: what failed, where, what to do), "
        "2 on a usage error; \\fBnvhook doctor\\fR exits 1 when a GPU container would fail.",
        ".SH SEE ALSO",
        "\\fBnvhook doctor\\fR, \\fBnvhook info\\fR, runc(8), podman(1), dockerd(8)",
    ]
    return "\n".join(sections) + "\n"
