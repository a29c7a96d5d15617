"""The attack fixtures of security.md §2 as data: how to build each malicious container and
what nvhook must do with it. `test_escapes.py` starts each one under runc and checks the
oracles; this module only builds (rootfs mutations, attacker prestart steps, env, config).

A builder gets the rig (config variants, temp dir) and the host oracle (random marker paths
that must never appear) and returns a `Scenario`:

- `expect`: START (the container must start, the attack contained), REFUSE (the hook must
  fail closed with one line containing `needles`), EITHER (both are safe outcomes; the
  test records which one happened), RUNTIME_REFUSES (runc fails before any hook) or
  HOOK_PASSES (nvhook succeeds, contained; runc fails afterwards for its own reasons);
- `script`: extra shell run in the container after the probe (container-side checks print
  `@@name` sections that `check` reads);
- `bundle`: keyword arguments for `AttackRig.bundle` (mutate, env, before, config, flavor...).
"""

from __future__ import annotations

import enum
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.security.fixtures import (
    LIB,
    AttackRig,
    HostOracle,
    Mutator,
    Outcome,
    compile_poc,
    flatten_usr,
    make_special,
    plant,
    replace_with_symlink,
    symlinks,
)


class Expect(enum.Enum):
    START = "start"
    REFUSE = "refuse"
    EITHER = "either"
    RUNTIME_REFUSES = "runtime"  # runc itself refuses before any hook runs
    HOOK_PASSES = "hook"  # nvhook succeeds (contained); runc may fail later on its own


@dataclass
class Scenario:
    expect: Expect
    bundle: dict[str, Any] = field(default_factory=dict)
    needles: tuple[str, ...] = ()
    script: str = ""
    check: Callable[[Outcome], None] | None = None
    limit_s: float | None = None  # start time bound, if not START_LIMIT_S


Builder = Callable[[AttackRig, HostOracle], Scenario]
CASES: dict[str, Builder] = {}


def case(name: str) -> Callable[[Builder], Builder]:
    def register(fn: Builder) -> Builder:
        assert name not in CASES, name
        CASES[name] = fn
        return fn
    return register


def chain(*mutators: Mutator) -> Mutator:
    def mutate(rootfs: Path) -> None:
        for m in mutators:
            m(rootfs)
    return mutate


def sees(path: str) -> Callable[[Outcome], None]:
    """Check: the container sees `path` (the probe printed `@@sees` then `ok`)."""
    def check(out: Outcome) -> None:
        assert out.sections.get("sees") == ["ok"], f"{path} not visible\n{out.describe()}"
    return check


def see_script(path: str) -> str:
    return f"; echo @@sees; [ -e {path} ] && echo ok || echo missing"


# ---- F1 absolute symlinks on mount-target directories (CVE-2024-0133, CVE-2024-0134) --------

@case("F1-CVE-2024-0133-lib-dir-abs-link")
def f1_lib_dir(rig: AttackRig, o: HostOracle) -> Scenario:
    mark = o.marker("/tmp", "HOST_LIB")
    return Scenario(Expect.START, {"mutate": symlinks((LIB, mark))},
                    script=see_script(f"{LIB}/libcuda.so.1"), check=sees("libcuda.so.1"))


@case("F1-CVE-2024-0133-lib64-abs-link")
def f1_lib64(rig: AttackRig, o: HostOracle) -> Scenario:
    from nvhook.demo.rootfs import RootfsFlavor

    mark = o.marker("/tmp", "HOST_LIB64")

    def mutate(rootfs: Path) -> None:
        # keep libc reachable for nothing: busybox is static; the loader path is moved aside
        shutil.move(str(rootfs / "usr/lib64"), str(rootfs / "usr/lib64.orig"))
        os.symlink(mark, rootfs / "usr/lib64")

    return Scenario(Expect.START, {"mutate": mutate, "flavor": RootfsFlavor.NON_DEBIAN},
                    script=see_script("/usr/lib64/libcuda.so.1"), check=sees("libcuda"))


