"""What a gpucheck container saw, and whether that is right (pure: text in, verdicts out).

`nvprobe` prints `node PATH open|absent|<strerror>`, `proc-gpu BUSID`, `nvml-init RC`,
`nvml-count N`, `nvml-gpu I minor=M uuid=U name=N` and `nvml-load error ...`. A granted node
opens (a real driver) or fails with ENXIO/ENODEV (the simulated driver has no kernel module
behind its majors); a node the container was not given is absent or denied (EPERM, the device
cgroup).
"""

from __future__ import annotations

from pathlib import Path

ALLOWED = ("open", "No such device or address", "No such device")
DENIED = ("absent", "Operation not permitted")


def parse_probe(stdout: str) -> dict[str, object]:
    nodes: dict[str, str] = {}
    gpus: list[dict[str, str]] = []
    seen: dict[str, object] = {"nodes": nodes, "gpus": gpus, "proc_gpus": [], "done": False}
    for line in stdout.splitlines():
        key, _, rest = line.partition(" ")
        if key == "node":
            path, _, state = rest.partition(" ")
            nodes[path] = state
        elif key == "nvml-gpu":
            fields = dict(f.split("=", 1) for f in rest.split(" ")[1:] if "=" in f)
            fields["name"] = rest.split("name=", 1)[1] if "name=" in rest else ""
            gpus.append(fields)
        elif key == "proc-gpu":
            seen["proc_gpus"].append(rest)  # type: ignore[attr-defined]
        elif key in ("nvml-init", "nvml-count", "nvml-load"):
            seen[key] = rest
        elif key == "probe-done":
            seen["done"] = True
    return seen


def expected_gpu0(driver_root: Path) -> dict[str, object]:
    return {"gpus": 1, "driver_root": str(driver_root)}


def judge(
    name: str, rc: int, seen: dict[str, object], expect: dict[str, object], stderr: str
) -> list[str]:
    """The problems of one path's first container (an empty list: it passed)."""
    if rc != 0 or not seen["done"]:
        tail = " | ".join(stderr.strip().splitlines()[-3:])
        return [f"the container failed (exit {rc}): {tail}"]
    nodes: dict[str, str] = seen["nodes"]  # type: ignore[assignment]
    gpu_nodes = {p: s for p, s in nodes.items() if p[len("/dev/nvidia") :].isdigit()}
    if name.startswith("runc, no GPU"):
        given = [p for p, s in nodes.items() if s not in DENIED]
        return [f"a container without GPUs has {', '.join(given)}"] if given else []
    problems = []
    gpus: list[dict[str, str]] = seen["gpus"]  # type: ignore[assignment]
    if len(gpus) != expect["gpus"]:
        problems.append(
            f"NVML sees {len(gpus)} GPUs, expected {expect['gpus']} "
            f"(init {seen.get('nvml-init')}, load {seen.get('nvml-load', 'ok')})"
        )
    minor = gpus[0].get("minor") if gpus else None
    mine = f"/dev/nvidia{minor}"
    if minor is not None and gpu_nodes.get(mine) not in ALLOWED:
        problems.append(f"{mine} (GPU 0) does not open: {gpu_nodes.get(mine, 'absent')}")
    for path, state in gpu_nodes.items():
        if path != mine and state not in DENIED:
            problems.append(f"{path} (not granted) is {state}, expected absent or denied")
    if nodes.get("/dev/nvidiactl") not in ALLOWED:
        problems.append(f"/dev/nvidiactl: {nodes.get('/dev/nvidiactl', 'absent')}")
    return problems


def summary(results: dict[str, dict[str, object]], *, simulated: bool, runs: int) -> str:
    lines = [
        f"# gpucheck: {'simulated driver' if simulated else 'real GPU'}, {runs} timed "
        "rounds (interleaved; wall time of the whole start, median)",
        "",
        "| path | result | added ms (wall) | added ms (CPU) | median s | min-max s | GPU seen |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, res in results.items():
        seen = res.get("seen") or {}
        gpus = seen.get("gpus") or [] if isinstance(seen, dict) else []
        gpu = f"{gpus[0].get('name', '?')} {gpus[0].get('uuid', '')}" if gpus else "-"
        problems = res["problems"]
        verdict = "pass" if not problems else "FAIL: " + "; ".join(problems)  # type: ignore[arg-type]
        lines.append(
            f"| {name} | {verdict} | {res['added_ms']} | {res['added_cpu_ms']} | "
            f"{res['median_s']:.3f} | "
            f"{res['min_s']:.3f}-{res['max_s']:.3f} | {gpu} |"
        )
    return "\n".join(lines) + "\n"
