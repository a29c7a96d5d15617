"""The end-to-end benchmark's pure parts (bench/engines*.py): `--node`, the node's library
check, the report's client columns and its today's-engines summary. The benchmark itself is
never timed in tests; these use made-up figures."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests._compat import tomllib

BENCH = Path(__file__).resolve().parent.parent.parent / "bench"


def bench(name: str) -> ModuleType:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module(name)


def series(row: str, client: str, wall: list[float], cpu: list[float],
           failures: int = 0) -> dict[str, Any]:
    return {"row": row, "client": client, "wall_ms": wall, "cpu_ms": cpu, "failures": failures,
            "error": "boom" if failures else ""}


def results(*extra: dict[str, Any], scenarios: tuple[str, ...] = ("main",)) -> dict[str, Any]:
    base = [series("main | no GPU | runc (base)", c, [100.0, 110.0, 120.0], [50.0])
            for c in ("docker", "ctr")]
    base.append(series("main | no GPU | runc (base)", "docker-B", [200.0], [60.0]))
    return {"runs": 3, "setup": {"modes": ["auto"], "scenarios": list(scenarios)},
            "host": {"date": "2026-12-08 00:20:00", "kernel": "6.18", "cpus": 2,
                     "engines": "Debian sid node (pivot_root): Docker version 28.5.2",
                     "load_start": 1.0, "load_end": 2.0},
            "series": [*base, *extra]}


def test_node_option() -> None:
    engines = bench("engines")
    assert engines.parse_args([]).node == "host"
    assert engines.parse_args(["--node", "sid", "-n", "3"]).node == "sid"
    with pytest.raises(SystemExit):
        engines.parse_args(["--node", "bookworm"])


def test_missing_libraries() -> None:
    node = bench("engines_node")
    ldd = ("\tlinux-vdso.so.1 (0x00007ffd)\n"
           "\tlibnvidia-container.so.1 => /opt/peer/inst/lib/libnvidia-container.so.1 (0x1)\n"
           "\tlibtirpc.so.3 => not found\n\tlibelf.so.1 =>  not found\n"
           "\t/lib64/ld-linux-x86-64.so.2 (0x7f)\n")
    assert node.missing_libraries(ldd) == ["libtirpc.so.3", "libelf.so.1"]
    assert node.missing_libraries("\tnot a dynamic executable\n") == []


def test_node_summary() -> None:
    node = bench("engines_node")
    found = {"runc": "runc version 1.3.6", "docker": "Docker version 28.5.2",
             "containerd": "containerd 2.1.9", "podman": "?"}
    assert node.node_summary("sid", found) == ("Debian sid node (pivot_root): runc version "
                                               "1.3.6, Docker version 28.5.2, containerd 2.1.9")
    assert node.node_summary("host", {}).startswith("this host (Debian 12)")


def test_clients_shows_podman_only_when_the_run_has_it() -> None:
    report = bench("engines_report")
    plain = results()
    assert [c for c, _ in report.clients(plain)] == ["docker", "ctr"]
    assert report.table(plain)[1] == "|---" * 9 + "|"
    with_podman = results(series("main | no GPU | runc (base)", "podman", [300.0], [200.0]))
    assert [c for c, _ in report.clients(with_podman)] == ["docker", "ctr", "podman"]
    assert report.table(with_podman)[1] == "|---" * 12 + "|"


def test_summary_rows_and_ratios() -> None:
    report = bench("engines_report")
    run = results(
        series("main | GPU 0 | nvhook auto", "docker", [180.0, 190.0, 200.0], [130.0]),
        series("main | GPU 0 | NVIDIA 1.17.8 legacy", "docker", [190.0], [100.0]),
        series("main | GPU 0 | NVIDIA 1.20.0 jit-cdi", "docker", [270.0], [90.0]),
        series("main | GPU 0 | nvhook auto", "ctr", [150.0], [70.0], failures=1),
        series("main | GPU 0 | --gpus, nvhook hook", "docker", [150.0], [80.0]),
        series("main | GPU 0 | --gpus, NVIDIA 1.17.8 hook", "docker-B", [250.0], [100.0]),
        series("main | no GPU | runc (base)", "podman", [300.0], [200.0]),
        series("main | GPU 0 | CDI, nvhook spec", "podman", [340.0], [230.0]),
        series("main | GPU 0 | CDI, NVIDIA 1.20.0 spec", "podman", [380.0], [260.0]))
    lines = report.summary(run)
    assert lines[0].startswith("| engine | containers | nvhook auto | nvhook legacy |")
    body = [line.split(" | ") for line in lines[2:]]
    assert [(r[0].lstrip("| "), r[1]) for r in body] == [
        ("`docker run --runtime`", "GPU 0"), ("`ctr run --runc-binary`", "GPU 0"),
        ("`docker run --gpus` (hook only)", "GPU 0"), ("`podman run --device` (CDI)", "GPU 0")]
    docker = body[0]
    # auto +80 / 80, legacy column absent, 1.17.8 +80 / 50, 1.20 +160 / 40
    assert docker[2:6] == ["+80 / 80", "-", "+80 / 50", "+160 / 40"]
    assert docker[6:] == ["1.00 (1.60)", "0.50 (2.00) |"]
    assert body[1][2] == "+40 / 20 (1 failed)"
    gpus = body[2]  # NVIDIA's hook runs on its own daemon: its own base (200 ms)
    assert gpus[2:6] == ["+40 / 30", "-", "+50 / 40", "-"]
    assert gpus[6] == "0.80 (0.75)"
    cdi = body[3]  # nvhook's spec in the auto column, NVIDIA 1.20.0's in the jit-cdi one
    assert cdi[2:6] == ["+40 / 30", "-", "-", "+80 / 60"] and cdi[7] == "0.50 (0.50) |"


def test_markdown_names_the_node_and_reads_older_results() -> None:
    report = bench("engines_report")
    text = report.markdown(results())
    assert "Debian sid node (pivot_root): Docker version 28.5.2; load average 1.0" in text
    assert "Summary (docs/performance.md" in text
    old = results()
    del old["host"]["engines"]
    old["host"].update(docker="Docker version 20.10.24", containerd="containerd 1.6.20",
                       runc="runc version 1.1.5")
    assert "Docker version 20.10.24, containerd 1.6.20, runc version 1.1.5;" in \
        report.markdown(old)


def test_probe_says_what_each_row_must_get() -> None:
    engines = bench("engines")
    assert engines.probe("main | no GPU | nvhook auto") == "! test -e /dev/nvidia0"
    gpu0 = engines.probe("slow-nvml | GPU 0 | NVIDIA 1.17.8 legacy")
    assert "test -e /dev/nvidia0 && ! test -e /dev/nvidia1" in gpu0 and engines.LIB in gpu0
    assert "test -e /dev/nvidia7" in engines.probe("main | all 8 GPUs | --gpus, nvhook hook")


def test_a_failed_check_is_in_the_cell_and_listed() -> None:
    report = bench("engines_report")
    bad = series("main | GPU 0 | nvhook auto", "docker", [180.0], [130.0])
    bad["check"] = "`test -e /dev/nvidia0` failed"
    run = results(bad)
    assert "+70 / 80 (check failed)" in report.summary(run)[2]
    assert "- main | GPU 0 | nvhook auto (docker): `test -e /dev/nvidia0` failed" in \
        report.markdown(run)


def test_packages_for_missing_libraries() -> None:
    node = bench("engines_node")
    assert node.packages_for(["libtirpc.so.3", "libelf.so.1", "libunknown.so.9"]) == [
        "libelf1t64", "libtirpc3t64"]
    assert node.packages_for([]) == []


def test_cri_handler_toml() -> None:
    cri = bench("engines_cri")
    doc = tomllib.loads(cri.handler_toml("nvhook-auto-main", Path("/tmp/nvb-x/runtime")))
    table = doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    assert table == {"nvhook-auto-main": {"runtime_type": "io.containerd.runc.v2",
                                          "options": {"BinaryName": "/tmp/nvb-x/runtime"}}}
    plain = tomllib.loads(cri.handler_toml("runc", None))
    assert plain["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"] == {
        "runc": {"runtime_type": "io.containerd.runc.v2"}}


def test_podman_series_binds_its_spec_dir_in_its_own_mount_namespace() -> None:
    cdi = bench("engines_cdi")

    class Client:
        enter = ("/usr/bin/nsenter", "--target=1", "--mount", "--")
        cgroup_parent = "nvhook-podman-x"

        def command(self, *args: str) -> tuple[list[str], dict[str, str]]:
            return ["/usr/bin/podman", *args], {"PATH": "/usr/bin"}

    class Group:
        path = Path("/sys/fs/cgroup/cpuacct/nvhook-podman-x")

    s = cdi.podman_series(Client(), Group(), "main | GPU 0 | CDI, nvhook spec",
                          Path("/tmp/nvb-w/cdi-nvhook"), "nvidia.com/gpu=0", "img")
    argv = s.argv()
    assert argv[:4] == list(Client.enter) and argv[4:7] == ["/usr/bin/unshare", "--mount",
                                                            "--propagation"]
    script = argv.index("-c") + 1
    assert argv[script] == cdi.IN_GROUP_WITH_SPECS
    assert argv[script + 1:script + 3] == [str(Group.path / "cgroup.procs"),
                                           "/tmp/nvb-w/cdi-nvhook"]
    assert argv[script + 3:] == ["/usr/bin/podman", "run", "--rm", "--cgroup-parent",
                                 "/nvhook-podman-x", "--device", "nvidia.com/gpu=0", "img",
                                 "/bin/true"]
    assert s.grouped and s.client == "podman"