@case("F1-CVE-2024-0133-all-target-dirs-abs-links")
def f1_all_dirs(rig: AttackRig, o: HostOracle) -> Scenario:
    links = [("/usr/bin", o.marker("/tmp", "HOSTMARK_bin")),
             (LIB, o.marker("/tmp", "HOSTMARK_lib")),
             ("/lib/firmware/nvidia", o.marker("/tmp", "HOSTMARK_fw")),
             ("/run/nvidia-persistenced", o.marker("/tmp", "HOSTMARK_persist")),
             ("/usr/share/nvidia", o.marker("/tmp", "HOSTMARK_share"))]
    return Scenario(Expect.START, {"mutate": chain(flatten_usr, symlinks(*links)),
                                   "caps": "all"},
                    script=see_script("/usr/bin/nvidia-smi"), check=sees("nvidia-smi"))


# ---- F2 dot-dot escapes ---------------------------------------------------------------------

@case("F2-CVE-2024-0134-lib-dir-relative-dotdot")
def f2_rel(rig: AttackRig, o: HostOracle) -> Scenario:
    mark = o.marker("/tmp", "HOST_LIB")
    return Scenario(Expect.START, {"mutate": symlinks((LIB, "../../../../../../.." + mark))},
                    script=see_script(f"{LIB}/libcuda.so.1"), check=sees("libcuda"))


@case("F2-CVE-2024-0134-lib-dir-abs-dotdot")
def f2_abs(rig: AttackRig, o: HostOracle) -> Scenario:
    mark = o.marker("/tmp", "HOST_LIB")
    return Scenario(Expect.START, {"mutate": symlinks((LIB, "/../../..//" + mark.lstrip("/")))},
                    script=see_script(f"{LIB}/libcuda.so.1"), check=sees("libcuda"))


@case("F2-T-FW-firmware-dir-dotdot")
def f2_firmware(rig: AttackRig, o: HostOracle) -> Scenario:
    mark = o.marker("/tmp", "HOST_FW")
    link = ("/usr/lib/firmware/nvidia/550.54.15", "/../../../../../../../.." + mark)
    return Scenario(Expect.START, {"mutate": symlinks(link)})


@case("F2-rootfs-prefix-sibling")
def f2_prefix(rig: AttackRig, o: HostOracle) -> Scenario:
    """rootfs-evil next to rootfs: a string-prefix check would accept it."""
    def mutate(rootfs: Path) -> None:
        evil = rootfs.parent / "rootfs-evil"
        evil.mkdir()
        o.markers.append(str(evil / "lib"))
        replace_with_symlink(rootfs, LIB, "../../../../rootfs-evil/lib")
    return Scenario(Expect.START, {"mutate": mutate})


# ---- F3 links to / ------------------------------------------------------------------------------

@case("F3-usr-is-link-to-root")
def f3_usr(rig: AttackRig, o: HostOracle) -> Scenario:
    return Scenario(Expect.START, {"mutate": chain(flatten_usr, symlinks(("/usr", "/")))},
                    script=see_script(f"{LIB}/libcuda.so.1"), check=sees("libcuda"))


@case("F3-lib-is-link-to-root")
def f3_lib(rig: AttackRig, o: HostOracle) -> Scenario:
    return Scenario(Expect.START, {"mutate": symlinks(("/lib", "/"))})


@case("F3-etc-is-link-to-root")
def f3_etc(rig: AttackRig, o: HostOracle) -> Scenario:
    def mutate(rootfs: Path) -> None:
        for entry in (rootfs / "etc").iterdir():
            shutil.move(str(entry), str(rootfs / entry.name))
        (rootfs / "etc").rmdir()
        os.symlink("/", rootfs / "etc")
    return Scenario(Expect.START, {"mutate": mutate})


# ---- F4 magic links --

