"""The application profile's one definition (libnvc-spec §2.5): its path, mode and exact
bytes, and the GPU mask it carries. Pure; imports nothing, so the engine's plan
(`nvmount.plan.procfs`), the CDI spec's hook plan and NVIDIA's update-application-profile
hook (`nvhook.compat.cdihook.actions`, on the cheap hook path) share it.
"""

APP_PROFILE_DIR = "/etc/nvidia/nvidia-application-profiles-rc.d"
APP_PROFILE_FILE = APP_PROFILE_DIR + "/10-container.conf"
APP_PROFILE_MODE = 0o555
MASK_BITS = 64  # EGLVisibleDGPUDevices is a 64-bit mask


def app_profile_bytes(mask: int) -> bytes:
    """Exact `10-container.conf` content: one line, no trailing newline (§2.5)."""
    return (
        '{ "profiles": [{"name": "_container_", "settings": ["EGLVisibleDGPUDevices", '
        f'0x{mask:x}]}}], "rules": [{{"pattern": [], "profile": "_container_"}}]}}'
    ).encode()


def gpu_mask(minors: list[int]) -> tuple[int, list[int]]:
    """(EGLVisibleDGPUDevices bitmask, minors left out: those >= 64 do not fit the mask)."""
    mask = 0
    for minor in minors:
        if 0 <= minor < MASK_BITS:
            mask |= 1 << minor
    return mask, [m for m in minors if not 0 <= m < MASK_BITS]
