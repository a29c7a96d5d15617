"""The names by which a container asks for GPUs: the request's own table. Pure, no imports.

`derive_request` (`nvhook.hook.request`, `device_lists`) decides with these names; the two
cheap screens that run before it take theirs from here, never retyped:

    screen                                    tests                             from
    the hook's (`nvhook.launch.screen`)       process.env, mounts               `VISIBLE_DEVICES`,
                                                                                `CUDA_VERSION`,
                                                                                `DEVICE_LIST_DIR`
    the wrapper's (`runtime.create`), the     config.json's bytes               `needles`
    runtime launcher's `grep -F` (its header
    and facts)

A screen may only decline a container the request would not make a GPU container of; it
never decides one is.
"""

from __future__ import annotations

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
CUDA_VERSION = "CUDA_VERSION"  # a legacy CUDA image (set, without NVIDIA_REQUIRE_CUDA)
DEVICE_LIST_ROOT = "/var/run/nvidia-container-devices"
DEVICE_LIST_DIR = DEVICE_LIST_ROOT.rsplit("/", 1)[1]  # what a mount destination names
JSON_ESCAPES = ("\\u", "\\/")  # a \\u or \\/ escape in config.json could spell any name


def needles(annotation_prefixes: tuple[str, ...], swarm: tuple[str, ...],
            volume_mounts: bool) -> tuple[str, ...]:
    """Strings at least one of which the bytes of a config.json that may want GPUs contain:
    the variables, JSON's escapes, the CDI annotation prefixes, the swarm variables and, when
    volume-mount lists count, their directory's name."""
    found = [VISIBLE_DEVICES, CUDA_VERSION, *JSON_ESCAPES, *annotation_prefixes, *swarm]
    if volume_mounts:
        found.append(DEVICE_LIST_DIR)
    return tuple(dict.fromkeys(found))
