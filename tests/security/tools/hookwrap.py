#!/usr/bin/python3 -I
"""Wrap nvhook's prestart hook to see the container before and after it (test tool).

    hookwrap.py REPORT KILL HOOK [ARGS...]      (OCI prestart hook: the state on stdin)

Snapshots the container as the hook sees it - the container namespace's mountinfo, every
entry of the rootfs (through /proc/<pid>/root, /proc and /sys left out), the ld.so.cache
digest and the container's devices.list - then runs HOOK with the same state on stdin
(KILL a number >= 0: SIGKILL the container init that many seconds after the hook started;
KILL "at-sleep": as soon as the hook logs that it sleeps at a fault point, NVHOOK_FAULT_SLEEP;
"a container that dies mid-way"), snapshots again and writes REPORT (JSON). Exits with the
hook's code and passes its stderr through, so runc behaves as with the bare hook.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any


def rootfs_of(state: dict[str, Any]) -> str:
    with open(os.path.join(state["bundle"], "config.json")) as f:
        root = str(json.load(f)["root"]["path"])
    return root if os.path.isabs(root) else os.path.join(state["bundle"], root)


def listing(top: str) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(top):
        if dirpath == top:
            dirnames[:] = [d for d in dirnames if d not in ("proc", "sys")]
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            out.append(f"{path[len(top):]} {st.st_mode:o} {st.st_uid}:{st.st_gid}")
    return sorted(out)


def devices_dir(pid: int) -> str | None:
    """The container's v1 devices cgroup dir (read once, while the init is alive: a dead
    init shows the root cgroup)."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            for line in f:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                if "devices" in ctrls.split(","):
                    return f"/sys/fs/cgroup/devices{path}"
    except OSError:
        pass
    return None


def devices_list(directory: str | None) -> list[str] | None:
    try:
        with open(f"{directory}/devices.list") as d:
            return sorted(d.read().splitlines())
    except (OSError, TypeError):
        return None


def snapshot(pid: int, rootfs: str, cgroup: str | None) -> dict[str, Any]:
    view = f"/proc/{pid}/root{rootfs}"
    try:
        with open(f"/proc/{pid}/mountinfo") as f:
            mounts: list[str] | None = sorted(f.read().splitlines())
    except OSError:
        mounts, view = None, rootfs  # the init is gone: the rootfs through its host path
    cache: str | None
    try:
        with open(os.path.join(view, "etc/ld.so.cache"), "rb") as f:
            cache = hashlib.sha256(f.read()).hexdigest()
    except OSError:
        cache = None
    return {"mountinfo": mounts, "files": listing(view), "ldcache": cache,
            "devices": devices_list(cgroup), "host_files": listing(rootfs)}


def main() -> None:
    report, kill, hook = sys.argv[1], sys.argv[2], sys.argv[3:]
    kill_after = -1.0 if kill == "at-sleep" else float(kill)
    data = sys.stdin.buffer.read()
    state = json.loads(data)
    pid, rootfs = state["pid"], rootfs_of(state)
    cgroup = devices_dir(pid)
    before = snapshot(pid, rootfs, cgroup)
    started = time.monotonic()
    proc = subprocess.Popen(hook, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stderr is not None
    killed: float | None = None
    if kill == "at-sleep":
        proc.stdin.write(data)
        proc.stdin.close()
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if killed is None and b"sleeping " in line and b" at step " in line:
                os.kill(pid, signal.SIGKILL)
                killed = time.monotonic() - started
        stderr = b"".join(lines)
        proc.wait()
    elif kill_after >= 0:
        try:
            proc.stdin.write(data)
            proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            proc.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            os.kill(pid, signal.SIGKILL)
            killed = time.monotonic() - started
        stderr = proc.stderr.read()
        proc.wait()
    else:
        _, stderr = proc.communicate(data)
    elapsed = time.monotonic() - started
    after = snapshot(pid, rootfs, cgroup)
    with open(report, "w") as f:
        json.dump({"rc": proc.returncode, "stderr": stderr.decode(errors="replace"),
                   "before": before, "after": after, "killed_at": killed,
                   "seconds": elapsed}, f)
    sys.stderr.buffer.write(stderr)
    sys.exit(proc.returncode)


main()
