"""`load-kmods`: what nvidia-modprobe does for libnvidia-container, done by the hook itself on
the host before discovery. Effects (the host's /dev in the driver root, modprobe).

- Kernel modules: on the real host (driver root "/", /proc), a missing `nvidia-uvm` entry in
  /proc/devices runs the host's modprobe (a fixed path, an empty environment, 10 s) for
  `nvidia` and `nvidia-uvm`. Never a binary of the image or of the hook's PATH.
- Control nodes: /dev/nvidiactl (195:255), /dev/nvidia-modeset (195:254), /dev/nvidia-uvm
  (uvm:0) and /dev/nvidia-uvm-tools (uvm:1) are created (mode 0666, as nvidia-modprobe does)
  when their major is in /proc/devices and the node is missing.
- IMEX channels: /dev/nvidia-caps-imex-channels/channel<N> for the channels a request names,
  from the `nvidia-caps-imex-channels` major, unless features.disable-imex-channel-creation;
  at most channel 2047 (the driver's default NVreg_ImexChannelCount) and 64 per start.

Every node is made with mknodat on a directory fd opened without following links; an existing
entry of any type is left alone (the discovery then reports it as it is).
"""

from __future__ import annotations

import os
import stat

from nvmount.log import get_logger

log = get_logger(__name__)

NV_MAJOR = 195
CONTROL = (("nvidiactl", "nvidia-frontend", 255), ("nvidia-modeset", "nvidia-frontend", 254),
           ("nvidia-uvm", "nvidia-uvm", 0), ("nvidia-uvm-tools", "nvidia-uvm", 1))
IMEX_DIR = "nvidia-caps-imex-channels"
MAX_IMEX_CHANNEL = 2047
MAX_IMEX_PER_START = 64
MODPROBE = ("/sbin/modprobe", "/usr/sbin/modprobe")


def read_majors(proc_root: str) -> dict[str, int]:
    """{name: major} of the character devices in <proc_root>/devices (no `re`: the hook's
    common path runs this)."""
    majors: dict[str, int] = {}
    try:
        with open(os.path.join(proc_root, "devices"), "rb") as stream:
            text = stream.read(1 << 16).decode("ascii", "replace")
    except OSError:
        return majors
    for line in text.split("Block devices:")[0].splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0].isdigit() and len(fields[0]) <= 4:
            majors.setdefault(fields[1], int(fields[0]))
    majors.setdefault("nvidia-frontend", majors.get("nvidia", NV_MAJOR))
    return majors


def load_modules(root: str, proc_root: str) -> bool:
    """modprobe nvidia and nvidia-uvm on the real host when uvm is not loaded; whether it ran."""
    if root != "/" or proc_root != "/proc" or "nvidia-uvm" in read_majors(proc_root):
        return False
    modprobe = next((p for p in MODPROBE if os.access(p, os.X_OK)), None)
    if modprobe is None:
        log.warning("load-kmods: no modprobe in %s", ", ".join(MODPROBE))
        return False
    import subprocess

    for module in ("nvidia", "nvidia-uvm"):
        try:
            proc = subprocess.run([modprobe, module], env={}, capture_output=True, timeout=10,
                                  check=False, cwd="/")
        except (OSError, subprocess.TimeoutExpired) as err:
            log.warning("load-kmods: modprobe %s: %s", module, err)
            return True
        if proc.returncode != 0:
            log.warning("load-kmods: modprobe %s failed: %s", module,
                        proc.stderr.decode("utf-8", "replace").strip()[:300])
    return True


def ensure_nodes(root: str, proc_root: str, imex_channels: tuple[int, ...] = (), *,
                 create_imex: bool = True) -> list[str]:
    """Create the missing nodes of the module docstring; their paths (for the log)."""
    majors = read_majors(proc_root)
    wanted = [(name, majors[m], minor) for name, m, minor in CONTROL if m in majors]
    made: list[str] = []
    try:
        dev = _open_dir(os.path.join(root, "dev"))
    except OSError as err:
        log.warning("load-kmods: open %s/dev: %s", root.rstrip("/"), err.strerror)
        return made
    try:
        made += [f"/dev/{n}" for n, major, minor in wanted if _mknod(dev, n, major, minor)]
        imex = majors.get("nvidia-caps-imex-channels")
        channels = [c for c in imex_channels if 0 <= c <= MAX_IMEX_CHANNEL]
        if create_imex and imex is not None and channels:
            made += _imex(dev, imex, channels[:MAX_IMEX_PER_START])
    finally:
        os.close(dev)
    for path in made:
        log.info("load-kmods: created %s%s", root.rstrip("/"), path)
    return made


def _imex(dev: int, major: int, channels: list[int]) -> list[str]:
    try:
        os.mkdir(IMEX_DIR, 0o755, dir_fd=dev)
    except FileExistsError:
        log.debug("load-kmods: /dev/%s exists", IMEX_DIR)
    fd = os.open(IMEX_DIR, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                 dir_fd=dev)
    try:
        return [f"/dev/{IMEX_DIR}/channel{c}" for c in channels
                if _mknod(fd, f"channel{c}", major, c)]
    finally:
        os.close(fd)


def _open_dir(path: str) -> int:
    return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def _mknod(dirfd: int, name: str, major: int, minor: int) -> bool:
    """mknodat(dirfd, name) unless an entry exists; whether a node was made."""
    try:
        os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        return False
    except FileNotFoundError:
        pass
    mask = os.umask(0)  # 0666 as nvidia-modprobe makes them (the hook's umask is 022)
    try:
        os.mknod(name, stat.S_IFCHR | 0o666, os.makedev(major, minor), dir_fd=dirfd)
    except FileExistsError:
        return False
    except OSError as err:
        log.warning("load-kmods: mknod /dev/%s (c %d:%d): %s", name, major, minor, err.strerror)
        return False
    finally:
        os.umask(mask)
    return True