for _name, _target in (("proc-1-root", "/proc/1/root/usr/lib"),
                       ("proc-self-cwd", "/proc/self/cwd/.."),
                       ("proc-1-cwd", "/proc/1/cwd"),
                       ("proc-thread-self-root", "/proc/thread-self/root")):
    def _f4(rig: AttackRig, o: HostOracle, target: str = _target) -> Scenario:
        return Scenario(Expect.REFUSE, {"mutate": symlinks((LIB, target))},
                        needles=(LIB,))
    case(f"F4-magic-link-{_name}")(_f4)


# ---- F5 leaf symlinks at mount targets --

@case("F5-binary-target-links-to-etc-passwd")
def f5_smi(rig: AttackRig, o: HostOracle) -> Scenario:
    def check(out: Outcome) -> None:
        got = out.sections.get("passwd")
        want = (out.rootfs / "etc/passwd").read_text().splitlines()
        assert got == want, out.describe()
        assert out.sections.get("smi") == ["GPU 0: NVIDIA A100-SXM4-80GB"], out.describe()
    script = "; echo @@passwd; cat /etc/passwd; echo @@smi; nvidia-smi -L | cut -d' ' -f1-4"
    return Scenario(Expect.START, {"mutate": symlinks(("/usr/bin/nvidia-smi", "/etc/passwd"))},
                    script=script, check=check)


@case("F5-device-node-target-links-to-disk")
def f5_dev(rig: AttackRig, o: HostOracle) -> Scenario:
    step = plant('mknod "$ROOTFS/dev/vda" b 254 0; ln -s /dev/vda "$ROOTFS/dev/nvidiactl";'
                 'ln -s /dev/vda "$ROOTFS/dev/nvidia0"')

    def check(out: Outcome) -> None:
        nodes = out.sections.get("nodes")
        assert nodes == ["character special file c3:ff", "character special file c3:0",
                         "block special file fe:0"], out.describe()
    script = ("; echo @@nodes; for n in nvidiactl nvidia0; do "
              "echo \"character special file $(stat -c '%t:%T' /dev/$n)\"; done; "
              "echo \"block special file $(stat -c '%t:%T' /dev/vda)\"")
    return Scenario(Expect.START, {"before": (step,)}, script=script, check=check)


@case("F5-ipc-socket-links-to-host-socket")
def f5_socket(rig: AttackRig, o: HostOracle) -> Scenario:
    mark = o.marker("/tmp", "HOST_SOCK")
    return Scenario(Expect.START,
                    {"mutate": symlinks(("/run/nvidia-persistenced/socket", mark))},
                    script="; echo @@sees; [ -S /run/nvidia-persistenced/socket ] && echo ok",
                    check=sees("socket"))


# ---- F6 compat-lib sources (CVE-2024-0132) -------------------------------------------------------

_COMPAT_TOML = ('[features]\nallow-cuda-compat-libs-from-container = true\n'
                '[nvidia-container-runtime.modes.legacy]\ncuda-compat-mode = "{mode}"\n')


def _compat_0132(rootfs: Path) -> None:
    compat = rootfs / "usr/local/cuda/compat"
    compat.mkdir(parents=True)
    os.symlink("/proc/1/cwd/usr/lib/libnvidia-ml.so.1", compat / "libnvidia-smi-x.so.999")
    os.symlink("/", rootfs / "usr/lib/libnvidia-ml.so.1")
    os.symlink("/proc/1/cwd/usr/lib/libnvidia-cfg.so.1", compat / "libcuda.so.999.1")
    os.symlink("/run", rootfs / "usr/lib/libnvidia-cfg.so.1")
    (compat / "libcuda.so.999.2").mkdir()  # a directory candidate
    os.symlink("/", compat / "libnvidia-ptxjitcompiler.so.999.3")


def _no_compat_mounts(out: Outcome) -> None:
    bad = [m for m in out.sections.get("mountinfo", []) if "/usr/local/cuda" in m]
    assert not bad, "compat libraries were mounted:\n" + "\n".join(bad)


