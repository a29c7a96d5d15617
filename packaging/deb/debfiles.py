"""The DEBIAN/ files of the nvhook package: control fields, maintainer scripts, copyright and
changelog. Pure text.

Relations with NVIDIA's packages (v1.17.8, hook-spec 4.3), all reasoned by the files:
- Conflicts + Replaces nvidia-container-toolkit (ships /usr/bin/nvidia-container-runtime-hook
  and the nvidia-container-toolkit link), nvidia-container-toolkit-base (ships
  /usr/bin/nvidia-container-runtime and writes /etc/nvidia-container-runtime/config.toml, our
  conffile), libnvidia-container-tools (ships /usr/bin/nvidia-container-cli), and the old
  nvidia-container-runtime / nvidia-container-runtime-hook packages that shipped the same
  paths. Both cannot be installed at once; apt removes NVIDIA's when ours is installed.
- Provides nvidia-container-toolkit (= 1.17.8) and libnvidia-container-tools (= 1.17.8):
  packages that depend on them for the hook, the runtime or the CLI (nvidia-docker2, which
  only adds Docker's daemon.json) are satisfied by nvhook, which implements their v1.17.8
  behaviour.
- Provides nvidia-container-toolkit-base (= 1.20.0): that package's commands are here,
  /usr/bin/nvidia-ctk and /usr/bin/nvidia-cdi-hook (nvhook's drop-ins for 1.20.0's command
  surface: `runtime configure`, `cdi generate|list`, `config`, `system`, every hook NVIDIA's
  CDI specs name), beside the runtime wrapper it also ships. A package or script that runs
  nvidia-ctk, or a spec that names /usr/bin/nvidia-cdi-hook, finds them.
- libnvidia-container1 (the C library) shares no file with nvhook: no relation.
"""

from __future__ import annotations

SUMMARY = "NVIDIA GPU support for Linux containers: OCI hook, runtime wrapper, CDI"
NVIDIA_VERSION = "1.17.8"
CTK_VERSION = "1.20.0"  # the nvidia-ctk / nvidia-cdi-hook surface the drop-ins implement
_CONFLICTS = ("nvidia-container-toolkit", "nvidia-container-toolkit-base",
              "libnvidia-container-tools", "nvidia-container-runtime",
              "nvidia-container-runtime-hook")
# A TOML reader for the files outside the subset nvhook reads itself (nvhook.config.toml_read):
# tomllib from 3.11; below, python3-tomli where the release has it (Ubuntu 22.04), else
# python3-toml (Debian 11: no release with a 3.9 interpreter ships python3-tomli).
# The interpreters the package is tested on (tests/e2e/test_deb.py: bullseye's 3.9 to sid's
# 3.14) are claimed in the description, not as an upper bound: `python3 (<< 3.15)` would make
# apt hold python3 back or remove nvhook in a release upgrade, and a GPU node's containers with it.
TESTED_PYTHONS = "3.9 to 3.14"
DEPENDS = ("python3 (>= 3.9), python3-prctl, "
           "python3 (>= 3.11) | python3-tomli | python3-toml, python3-yaml")


def control(version: str, installed_size_kib: int) -> str:
    provides = ", ".join([*(f"{p} (= {NVIDIA_VERSION})" for p in
                            ("nvidia-container-toolkit", "libnvidia-container-tools")),
                          f"nvidia-container-toolkit-base (= {CTK_VERSION})"])
    return f"""\
Package: nvhook
Version: {version}
Architecture: all
Maintainer: nvhook developers <nvhook@users.noreply.github.com>
Installed-Size: {installed_size_kib}
Depends: {DEPENDS}
Suggests: podman | docker.io | containerd | cri-o
Conflicts: {", ".join(_CONFLICTS)}
Replaces: {", ".join(_CONFLICTS)}
Provides: {provides}
Section: admin
Priority: optional
Description: {SUMMARY}
 nvhook gives containers NVIDIA GPUs: an OCI prestart hook (installed under NVIDIA's name,
 nvidia-container-runtime-hook), a runc wrapper (nvidia-container-runtime), drop-ins for
 nvidia-container-cli, nvidia-ctk and nvidia-cdi-hook, CDI spec generation and
 `nvhook runtime configure` for Docker, containerd, CRI-O and Podman. It reads NVIDIA's
 config.toml and environment variables (NVIDIA_VISIBLE_DEVICES,
 NVIDIA_DRIVER_CAPABILITIES, ...) with the semantics of the NVIDIA Container Toolkit
 {NVIDIA_VERSION} ({CTK_VERSION} for nvidia-ctk), in Python, resolving every container path
 through file descriptors. Tested with CPython {TESTED_PYTHONS} (Debian 11 to sid).
"""


# The CDI refresh units are enabled where systemd runs (the service does nothing without a
# driver: its ExecCondition), as dh_installsystemd would; the udev rule
# (lib/udev/rules.d) starts the same service on module and GPU events.
UNITS = "nvhook-cdi-refresh.path nvhook-cdi-refresh.service nvhook-cdi-refresh.timer"
POSTINST = f"""\
#!/bin/sh
set -e
if [ "$1" = configure ] && command -v py3compile >/dev/null 2>&1; then
    py3compile -p nvhook
fi
# the GPU create's modules in one file (nvhook.launch.pack); without it creates only import slower
if [ "$1" = configure ]; then
    /usr/bin/python3 -IS /usr/lib/python3/dist-packages/nvhook/launch/pack.py \
        /usr/lib/python3/dist-packages >/dev/null 2>&1 || true
fi
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
    systemctl enable --now {UNITS} >/dev/null 2>&1 || true
fi
exit 0
"""

# Byte code (py3compile's, and any the interpreter wrote) goes before dpkg removes the sources.
PRERM = f"""\
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
    systemctl disable --now {UNITS} >/dev/null 2>&1 || true
fi
if command -v py3clean >/dev/null 2>&1; then
    py3clean -p nvhook
fi
rm -f /usr/lib/python3/dist-packages/nvhook/create.pack
for d in /usr/lib/python3/dist-packages/nvhook /usr/lib/python3/dist-packages/nvmount; do
    if [ -d "$d" ]; then
        find "$d" -name __pycache__ -type d -prune -exec rm -rf {{}} +
    fi
done
exit 0
"""

# The root-only caches (/run/nvhook) and the spec the refresh unit wrote go with the package;
# the conffile stays until purge, as Debian keeps every conffile (dpkg removes it on purge).
POSTRM = """\
#!/bin/sh
set -e
case "$1" in
    remove|purge)
        rm -rf /run/nvhook
        rm -f /var/run/cdi/nvidia.yaml
        if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
        ;;
esac
exit 0
"""

SCRIPTS = {"postinst": POSTINST, "prerm": PRERM, "postrm": POSTRM}

COPYRIGHT = """\
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: nvhook
Source: https://github.com/nvhook/nvhook

Files: *
Copyright: 2026 the nvhook developers
License: Apache-2.0
 Licensed under the Apache License, Version 2.0 (the "License"); you may not use this
 software except in compliance with the License. You may obtain a copy of the License at
 http://www.apache.org/licenses/LICENSE-2.0
 .
 On Debian systems, the full text of the Apache License, Version 2.0 can be found in
 /usr/share/common-licenses/Apache-2.0.
"""


def changelog(version: str) -> str:
    return (f"nvhook ({version}) unstable; urgency=medium\n\n"
            "  * Package built by packaging/build-deb.\n\n"
            " -- nvhook developers <nvhook@users.noreply.github.com>  "
            "Tue, 24 Nov 2026 00:00:00 +0000\n")
