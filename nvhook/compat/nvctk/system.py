"""`nvidia-ctk system create-dev-char-symlinks | create-device-nodes` (NVIDIA 1.20's flags).

create-dev-char-symlinks: a `/dev/char/MAJOR:MINOR` link for each NVIDIA device node (systemd
resolves device cgroup rules through /dev/char: without the links, `systemctl daemon-reload`
takes GPUs from running containers). The nodes are `DRIVER_ROOT/dev/nvidia*` and
`DRIVER_ROOT/dev/nvidia-caps/nvidia-*` (not nvidia-fs*, nvidia-nvswitch*, nvidia-nvlink*), as
the flag's help says (1.20.0 searches /dev whatever --driver-root says); with `--create-all`
every node the driver could have, from /proc/devices majors, the GPUs in
/proc/driver/nvidia/gpus (their real minors, not their index) and the MIG capabilities of
/proc/driver/nvidia-caps/mig-minors, optionally after loading the modules and creating the
control nodes (nvhook's load-kmods: `nvmount.apply.host_nodes`). An existing link is a warning.

create-device-nodes: `--control-devices` creates the missing nvidiactl, nvidia-modeset,
nvidia-uvm and nvidia-uvm-tools nodes in DEV_ROOT/dev (the driver's params decide owner and
mode, `ModifyDeviceFiles: 0` creates nothing); `--load-kernel-modules` loads nvidia and
nvidia-uvm with the host's modprobe. `--dry-run` says what would be done.
"""

from __future__ import annotations

import glob
import os
import stat

from nvhook.compat.urfave import BOOL, CliError, Flag, parse_command

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvhook.compat.nvctk.context import Context

BLOCKED = ("nvidia-fs", "nvidia-nvswitch", "nvidia-nvlink")
SYMLINK_FLAGS = (
    Flag("dev-char-path", default="/dev/char", env=("DEV_CHAR_PATH",),
         help="where the MAJOR:MINOR links are created"),
    Flag("driver-root", default="/", env=("NVIDIA_DRIVER_ROOT", "DRIVER_ROOT"),
         help="DRIVER_ROOT/dev is searched for NVIDIA device nodes"),
    Flag("create-all", BOOL, env=("CREATE_ALL",), help="every possible node, not only those "
         "that exist"),
    Flag("load-kernel-modules", BOOL, env=("LOAD_KERNEL_MODULES",),
         help="load the NVIDIA kernel modules first (with --create-all)"),
    Flag("create-device-nodes", BOOL, env=("CREATE_DEVICE_NODES",),
         help="create the missing control nodes first (with --create-all)"),
    Flag("dry-run", BOOL, env=("DRY_RUN",), help="create nothing, say what would be created"),
)
NODES_FLAGS = (
    Flag("root", aliases=("driver-root",), default="/",
         env=("ROOT", "NVIDIA_DRIVER_ROOT", "DRIVER_ROOT"), help="the driver root"),
    Flag("dev-root", env=("NVIDIA_DEV_ROOT", "DEV_ROOT"),
         help="where /dev is (default: the root)"),
    Flag("control-devices", BOOL, help="create nvidiactl, nvidia-modeset, nvidia-uvm, "
         "nvidia-uvm-tools"),
    Flag("load-kernel-modules", BOOL, help="load the NVIDIA kernel modules first"),
    Flag("dry-run", BOOL, env=("DRY_RUN",), help="do nothing, say what would be done"),
)
SUBCOMMANDS = [("create-dev-char-symlinks", "A utility to create symlinks to possible /dev/nv* "
                "devices in /dev/char"),
               ("create-device-nodes", "A utility to create NVIDIA device nodes")]


def main(argv: list[str], ctx: Context) -> int:
    from nvhook.compat.nvctk.context import COMMANDS, PROG

    name = argv[0] if argv and not argv[0].startswith("-") else ""
    if name == SUBCOMMANDS[0][0]:
        p = parse_command(argv[1:], SYMLINK_FLAGS, command=f"{PROG} system {name}",
                          summary=SUBCOMMANDS[0][1], environ=ctx.environ)
        return 0 if p is None else dev_char_symlinks(ctx, p.values)
    if name == SUBCOMMANDS[1][0]:
        p = parse_command(argv[1:], NODES_FLAGS, command=f"{PROG} system {name}",
                          summary=SUBCOMMANDS[1][1], environ=ctx.environ)
        return 0 if p is None else device_nodes(ctx, p.values)
    if name:
        raise CliError(f"{PROG} system: no command {name!r} (one of: "
                       f"{', '.join(n for n, _ in SUBCOMMANDS)})")
    parse_command(argv, (), command=f"{PROG} system", summary=COMMANDS["system"],
                  environ=ctx.environ, subcommands=SUBCOMMANDS)
    return 0