for _mode in ("mount", "ldconfig"):
    def _f6(rig: AttackRig, o: HostOracle, mode: str = _mode) -> Scenario:
        return Scenario(Expect.START, {"mutate": _compat_0132, "caps": "all",
                                       "config": rig.config(_COMPAT_TOML.format(mode=mode))},
                        check=_no_compat_mounts)
    case(f"F6-CVE-2024-0132-compat-lib-symlinks-{_mode}-mode")(_f6)


# ---- F8 ld.so.cache / ld.so.conf.d / aux-cache links (CVE-2025-23267) ----------------------------

def _f8(name: str, mutate_for: Callable[[HostOracle], Mutator]) -> None:
    def build(rig: AttackRig, o: HostOracle) -> Scenario:
        return Scenario(Expect.START, {"mutate": mutate_for(o)})
    case(f"F8-CVE-2025-23267-{name}")(build)


_f8("a-ldcache-to-proc-1-root-shadow",
    lambda o: symlinks(("/etc/ld.so.cache", "/proc/1/root/etc/shadow")))
_f8("b-ldcache-abs-dotdot-host-etc",
    lambda o: symlinks(("/etc/ld.so.cache", "/../../../.." + o.marker("/etc", "HOSTMARK"))))
_f8("c-conf-d-to-proc-1-root",
    lambda o: symlinks(("/etc/ld.so.conf.d", "/proc/1/root/etc/ld.so.conf.d")))
_f8("d-conf-d-relative-dotdot", lambda o: symlinks(("/etc/ld.so.conf.d", "../../../../etc")))
_f8("e-aux-cache-dir-to-proc-1-cwd",
    lambda o: symlinks(("/var/cache/ldconfig", "/proc/1/cwd/var/cache/ldconfig")))
_f8("e-aux-cache-dir-abs-dotdot",
    lambda o: symlinks(("/var/cache/ldconfig", "/../../.." + o.marker("/tmp", "HOST_AUX"))))
_f8("f-ld-so-conf-fifo", lambda o: lambda r: make_special(r, "/etc/ld.so.conf", "fifo"))


def _conf_d_file(rootfs: Path) -> None:
    shutil.rmtree(rootfs / "etc/ld.so.conf.d")
    (rootfs / "etc/ld.so.conf.d").write_text("x\n")


_f8("g-conf-d-regular-file", lambda o: _conf_d_file)


def _self_include(rootfs: Path) -> None:
    with open(rootfs / "etc/ld.so.conf", "a") as f:
        f.write("include /etc/ld.so.conf\n")
    (rootfs / "etc/ld.so.conf.d/loop.conf").write_text("include /etc/ld.so.conf\n")


@case("F8-h-ld-so-conf-includes-itself")
def f8_loop(rig: AttackRig, o: HostOracle) -> Scenario:
    """ldconfig loops on the include cycle until the sandbox's 10 s timeout; the start is
    delayed (the image only delays itself) but bounded, and goes on with a warning."""
    return Scenario(Expect.START, {"mutate": _self_include}, limit_s=20.0)


# ---- F9 ld.so.conf includes / conf.d outside --

@case("F9-conf-d-magic-link")
def f9_magic(rig: AttackRig, o: HostOracle) -> Scenario:
    return Scenario(Expect.START,
                    {"mutate": symlinks(("/etc/ld.so.conf.d", "/proc/self/root/etc/ld.so.conf.d"))})


@case("F9-include-through-proc-1-root")
def f9_include(rig: AttackRig, o: HostOracle) -> Scenario:
    """ld.so.conf includes a host conf (via /proc/1/root) listing a host-only lib dir."""
    host = rig.tmp / f"hostonly-{os.getpid()}"
    (host / "lib").mkdir(parents=True)
    compile_poc(host / "lib" / "libHOSTONLY.so.1", "/dev/null")
    (host / "evil.conf").write_text(f"{host}/lib\n")

    def mutate(rootfs: Path) -> None:
        with open(rootfs / "etc/ld.so.conf", "a") as f:
            f.write(f"include /proc/1/root{host}/*.conf\ninclude /proc/self/root{host}/*.conf\n")

    def check(out: Outcome) -> None:
        assert out.sections.get("hostonly") == [], out.describe()
    return Scenario(Expect.START, {"mutate": mutate},
                    script="; echo @@hostonly; ldconfig -p | grep HOSTONLY; true", check=check)


