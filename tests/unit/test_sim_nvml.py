"""The fake NVML and CUDA libraries against third-party callers: pynvml (nvidia-ml-py) and
plain ctypes. Each probe runs in a subprocess: pynvml keeps its library in a module global,
and every root's library has the same SONAME."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nvhook.dev.sim import SimRoot, SimSpec
from tests._compat import zip_strict
from tests.fixtures.sim import SimRootFactory

pytestmark = pytest.mark.root

PYNVML_PROBE = textwrap.dedent("""
    import ctypes, json, sys
    import pynvml
    # pynvml dlopen()s "libnvidia-ml.so.1": preloading the simulated one by path makes that
    # name resolve to it (the loader matches already-loaded objects by SONAME).
    ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
    pynvml.nvmlInit()
    out = {"driver": pynvml.nvmlSystemGetDriverVersion(),
           "cuda": pynvml.nvmlSystemGetCudaDriverVersion(),
           "nvml": pynvml.nvmlSystemGetNVMLVersion(), "gpus": []}
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        pci = pynvml.nvmlDeviceGetPciInfo(h)
        gpu = {"name": pynvml.nvmlDeviceGetName(h), "uuid": pynvml.nvmlDeviceGetUUID(h),
               "bus_id": pci.busId, "bus_id_legacy": pci.busIdLegacy,
               "domain": pci.domain, "bus": pci.bus, "device": pci.device,
               "pci_device_id": pci.pciDeviceId,
               "memory": pynvml.nvmlDeviceGetMemoryInfo(h).total,
               "memory_v2": pynvml.nvmlDeviceGetMemoryInfo(h, pynvml.nvmlMemory_v2).total,
               "minor": pynvml.nvmlDeviceGetMinorNumber(h),
               "index": pynvml.nvmlDeviceGetIndex(h),
               "cc": list(pynvml.nvmlDeviceGetCudaComputeCapability(h)),
               "brand": pynvml.nvmlDeviceGetBrand(h),
               "arch": pynvml.nvmlDeviceGetArchitecture(h),
               "by_uuid": pynvml.nvmlDeviceGetIndex(
                   pynvml.nvmlDeviceGetHandleByUUID(pynvml.nvmlDeviceGetUUID(h))),
               "by_pci": pynvml.nvmlDeviceGetIndex(
                   pynvml.nvmlDeviceGetHandleByPciBusId(pci.busIdLegacy)),
               "temperature": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
               "power": pynvml.nvmlDeviceGetPowerUsage(h),
               "utilization": pynvml.nvmlDeviceGetUtilizationRates(h).gpu,
               "persistence": pynvml.nvmlDeviceGetPersistenceMode(h),
               "mig": []}
        try:
            gpu["mig_mode"] = pynvml.nvmlDeviceGetMigMode(h)
        except pynvml.NVMLError_NotSupported:
            gpu["mig_mode"] = None
        if gpu["mig_mode"] and gpu["mig_mode"][0]:
            for j in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(h)):
                try:
                    m = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
                except pynvml.NVMLError_NotFound:
                    break
                parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m)
                by_uuid = pynvml.nvmlDeviceGetHandleByUUID(pynvml.nvmlDeviceGetUUID(m))
                gpu["mig"].append({
                    "uuid": pynvml.nvmlDeviceGetUUID(m),
                    "gi": pynvml.nvmlDeviceGetGpuInstanceId(m),
                    "ci": pynvml.nvmlDeviceGetComputeInstanceId(m),
                    "name": pynvml.nvmlDeviceGetName(m),
                    "memory": pynvml.nvmlDeviceGetMemoryInfo(m).total,
                    "is_mig": int(pynvml.nvmlDeviceIsMigDeviceHandle(m).value),
                    "parent": pynvml.nvmlDeviceGetIndex(parent),
                    "uuid_roundtrip": pynvml.nvmlDeviceGetUUID(by_uuid),
                })
        out["gpus"].append(gpu)
    errors = {}
    for name, call in [("index", lambda: pynvml.nvmlDeviceGetHandleByIndex(64)),
                       ("uuid", lambda: pynvml.nvmlDeviceGetHandleByUUID("GPU-nope")),
                       ("name", lambda: pynvml.nvmlDeviceGetName(
                           pynvml.nvmlDeviceGetHandleByIndex(0)))]:
        try:
            call()
        except pynvml.NVMLError as err:
            errors[name] = [err.value, str(err)]
    out["errors"] = errors
    pynvml.nvmlShutdown()
    try:
        pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as err:
        out["after_shutdown"] = err.value
    print(json.dumps(out))
