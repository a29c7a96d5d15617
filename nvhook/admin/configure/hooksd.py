"""The OCI hooks.d file Podman and CRI-O read (`oci-nvidia-hook.json`). Pure.

    {"version": "1.0.0",
     "hook": {"path": "/usr/local/bin/nvidia-container-runtime-hook",
              "args": ["nvidia-container-runtime-hook", "prestart"],
              "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},
     "when": {"always": true},
     "stages": ["prestart"]}

The shape of the file NVIDIA's packages shipped up to v1.13 (hook-spec 4.3), with the hook's
absolute path and an explicit env (podman otherwise hands the hook its own environment). The
hook runs for every container (hooks.d has no condition on environment variables) and exits
at once for one that wants no GPU. Named like NVIDIA's, a file in /etc/containers/oci/hooks.d
shadows one NVIDIA's package left in /usr/share/containers/oci/hooks.d.
"""

from __future__ import annotations

import json
import os
from typing import Any

FILE_NAME = "oci-nvidia-hook.json"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def hook_document(hook_path: str, config: str | None = None) -> dict[str, Any]:
    env = [PATH_ENV]
    if config:
        env.append(f"NVIDIA_CTK_CONFIG_FILE_PATH={config}")
    return {
        "version": "1.0.0",
        "hook": {"path": hook_path, "args": [os.path.basename(hook_path), "prestart"],
                 "env": env},
        "when": {"always": True},
        "stages": ["prestart"],
    }


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2) + "\n"