# ---- F10 image-supplied ldconfig (CVE-2024-0136, CVE-2024-0137) --

def _evil_ldconfig(o: HostOracle) -> Mutator:
    mark = o.marker("/tmp", "OWNED")

    def mutate(rootfs: Path) -> None:
        o.markers.append(str(rootfs / mark.lstrip("/")))
        script = (f"#!/bin/sh\necho owned > {mark}\ncat /dev/vda > /dev/null\n"
                  "ls /sys/class/net > /tmp/net\nexit 0\n")
        for p in ("/sbin/ldconfig", "/sbin/ldconfig.real", "/usr/sbin/ldconfig",
                  "/usr/sbin/ldconfig.real"):
            host = rootfs / p.lstrip("/")
            if host.exists() or host.is_symlink():
                host.unlink()
            host.write_text(script)
            host.chmod(0o755)
    return mutate


@case("F10-CVE-2024-0136-image-ldconfig-default-config")
def f10_default(rig: AttackRig, o: HostOracle) -> Scenario:
    return Scenario(Expect.START, {"mutate": _evil_ldconfig(o)})


@case("F10-CVE-2024-0136-container-ldconfig-configured")
def f10_configured(rig: AttackRig, o: HostOracle) -> Scenario:
    config = rig.config(replace={"[nvidia-container-cli]\n":
                                 '[nvidia-container-cli]\nldconfig = "/sbin/ldconfig"\n'})
    return Scenario(Expect.REFUSE, {"mutate": _evil_ldconfig(o), "config": config},
                    needles=("ldconfig", "/sbin/ldconfig"))


@case("F10-CVE-2024-0137-container-ldconfig-allowed-by-feature")
def f10_allowed(rig: AttackRig, o: HostOracle) -> Scenario:
    config = rig.config("[features]\nallow-ldconfig-from-container = true\n",
                        replace={"[nvidia-container-cli]\n":
                                 '[nvidia-container-cli]\nldconfig = "/sbin/ldconfig"\n'})
    return Scenario(Expect.REFUSE, {"mutate": _evil_ldconfig(o), "config": config},
                    needles=("ldconfig", "not host-relative"))


# ---- F13 /proc and /dev shenanigans --

@case("F13-CVE-2019-19921-proc-driver-links-to-host")
def f13_proc_driver(rig: AttackRig, o: HostOracle) -> Scenario:
    mark = o.marker("/tmp", "HOST_PROC")
    step = plant(f'ln -s {mark} "$ROOTFS/proc/driver/nvidia"')
    return Scenario(Expect.START, {"before": (step,)},
                    script=see_script("/proc/driver/nvidia/params"), check=sees("params"))


@case("F13-proc-is-tmpfs-not-procfs")
def f13_proc_tmpfs(rig: AttackRig, o: HostOracle) -> Scenario:
    step = plant('mount -t tmpfs -o mode=755 fakeproc "$ROOTFS/proc"; '
                 'mkdir -p "$ROOTFS/proc/driver/nvidia"; ln -s / "$ROOTFS/proc/self"')
    return Scenario(Expect.REFUSE, {"before": (step,)}, needles=("/proc", "not a procfs"))


@case("F13-CVE-2026-41579-dev-links-to-host")
def f13_dev(rig: AttackRig, o: HostOracle) -> Scenario:
    mark = o.marker("/tmp", "HOST_DEV")
    return Scenario(Expect.RUNTIME_REFUSES, {"mutate": symlinks(("/dev", mark))})


