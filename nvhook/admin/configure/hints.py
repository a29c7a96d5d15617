"""What to do after `nvhook install` or `nvhook runtime configure`: which daemon to restart.
Pure text.
"""

from __future__ import annotations

RESTART = {
    "docker": "restart dockerd to load it (systemctl restart docker); then "
              "`docker run --runtime=NAME ...`",
    "containerd": "restart containerd to load it (systemctl restart containerd); Kubernetes: "
                  "a RuntimeClass with handler NAME",
    "crio": "restart CRI-O to load it (systemctl restart crio); Kubernetes: a RuntimeClass "
            "with handler NAME",
    "podman": "nothing to restart: podman reads its hooks directory at every container start",
}
GPUS_FLAG = ("`docker run --gpus` also needs nvidia-container-runtime-hook on dockerd's PATH "
             "when dockerd starts (found: {found})")


def restart_hint(runtime: str, name: str = "nvidia") -> str:
    """One line: what makes the runtime use the new configuration."""
    return RESTART[runtime].replace("NAME", name)


def removal_hint(runtime: str) -> str:
    """One line after `runtime configure --remove`."""
    if runtime == "podman":
        return RESTART["podman"]
    service = {"docker": "docker", "containerd": "containerd", "crio": "crio"}[runtime]
    return f"restart {runtime} to apply it (systemctl restart {service})"


def install_hint(prefix: str) -> str:
    """The next steps after installing launchers into `prefix` (printed on stderr)."""
    lines = [
        "next: configure a runtime, then restart it:",
        f"  nvhook runtime configure --runtime=docker      # {restart_hint('docker')}",
        f"  nvhook runtime configure --runtime=containerd  # {restart_hint('containerd')}",
        f"  nvhook runtime configure --runtime=crio        # {restart_hint('crio')}",
        f"  nvhook runtime configure --runtime=podman      # {restart_hint('podman')}",
        f"  (the launchers are in {prefix}; dockerd and containerd find them there only if it "
        "is on their PATH, or by the absolute paths `runtime configure` writes)",
    ]
    return "\n".join(lines) + "\n"