def dev_char_symlinks(ctx: Context, v: dict[str, object]) -> int:
    root, dry = ctx.path(str(v["driver-root"])), bool(v["dry-run"])
    create_all = bool(v["create-all"])
    for flag in ("load-kernel-modules", "create-device-nodes"):
        if v[flag] and not create_all:
            ctx.log.warning(f"{flag} is only applicable when create-all is set; ignoring")
    proc_root = ctx.hook_config().nvhook.proc_root or "/proc"
    if create_all:
        _prepare(ctx, root, proc_root, bool(v["load-kernel-modules"]),
                 bool(v["create-device-nodes"]), dry)
        nodes = possible_nodes(root, proc_root)
    else:
        nodes = existing_nodes(root)
    if not nodes:
        ctx.log.info(f"No NVIDIA devices found in {root}")
        return 0
    directory = ctx.path(str(v["dev-char-path"]))
    if not dry:
        os.makedirs(directory, mode=0o755, exist_ok=True)
    for path, major, minor in nodes:
        link = os.path.join(directory, f"{major}:{minor}")
        ctx.log.info(f"Creating link {link} => {path}")
        if dry:
            continue
        try:
            os.symlink(path, link)
        except OSError as err:
            ctx.log.warning(f"Could not create symlink: symlink {path} {link}: {err.strerror}")
    return 0


def existing_nodes(root: str) -> list[tuple[str, int, int]]:
    """(path, major, minor) of the NVIDIA character devices in ROOT/dev (links followed)."""
    found = []
    dev = os.path.join(root, "dev")
    for path in sorted(glob.glob(f"{dev}/nvidia*") + glob.glob(f"{dev}/nvidia-caps/nvidia-*")):
        if os.path.basename(path).startswith(BLOCKED):
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode):
            found.append((path, os.major(st.st_rdev), os.minor(st.st_rdev)))
    return found


def possible_nodes(root: str, proc_root: str) -> list[tuple[str, int, int]]:
    """Every node the loaded driver could have (see the module doc)."""
    from nvmount.api import read_char_majors, read_mig_minors

    majors = read_char_majors(proc_root)
    gpu, uvm, caps = (majors.get(n) for n in ("nvidia-frontend", "nvidia-uvm", "nvidia-caps"))
    gpu = gpu if gpu is not None else majors.get("nvidia")
    for name, major in (("nvidia-frontend", gpu), ("nvidia-uvm", uvm)):
        if major is None:
            raise CliError(f"failed to create symlink creator: missing required device major "
                           f"{name} (in {proc_root}/devices: load the NVIDIA modules)")
    dev = os.path.join(root, "dev")
    nodes = [(f"{dev}/nvidia-modeset", gpu, 254), (f"{dev}/nvidiactl", gpu, 255),
             (f"{dev}/nvidia-uvm", uvm, 0), (f"{dev}/nvidia-uvm-tools", uvm, 1)]
    nodes += [(f"{dev}/nvidia{m}", gpu, m) for m in _gpu_minors(proc_root)]
    if caps is not None:
        nodes += [(f"{dev}/nvidia-caps/nvidia-cap{minor}", caps, minor)
                  for _, minor in read_mig_minors(proc_root)]
    return [(p, int(ma), mi) for p, ma, mi in nodes if ma is not None]


def _gpu_minors(proc_root: str) -> list[int]:
    minors = []
    for info in sorted(glob.glob(os.path.join(proc_root, "driver/nvidia/gpus/*/information"))):
        try:
            with open(info, encoding="ascii", errors="replace") as stream:
                text = stream.read(1 << 16)
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Device Minor" and value.strip().isdigit():
                minors.append(int(value.strip()))
    return sorted(set(minors))


def _prepare(ctx: Context, root: str, proc_root: str, modules: bool, nodes: bool,
             dry: bool) -> None:
    from nvmount.api import host_nodes

    if modules:
        ctx.log.info("Loading NVIDIA kernel modules" + (" (dry run)" if dry else ""))
        if not dry:
            host_nodes.load_modules(root, proc_root)
    if nodes:
        missing = [name for name, _, _ in host_nodes.CONTROL
                   if not os.path.lexists(os.path.join(root, "dev", name))]
        ctx.log.info(f"Creating control device nodes at {root}: {', '.join(missing) or 'none'}"
                     + (" (dry run)" if dry else ""))
        if not dry:
            host_nodes.ensure_nodes(root, proc_root)


def device_nodes(ctx: Context, v: dict[str, object]) -> int:
    root = ctx.path(str(v["root"]))
    dev_root = ctx.path(str(v["dev-root"])) if v["dev-root"] else root
    proc_root = ctx.hook_config().nvhook.proc_root or "/proc"
    dry = bool(v["dry-run"])
    if v["load-kernel-modules"]:
        ctx.log.info("Loading NVIDIA kernel modules" + (" (dry run)" if dry else ""))
        if not dry:
            from nvmount.api import host_nodes

            host_nodes.load_modules(root, proc_root)
    if v["control-devices"]:
        _prepare(ctx, dev_root, proc_root, False, True, dry)
    return 0