@case("F13-dev-replaced-by-link-after-runtime-setup")
def f13_dev_planted(rig: AttackRig, o: HostOracle) -> Scenario:
    mark = o.marker("/tmp", "HOST_DEV")
    step = plant(f'umount -l "$ROOTFS/dev"; rmdir "$ROOTFS/dev" || rm -rf "$ROOTFS/dev"; '
                 f'ln -s {mark} "$ROOTFS/dev"')
    return Scenario(Expect.HOOK_PASSES, {"before": (step,)})


@case("F13-CVE-2025-31133-dev-null-links-to-core-pattern")
def f13_devnull(rig: AttackRig, o: HostOracle) -> Scenario:
    step = plant('rm -f "$ROOTFS/dev/null"; '
                 'ln -s /proc/sys/kernel/core_pattern "$ROOTFS/dev/null"')

    # runc 1.1.5 itself binds the container's /dev/null over masked paths after the hooks
    # (its own CVE-2025-31133): a step after ours puts the real node back for runc
    restore = plant('rm -f "$ROOTFS/dev/null"; mknod -m 666 "$ROOTFS/dev/null" c 1 3')

    def check(out: Outcome) -> None:
        bad = [m for m in out.sections.get("mountinfo", []) if "core_pattern" in m]
        assert not bad, bad
    return Scenario(Expect.START, {"before": (step,), "after": (restore,)}, check=check)


# ---- F14 special files --

for _name, _path, _kind, _expect in (
    ("fifo-at-binary", "/usr/bin/nvidia-smi", "fifo", Expect.START),
    ("fifo-at-ld-so-conf", "/etc/ld.so.conf", "fifo", Expect.START),
    ("fifo-at-ld-so-cache", "/etc/ld.so.cache", "fifo", Expect.START),
    ("socket-at-ipc-socket", "/run/nvidia-persistenced/socket", "socket", Expect.START),
    ("block-device-at-library", f"{LIB}/libcuda.so.550.54.15", "block", Expect.START),
    ("fifo-at-library-dir", LIB, "fifo", Expect.REFUSE),
):
    def _f14(rig: AttackRig, o: HostOracle, path: str = _path, kind: str = _kind,
             expect: Expect = _expect) -> Scenario:
        return Scenario(expect, {"mutate": lambda r: make_special(r, path, kind)},
                        needles=(path, kind))
    case(f"F14-{_name}")(_f14)


# ---- F15 loops and depth --

def _loop(rootfs: Path) -> None:
    replace_with_symlink(rootfs, LIB, "/usr/lib/loop-a")
    os.symlink("loop-b", rootfs / "usr/lib/loop-a")
    os.symlink("loop-a", rootfs / "usr/lib/loop-b")


def _chain(depth: int) -> Mutator:
    def mutate(rootfs: Path) -> None:
        shutil.move(str(rootfs / LIB.lstrip("/")), str(rootfs / "usr/lib/real"))
        for i in range(depth):
            target = "real" if i == depth - 1 else f"c{i + 1}"
            os.symlink(target, rootfs / f"usr/lib/c{i}")
        os.symlink("c0", rootfs / LIB.lstrip("/"))
    return mutate


@case("F15-loop-a-b-a")
def f15_loop(rig: AttackRig, o: HostOracle) -> Scenario:
    return Scenario(Expect.REFUSE, {"mutate": _loop}, needles=(LIB,))


@case("F15-chain-41-links")
def f15_chain(rig: AttackRig, o: HostOracle) -> Scenario:
    return Scenario(Expect.REFUSE, {"mutate": _chain(41)}, needles=(LIB, "40 symlinks"))


@case("F15-chain-30-links")
def f15_chain_ok(rig: AttackRig, o: HostOracle) -> Scenario:
    return Scenario(Expect.START, {"mutate": _chain(30)},
                    script=see_script(f"{LIB}/libcuda.so.1"), check=sees("libcuda"))


@case("F15-name-too-long")
def f15_long_name(rig: AttackRig, o: HostOracle) -> Scenario:
    return Scenario(Expect.REFUSE, {"mutate": symlinks((LIB, "/" + "a" * 300))},
                    needles=("too long",))