""")

CUDA_PROBE = textwrap.dedent("""
    import ctypes, json, sys
    cuda = ctypes.CDLL(sys.argv[1])
    version, count, cc_major, cc_minor = (ctypes.c_int() for _ in range(4))
    name = ctypes.create_string_buffer(96)
    out = {"version_rc": cuda.cuDriverGetVersion(ctypes.byref(version))}
    out["count_before_init"] = cuda.cuDeviceGetCount(ctypes.byref(count))
    out["init"] = cuda.cuInit(0)
    out["count_rc"] = cuda.cuDeviceGetCount(ctypes.byref(count))
    cuda.cuDeviceGetName(name, 96, 0)
    cuda.cuDeviceGetAttribute(ctypes.byref(cc_major), 75, 0)
    cuda.cuDeviceGetAttribute(ctypes.byref(cc_minor), 76, 0)
    text = ctypes.c_char_p()
    cuda.cuGetErrorString(100, ctypes.byref(text))
    out.update(version=version.value, count=count.value, name=name.value.decode(),
               cc=[cc_major.value, cc_minor.value], no_device=text.value.decode())
    print(json.dumps(out))
""")


def probe(script: str, library: str, env: dict[str, str] | None = None) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", script, library], capture_output=True,
                         text=True, env={"PATH": "/usr/bin:/bin", **(env or {})}, check=False)
    assert out.returncode == 0, out.stderr
    result: dict[str, object] = json.loads(out.stdout)
    return result


@pytest.mark.parametrize("count", [1, 8, 64], ids=lambda n: f"{n}-gpus")
def test_pynvml_lists_the_gpus(sim_root_factory: SimRootFactory, count: int) -> None:
    sim = sim_root_factory(SimSpec(gpus=count, ipc=True))
    out = probe(PYNVML_PROBE, sim.nvml_path)
    assert (out["driver"], out["cuda"], out["nvml"]) == ("550.54.15", 12040, "12.550.54.15")
    gpus = out["gpus"]
    assert isinstance(gpus, list)
    assert len(gpus) == count
    for gpu, want in zip_strict(gpus, sim.gpus):
        domain, bus = int(want.bus_id[:8], 16), int(want.bus_id[9:11], 16)
        assert gpu["name"] == want.model
        assert gpu["uuid"] == want.uuid
        assert gpu["bus_id"] == want.nvml_bus_id
        assert gpu["bus_id_legacy"] == want.nvml_bus_id[4:]
        assert (gpu["domain"], gpu["bus"], gpu["device"]) == (domain, bus, 0)
        assert gpu["pci_device_id"] == (want.pci_device_id << 16) | 0x10DE
        assert gpu["memory"] == gpu["memory_v2"] == want.memory_mib << 20
        assert (gpu["minor"], gpu["index"]) == (want.minor, want.index)
        assert gpu["by_uuid"] == gpu["by_pci"] == want.index
        assert gpu["cc"] == [int(x) for x in want.architecture.split(".")]
        assert (gpu["brand"], gpu["arch"]) == (want.brand_code, want.arch_code)
        assert gpu["mig_mode"] == [0, 0]
        assert gpu["persistence"] == 1 and gpu["utilization"] == 0
    assert out["errors"] == {"index": [2, "Invalid Argument"], "uuid": [6, "Not Found"]}
    assert out["after_shutdown"] == 1


def test_pynvml_enumerates_mig_devices(sim_mig_root: SimRoot) -> None:
    out = probe(PYNVML_PROBE, sim_mig_root.nvml_path)
    gpus = out["gpus"]
    assert isinstance(gpus, list)
    assert [g["mig_mode"] for g in gpus] == [[1, 1], [1, 1], [1, 1]] + [[0, 0]] * 5
    for gpu, want in zip_strict(gpus, sim_mig_root.gpus):
        assert [(m["uuid"], m["gi"], m["ci"]) for m in gpu["mig"]] == [
            (m.uuid, m.gi, m.ci) for m in want.mig_devices]
        for mig, wanted in zip_strict(gpu["mig"], want.mig_devices):
            assert mig["name"] == f"{want.model} MIG {wanted.profile}"
            assert mig["memory"] == wanted.memory_mib << 20
            assert mig["is_mig"] == 1 and mig["parent"] == want.index
            assert mig["uuid_roundtrip"] == wanted.uuid
    assert len(gpus[1]["mig"]) == 7


@pytest.mark.parametrize(
    ("fail", "expected"),
    [("nvmlDeviceGetName:3", [3, "Not Supported"]),
     ("nvmlDeviceGetName:GPU_IS_LOST", [15, "GPU is lost"])],
    ids=["number", "name"],
)
def test_nvsim_fail_reaches_pynvml(sim_root: SimRoot, fail: str, expected: list[object]) -> None:
    out = probe(PYNVML_PROBE.replace('"name": pynvml.nvmlDeviceGetName(h), ', ""),
                sim_root.nvml_path, env={"NVSIM_FAIL": fail})
    errors = out["errors"]
    assert isinstance(errors, dict)
    assert errors["name"] == expected


def test_fake_cuda(sim_root: SimRoot) -> None:
    out = probe(CUDA_PROBE, f"{sim_root.lib_dir}/libcuda.so.1")
    assert out == {
        "version_rc": 0, "version": 12040, "count_before_init": 3, "init": 0, "count_rc": 0,
        "count": 8, "name": "NVIDIA A100-SXM4-80GB", "cc": [8, 0],
        "no_device": "no CUDA-capable device is detected",
    }


def test_fake_cuda_without_a_driver(sim_root: SimRoot) -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).cuInit(0))",
         f"{sim_root.lib_dir}/libcuda.so.1"],
        capture_output=True, text=True, check=True,
        env={"NVSIM_ROOT": "/nonexistent", "PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.strip() == "100"


def test_nvsim_fail_reaches_cuda(sim_root: SimRoot) -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).cuInit(0))",
         f"{sim_root.lib_dir}/libcuda.so.1"],
        capture_output=True, text=True, check=True,
        env={"NVSIM_FAIL": "cuInit:CUDA_ERROR_UNKNOWN", "PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.strip() == "999"


PROBE32 = r"""
#include <dlfcn.h>
#include <stdio.h>
int main(void) {
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    int (*init)(void), (*count)(unsigned *), (*handle)(unsigned, void **);
    int (*uuid)(void *, char *, unsigned);
    unsigned n = 0, i;
    char text[96];
    void *h;
    if (lib == NULL) { printf("dlopen: %s\n", dlerror()); return 1; }
    *(void **)&init = dlsym(lib, "nvmlInit_v2");
    *(void **)&count = dlsym(lib, "nvmlDeviceGetCount_v2");
    *(void **)&handle = dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    *(void **)&uuid = dlsym(lib, "nvmlDeviceGetUUID");
    if (init() != 0 || count(&n) != 0) return 2;
    for (i = 0; i < n; ++i) {
        if (handle(i, &h) != 0 || uuid(h, text, sizeof(text)) != 0) return 3;
        printf("%s\n", text);
    }
    return 0;
}
"""


def test_32bit_nvml_finds_the_same_gpus(sim_root: SimRoot, tmp_path: Path) -> None:
    if not sim_root.lib32_dir:
        pytest.skip("no 32-bit libraries (gcc-multilib missing)")
    (tmp_path / "probe32.c").write_text(PROBE32)
    subprocess.run(["gcc", "-m32", str(tmp_path / "probe32.c"), "-o", str(tmp_path / "probe32"),
                    "-ldl"], check=True)
    out = subprocess.run([str(tmp_path / "probe32")], capture_output=True, text=True,
                         check=False, env={"LD_LIBRARY_PATH": sim_root.lib32_dir})
    assert out.returncode == 0, out.stdout
    assert out.stdout.split() == [g.uuid for g in sim_root.gpus]


INIT_PROBE = """
import ctypes, sys, time
nvml = ctypes.CDLL(sys.argv[1])
start = time.monotonic()
rc = nvml.nvmlInit_v2()
took = time.monotonic() - start
dev, mode = ctypes.c_void_p(), ctypes.c_uint(9)
nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev))
nvml.nvmlDeviceGetPersistenceMode(dev, ctypes.byref(mode))
again = time.monotonic()
nvml.nvmlInit_v2()  # the process's GPUs are initialised: no second wait
print(rc, round(took, 3), mode.value, round(time.monotonic() - again, 3))
"""


@pytest.mark.parametrize("delay_ms", [0, 150], ids=["persistence-mode", "no-persistence"])
def test_nvml_init_delay_models_a_gpu_without_persistence_mode(
        sim_root_factory: SimRootFactory, delay_ms: int) -> None:
    """`nvhook sim create --nvml-init-delay MS`: each process's first nvmlInit waits MS per
    GPU (the bench's slow-NVML scenario), and the GPUs report persistence mode off."""
    sim = sim_root_factory(SimSpec(gpus=2, nvml_init_delay_ms=delay_ms))
    out = subprocess.run([sys.executable, "-c", INIT_PROBE, sim.nvml_path], capture_output=True,
                         text=True, check=True, env=sim.env()).stdout.split()
    rc, took, mode, again = int(out[0]), float(out[1]), int(out[2]), float(out[3])
    assert rc == 0
    assert mode == (0 if delay_ms else 1)
    assert took >= 2 * delay_ms / 1000  # per GPU
    assert took < 2 * delay_ms / 1000 + 0.1
    assert again < 0.05
