"""`load-kmods`: what nvidia-modprobe does for libnvidia-container, done by the hook itself on
the host before discovery. Effects (the host's /dev in the driver root, modprobe).

- Kernel modules: on the real host (driver root "/", /proc), a missing `nvidia-uvm` entry in
  /proc/devices runs the host's modprobe (a fixed path, an empty environment, 10 s) for
  `nvidia` and `nvidia-uvm`. Never a binary of the image or of the hook's PATH.
- Control nodes: /dev/nvidiactl (195:255), /dev/nvidia-modeset (195:254), /dev/nvidia-uvm
  (uvm:0) and /dev/nvidia-uvm-tools (uvm:1) are created (mode 0666, as nvidia-modprobe does)
  when their major is in /proc/devices (`nvidia-frontend` or `nvidia`; `nvidia-uvm`) and the
  node is missing. A major the kernel does not list is never guessed: no driver, no node.
- IMEX channels: /dev/nvidia-caps-imex-channels/channel<N> for the channels a request names,
  from the `nvidia-caps-imex-channels` major, unless features.disable-imex-channel-creation;
  at most channel 2047 (the driver's default NVreg_ImexChannelCount) and 64 per start.

Every node is made with mknodat on a directory fd opened without following links, with its
`/dev/char/MAJOR:MINOR` link as udev makes them (`../nvidiactl`); an existing entry of any
type is left alone (the discovery then reports it as it is). As nvidia-modprobe
does, the driver's /proc/driver/nvidia/params decide: `ModifyDeviceFiles: 0` creates nothing,
`DeviceFileUID`, `DeviceFileGID` and `DeviceFileMode` give the nodes' owner and mode (default
root:root 0666). Modules are loaded only by a modprobe owned by root and writable by no one
else, and never from a user namespace.
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
    if "nvidia" in majors:  # newer drivers list the control major as "nvidia"
        majors.setdefault("nvidia-frontend", majors["nvidia"])
    return majors  # no guess: a major the kernel does not list gets no node (nvidia-modprobe)


def load_modules(root: str, proc_root: str) -> bool:
    """modprobe nvidia and nvidia-uvm on the real host when uvm is not loaded; whether it ran."""
    if root != "/" or proc_root != "/proc" or "nvidia-uvm" in read_majors(proc_root):
        return False
    modprobe = next((p for p in MODPROBE if _trusted(p)), None)
    if modprobe is None or _in_user_namespace():
        log.warning("load-kmods: no root-owned modprobe in %s, or in a user namespace: "
                    "modules not loaded", ", ".join(MODPROBE))
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


def _trusted(path: str) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return st.st_uid == 0 and not st.st_mode & 0o022 and bool(st.st_mode & 0o100)


def _in_user_namespace() -> bool:
    try:
        with open("/proc/self/uid_map", "rb") as stream:
            return stream.read(256).split() != [b"0", b"0", b"4294967295"]
    except OSError:
        return False


def device_file_params(proc_root: str) -> tuple[bool, int, int, int]:
    """(modify device files, uid, gid, mode) from the driver's params (nvidia-modprobe's
    rules); the defaults when a value is absent or not a small number."""
    values = {"ModifyDeviceFiles": 1, "DeviceFileUID": 0, "DeviceFileGID": 0,
              "DeviceFileMode": 0o666}
    try:
        with open(os.path.join(proc_root, "driver/nvidia/params"), "rb") as stream:
            text = stream.read(1 << 16).decode("ascii", "replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        value = value.strip()
        if key in values and value.isdigit() and len(value) <= 10:
            values[key] = int(value)
    return (values["ModifyDeviceFiles"] != 0, values["DeviceFileUID"], values["DeviceFileGID"],
            values["DeviceFileMode"] & 0o777)


def ensure_nodes(root: str, proc_root: str, imex_channels: tuple[int, ...] = (), *,
                 create_imex: bool = True) -> list[str]:
    """Create the missing nodes of the module docstring; their paths (for the log)."""
    modify, uid, gid, mode = device_file_params(proc_root)
    if not modify:
        return []
    majors = read_majors(proc_root)
    wanted = [(name, majors[m], minor) for name, m, minor in CONTROL if m in majors]
    made: list[str] = []
    try:
        dev = _open_dir(os.path.join(root, "dev"))
    except OSError as err:
        log.warning("load-kmods: open %s/dev: %s", root.rstrip("/"), err.strerror)
        return made
    numbers: list[tuple[str, int, int]] = []
    try:
        numbers += [(n, major, minor) for n, major, minor in wanted
                    if _mknod(dev, n, major, minor, (uid, gid, mode))]
        imex = majors.get("nvidia-caps-imex-channels")
        channels = [c for c in imex_channels if 0 <= c <= MAX_IMEX_CHANNEL]
        if create_imex and imex is not None and channels:
            numbers += _imex(dev, imex, channels[:MAX_IMEX_PER_START], (uid, gid, mode))
        made += [f"/dev/{name}" for name, _, _ in numbers]
        if numbers:
            _char_links(dev, numbers)
    finally:
        os.close(dev)
    for path in made:
        log.info("load-kmods: created %s%s", root.rstrip("/"), path)
    return made


def char_link(name: str, major: int, minor: int) -> tuple[str, str]:
    """(entry in /dev/char, its relative text) for the node /dev/<name>, as udev makes them:
    `195:255 -> ../nvidiactl`, `509:0 -> ../nvidia-caps-imex-channels/channel0`."""
    return f"{major}:{minor}", "../" + name


def _char_links(dev: int, numbers: list[tuple[str, int, int]]) -> None:
    """/dev/char/MAJOR:MINOR links for the nodes just made (systemd resolves DeviceAllow=
    /dev/char paths; NVIDIA's create-dev-char-symlinks does this for its nodes); an existing
    entry is left alone, a failure is a warning."""
    try:
        try:
            os.mkdir("char", 0o755, dir_fd=dev)
        except FileExistsError:
            log.debug("load-kmods: /dev/char exists")
        fd = os.open("char", os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=dev)
    except OSError as err:
        log.warning("load-kmods: /dev/char: %s (no /dev/char links)", err.strerror)
        return
    try:
        for name, major, minor in numbers:
            entry, text = char_link(name, major, minor)
            try:
                os.symlink(text, entry, dir_fd=fd)
            except FileExistsError:
                continue
            except OSError as err:
                log.warning("load-kmods: symlink /dev/char/%s -> %s: %s", entry, text,
                            err.strerror)
    finally:
        os.close(fd)


def _imex(dev: int, major: int, channels: list[int],
          owner: tuple[int, int, int]) -> list[tuple[str, int, int]]:
    try:
        os.mkdir(IMEX_DIR, 0o755, dir_fd=dev)
    except FileExistsError:
        log.debug("load-kmods: /dev/%s exists", IMEX_DIR)
    fd = os.open(IMEX_DIR, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                 dir_fd=dev)
    try:
        return [(f"{IMEX_DIR}/channel{c}", major, c) for c in channels
                if _mknod(fd, f"channel{c}", major, c, owner)]
    finally:
        os.close(fd)


def _open_dir(path: str) -> int:
    return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def _mknod(dirfd: int, name: str, major: int, minor: int,
           owner: tuple[int, int, int] = (0, 0, 0o666)) -> bool:
    """mknodat(dirfd, name) with the owner and mode of `owner` (uid, gid, mode) unless an
    entry exists; whether a node was made."""
    try:
        os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        return False
    except FileNotFoundError:
        pass
    uid, gid, mode = owner
    mask = os.umask(0)  # the driver's mode, exactly (the hook's umask is 022)
    try:
        os.mknod(name, stat.S_IFCHR | mode, os.makedev(major, minor), dir_fd=dirfd)
        if (uid, gid) != (0, 0):
            os.chown(name, uid, gid, dir_fd=dirfd, follow_symlinks=False)
    except FileExistsError:
        return False
    except OSError as err:
        log.warning("load-kmods: mknod /dev/%s (c %d:%d): %s", name, major, minor, err.strerror)
        return False
    finally:
        os.umask(mask)
    return True


def ensure_gpu_nodes(root: str, proc_root: str, minors: list[int]) -> list[str]:
    """Create the missing /dev/nvidia<minor> nodes (the driver's major, as nvidia-modprobe
    -c does) of GPUs the driver lists, by the params' rules; their paths."""
    modify, uid, gid, mode = device_file_params(proc_root)
    major = read_majors(proc_root).get("nvidia-frontend")
    if not modify or major is None:
        return []
    try:
        dev = _open_dir(os.path.join(root, "dev"))
    except OSError as err:
        log.warning("load-kmods: open %s/dev: %s", root.rstrip("/"), err.strerror)
        return []
    try:
        return [f"/dev/nvidia{m}" for m in minors[:MAX_GPU_NODES] if 0 <= m < 255
                and _mknod(dev, f"nvidia{m}", major, m, (uid, gid, mode))]
    finally:
        os.close(dev)


MAX_GPU_NODES = 256