@case("F15-4095-byte-link-target")
def f15_long_target(rig: AttackRig, o: HostOracle) -> Scenario:
    return Scenario(Expect.REFUSE, {"mutate": symlinks((LIB, ("/" + "b" * 254) * 16 + "/c"))},
                    needles=())


# ---- security.md §1b: related non-CVE issues ---------------------------------------------------

_STRICT = ("accept-nvidia-visible-devices-envvar-when-unprivileged = false\n"
           "accept-nvidia-visible-devices-as-volume-mounts = true\n")
_GPU_NODES = "; echo @@gpus; ls /dev | grep -E '^nvidia[0-9]+$'; true"


def _no_gpu_nodes(out: Outcome) -> None:
    assert out.sections.get("gpus") == [], out.describe()


@case("T-ENV-SEL-unprivileged-env-all-strict-policy")
def env_sel(rig: AttackRig, o: HostOracle) -> Scenario:
    """Image env NVIDIA_VISIBLE_DEVICES=all in an unprivileged container, strict policy."""
    return Scenario(Expect.START, {"gpus": "all", "config": rig.config(top=_STRICT)},
                    script=_GPU_NODES, check=_no_gpu_nodes)


@case("T-ENV-SEL-volume-request-not-from-dev-null")
def env_sel_volume(rig: AttackRig, o: HostOracle) -> Scenario:
    """Volume-mount device requests whose source is not /dev/null, or whose name escapes the
    directory, are ignored."""
    src = rig.tmp / "not-dev-null"
    src.write_text("")
    rig.allow(src)

    def edit(bundle_spec: dict[str, Any]) -> None:
        for dest in ("/var/run/nvidia-container-devices/all",
                     "/var/run/nvidia-container-devices/../../../x/0"):
            bundle_spec["mounts"].append({"destination": dest, "type": "bind",
                                          "source": str(src), "options": ["bind", "ro"]})
    return Scenario(Expect.START, {"gpus": "all", "config": rig.config(top=_STRICT),
                                   "edit_spec": edit}, script=_GPU_NODES, check=_no_gpu_nodes)


@case("T-ENV-SEL-volume-request-from-dev-null-positive-control")
def env_sel_control(rig: AttackRig, o: HostOracle) -> Scenario:
    """The same policy honours a proper request: /dev/null at .../nvidia-container-devices/1."""
    def edit(bundle_spec: dict[str, Any]) -> None:
        bundle_spec["mounts"].append({"destination": "/var/run/nvidia-container-devices/1",
                                      "type": "bind", "source": "/dev/null",
                                      "options": ["bind", "ro"]})

    def check(out: Outcome) -> None:
        assert out.sections.get("gpus") == ["nvidia1"], out.describe()
    return Scenario(Expect.START, {"gpus": "all", "config": rig.config(top=_STRICT),
                                   "edit_spec": edit}, script=_GPU_NODES, check=check)


@case("T-MIG-CAP-unprivileged-mig-config-all")
def mig_cap(rig: AttackRig, o: HostOracle) -> Scenario:
    return Scenario(Expect.REFUSE, {"env": ("NVIDIA_MIG_CONFIG_DEVICES=all",)},
                    needles=("MIG_CONFIG_DEVICES", "privileged"))


@case("T-MODIFY-params-private-modify-device-files-0")
def modify(rig: AttackRig, o: HostOracle) -> Scenario:
    def check(out: Outcome) -> None:
        assert "ModifyDeviceFiles: 0" in out.sections["params"], out.describe()
        line = [m for m in out.sections["mountinfo"] if " /proc/driver/nvidia " in m]
        assert line and line[0].split()[5].startswith("ro"), line
        assert not any(t.startswith("shared:") for t in line[0].split(" - ")[0].split()[6:])
    return Scenario(Expect.START, {}, script="; echo @@params; cat /proc/driver/nvidia/params",
                    check=check)
