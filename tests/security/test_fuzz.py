"""Hostile input (security.md §4 item 1): property tests with hypothesis on everything the hook
parses from outside - the OCI state, the spec (config.json), the container env (NVIDIA_*,
device ids, requirements, IMEX channels), config.toml and ld.so.cache - through the real
functions, plus subprocess runs of `nvhook prestart --dry-run` with random state and spec.

Oracle: the function returns a value or raises the package's root error (NvhookError or
NvmountError) with a one-line message; never another exception, never a hang (each input
runs under a SIGALRM bound). The number of inputs per target is printed (`-s`); CI runs
`CI_EXAMPLES` per target, NVHOOK_LONG=1 runs `LONG_EXAMPLES` (see README.md).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nvhook.errors import NvhookError
from nvmount.errors import NvmountError
from tests._compat import tomllib
from tests.security.conftest import LONG

CI_EXAMPLES = 150
LONG_EXAMPLES = 5000
EXAMPLES = LONG_EXAMPLES if LONG else CI_EXAMPLES
SUBPROCESS_RUNS = 1000 if LONG else 120
PER_INPUT_S = 5
FUZZ_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                         suppress_health_check=list(HealthCheck))
COUNTS: dict[str, int] = {}


@contextmanager
def bounded(seconds: int = PER_INPUT_S) -> Iterator[None]:
    """Fail (instead of hanging) when one input takes longer than `seconds`."""
    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"input took more than {seconds}s")
    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def survive(name: str, fn: Callable[[], object]) -> None:
    """Run `fn`: a value or an NvhookError/NvmountError with a message; count the input.
    (Messages may quote a hostile value with a newline in it: the CLI escapes \n and \r
    when it prints the one line, which the subprocess test checks.)"""
    COUNTS[name] = COUNTS.get(name, 0) + 1
    with bounded():
        try:
            fn()
        except (NvhookError, NvmountError) as err:
            assert str(err).strip(), f"{type(err).__name__} without a message"


# ---- strategies ------------------------------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70) \
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40)
json_values = st.recursive(json_scalars, lambda kids: st.lists(kids, max_size=5)
                           | st.dictionaries(st.text(max_size=12), kids, max_size=5),
                           max_leaves=20)
pid_values = st.integers(min_value=-2**64, max_value=2**64) | json_scalars
env_names = st.sampled_from([
    "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_REQUIRE_CUDA",
    "NVIDIA_REQUIRE_ARCH", "NVIDIA_DISABLE_REQUIRE", "NVIDIA_MIG_CONFIG_DEVICES",
    "NVIDIA_MIG_MONITOR_DEVICES", "NVIDIA_IMEX_CHANNELS", "CUDA_VERSION", "NVIDIA_GDRCOPY",
    "NVIDIA_NVSWITCH", "NVIDIA_GDS", "NVIDIA_MOFED", "NVIDIA_REQUIRE_BRAND",
]) | st.text(min_size=1, max_size=10)
env_values = st.text(max_size=60) | st.sampled_from([
    "all", "none", "void", "", "0", "0,1", "GPU-", "MIG-GPU-x/0/0", "0:0", "00000000:07:00.0",
    "utility,compute", "compute,foo", "cuda>=12.0 brand=tesla", "cuda>=99", "arch=8.0",
    "driver>=550 driver<551", "1048576", "-1", "0x10", "all,0", " 0 ", "0,,1", "a" * 5000,
])
env_lists = st.lists(st.tuples(env_names, env_values).map(lambda kv: f"{kv[0]}={kv[1]}")
                     | st.text(max_size=30), max_size=8)
capabilities = st.none() | st.lists(st.sampled_from(["CAP_SYS_ADMIN", "CAP_KILL", "x"]),
                                    max_size=3) | st.dictionaries(
    st.sampled_from(["bounding", "effective", "Bounding", "x"]),
    st.lists(st.sampled_from(["CAP_SYS_ADMIN", "CAP_NET_ADMIN"]), max_size=2) | json_scalars,
    max_size=3)


@st.composite
def specs(draw: st.DrawFn) -> Any:
    """config.json documents: mostly well-shaped with hostile values, sometimes garbage."""
    if draw(st.integers(0, 9)) == 0:
        return draw(json_values)
    def usually(good: Any, bad: st.SearchStrategy[Any]) -> Any:
        return good if draw(st.integers(0, 4)) else draw(bad)

    doc: dict[str, Any] = {}
    doc[draw(st.sampled_from(["ociVersion", "OCIVERSION", "ociversion"]))] = usually(
        "1.0.2-dev", st.sampled_from(["1.1.0", "0.1", "2.0.0", "", "x"]) | json_scalars)
    env = [f"NVIDIA_VISIBLE_DEVICES={usually('0', env_values)}", *draw(env_lists)]
    process: dict[str, Any] = {"env": usually(env, json_values)}
    if draw(st.booleans()):
        process["capabilities"] = draw(capabilities)
    doc[draw(st.sampled_from(["process", "Process"]))] = (
        process if draw(st.integers(0, 5)) else draw(json_values))
    doc["root"] = usually({"path": "rootfs"}, st.fixed_dictionaries({"path": st.sampled_from(
        ["rootfs", "/", "../../..", "", "/nonexistent", "\x00", "rootfs/../.."])
        | json_scalars}) | json_values)
    if not draw(st.integers(0, 3)):
        doc["mounts"] = draw(st.lists(st.fixed_dictionaries(
            {"source": st.sampled_from(["/dev/null", "/x"]) | json_scalars,
             "destination": st.sampled_from(["/var/run/nvidia-container-devices/0",
                                             "/var/run/nvidia-container-devices/../../x",
                                             "/var/run/nvidia-container-devices/all"])
             | json_scalars}), max_size=3) | json_values)
    return doc


# ---- the OCI state ---------------------------------------------------------------------------

def _memfd(data: bytes) -> int:
    fd = os.memfd_create("state", os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _load_state(data: bytes) -> None:
    from nvhook.hook.oci import load_state

    fd = _memfd(data)
    try:
        load_state(fd)
    finally:
        os.close(fd)


def test_state_parser() -> None:
    @FUZZ_SETTINGS
    @given(st.binary(max_size=2000) | st.fixed_dictionaries(
        {"pid": pid_values, "bundle": json_scalars}, optional={"ociVersion": json_scalars,
                                                              "bundlePath": json_scalars}
    ).map(lambda d: json.dumps(d).encode()) | json_values.map(lambda v: json.dumps(v).encode())
           | st.integers(1, 3000).map(lambda n: b"[" * n))
    def run(data: bytes) -> None:
        survive("state", lambda: _load_state(data))
    run()
    print(f"\nstate: {COUNTS['state']} inputs")


# ---- the spec, and the request derived from it -----------------------------------------------

def test_spec_and_request(tmp_path: Path) -> None:
    from nvhook.config.model import config_from_document
    from nvhook.hook.oci import load_spec
    from nvhook.hook.request import derive_request

    configs = [config_from_document({}, None), config_from_document(
        {"accept-nvidia-visible-devices-envvar-when-unprivileged": False,
         "accept-nvidia-visible-devices-as-volume-mounts": True}, "/x.toml")]
    bundle = tmp_path / "bundle"
    bundle.mkdir()

    def one(doc: Any, raw: bool) -> None:
        data = doc if raw else json.dumps(doc).encode()
        (bundle / "config.json").write_bytes(data)
        spec = load_spec(str(bundle))
        for config in configs:
            derive_request(spec, config)

    @FUZZ_SETTINGS
    @given(specs() | st.binary(max_size=500), st.booleans())
    def run(doc: Any, raw: bool) -> None:
        raw = isinstance(doc, bytes)
        survive("spec", lambda: one(doc, raw))
    run()
    print(f"\nspec + request: {COUNTS['spec']} inputs")


# ---- env values deep into the engine: device ids, requirements, IMEX channels ----------------

@pytest.fixture(scope="module")
def inventory(sim_mig_root: Any) -> Any:
    from nvmount.discover.driver import discover_driver

    return discover_driver(sim_mig_root.path, "/etc/ld.so.cache", sim_mig_root.proc_root)


@pytest.mark.root
def test_env_values_in_the_engine(inventory: Any) -> None:
    from nvhook.hook.mount import imex_channel
    from nvmount.plan.requirements import Facts, check_requirements
    from nvmount.plan.selection import select_devices

    facts = [Facts(cuda="12.4", driver="550.54.15", arch="8.0", brand="Tesla")]

    @FUZZ_SETTINGS
    @given(env_values, st.none() | env_values, env_values, env_values)
    def run(devices: str, mig: str | None, requirement: str, channel: str) -> None:
        survive("env", lambda: select_devices(inventory.gpus, devices, mig_config=mig,
                                              mig_monitor=mig))
        survive("env", lambda: check_requirements([requirement], facts))
        survive("env", lambda: imex_channel(channel))
    run()
    print(f"\nenv values (device ids, requirements, IMEX channels): {COUNTS['env']} inputs")


# ---- config.toml -----------------------------------------------------------------------------

CONFIG_KEYS = [
    "nvidia-container-cli.root", "nvidia-container-cli.ldconfig", "nvidia-container-cli.ldcache",
    "nvidia-container-cli.no-cgroups", "nvidia-container-cli.debug", "nvidia-container-cli.user",
    "nvidia-container-cli.environment", "nvidia-container-runtime.mode",
    "nvidia-container-runtime.modes.legacy.cuda-compat-mode", "supported-driver-capabilities",
    "accept-nvidia-visible-devices-envvar-when-unprivileged", "features.allow-ldconfig-from-"
    "container", "nvhook.proc-root", "nvhook.timing-log", "nvhook.ldconfig-required",
    "disable-require", "swarm-resource", "nvidia-container-runtime.runtimes",
]
toml_values = st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(max_size=30) \
    | st.sampled_from(["@/sbin/ldconfig", "/sbin/ldconfig", "@", "all", "compute,foo", "mount",
                       "relative/path", "/dev/stdout"]) | st.lists(st.text(max_size=8),
                                                                     max_size=3)


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for dotted, value in flat.items():
        node = doc
        *parents, leaf = dotted.split(".")
        for p in parents:
            nxt = node.setdefault(p, {})
            if not isinstance(nxt, dict):
                break
            node = nxt
        else:
            node[leaf] = value
    return doc


def test_config_toml(tmp_path: Path) -> None:
    from nvhook.config.load import load_config
    from nvhook.config.model import config_from_document

    path = tmp_path / "config.toml"

    def from_text(text: str) -> None:
        path.write_text(text, errors="surrogateescape")
        load_config(str(path), {})

    @FUZZ_SETTINGS
    @given(st.dictionaries(st.sampled_from(CONFIG_KEYS), toml_values, max_size=6),
           st.text(max_size=300))
    def run(flat: dict[str, Any], text: str) -> None:
        survive("config", lambda: config_from_document(_nest(flat), str(path)))
        survive("config", lambda: from_text(text))
        survive("config", lambda: from_text("\n".join(
            f"{k} = {json.dumps(v)}" for k, v in flat.items())))
    run()
    print(f"\nconfig.toml: {COUNTS['config']} inputs")
    assert tomllib  # the documents above are TOML: dotted keys and JSON scalars


# ---- ld.so.cache -----------------------------------------------------------------------------

@pytest.mark.root
def test_ldcache_parser(sim_root: Any) -> None:
    from nvmount.discover.ldcache import parse_ldcache

    seeds = [Path(sim_root.path, "etc/ld.so.cache").read_bytes()]
    if os.path.exists("/etc/ld.so.cache"):
        seeds.append(Path("/etc/ld.so.cache").read_bytes()[:200_000])

    @FUZZ_SETTINGS
    @given(st.sampled_from(range(len(seeds))), st.lists(st.tuples(
        st.integers(0, 200_000), st.integers(0, 255)), max_size=20),
        st.integers(0, 200_000) | st.none(), st.binary(max_size=400),
        st.sampled_from([(), ("libcuda.so",), ("libnvidia-ml.so.1",)]))
    def run(seed: int, flips: list[tuple[int, int]], cut: int | None, raw: bytes,
            prefixes: tuple[str, ...]) -> None:
        data = bytearray(seeds[seed])
        for pos, value in flips:
            if data:
                data[pos % len(data)] = value
        if cut is not None:
            data = data[:cut]
        survive("ldcache", lambda: parse_ldcache(bytes(data), "/fuzz/ld.so.cache",
                                                 prefixes=prefixes))
        survive("ldcache", lambda: parse_ldcache(raw, "/fuzz/raw", prefixes=prefixes))
        survive("ldcache", lambda: parse_ldcache(b"glibc-ld.so.cache1.1" + raw, "/fuzz/new"))
    run()
    print(f"\nld.so.cache: {COUNTS['ldcache']} inputs")


# ---- the whole hook as a process -------------------------------------------------------------

@pytest.mark.root
def test_prestart_dry_run_subprocess(sim_root: Any, tmp_path: Path) -> None:
    """`nvhook prestart --dry-run` with random state and spec: exit 0 or 1, one stderr line."""
    from nvhook.dev.demo.driver import nvhook_command

    bundle = tmp_path / "bundle"
    (bundle / "rootfs/proc").mkdir(parents=True)
    seen = {0: 0, 1: 0}
    kinds: dict[str, int] = {}

    good_state = {"pid": 0, "bundle": str(bundle)}

    @settings(max_examples=SUBPROCESS_RUNS, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(specs(), st.integers(0, 4), st.fixed_dictionaries(
        {"pid": st.just(0) | pid_values, "bundle": st.just(str(bundle)) | json_scalars}))
    def run(spec: Any, pick: int, hostile_state: dict[str, Any]) -> None:
        state = hostile_state if pick == 0 else good_state
        (bundle / "config.json").write_text(json.dumps(spec))
        proc = subprocess.run(
            [*nvhook_command(), "--config", sim_root.config_path, "prestart", "--dry-run"],
            input=json.dumps(state), capture_output=True, text=True, timeout=30, check=False,
            cwd=bundle)
        assert proc.returncode in (0, 1), (proc.returncode, proc.stderr)
        err = proc.stderr.strip()
        assert "Traceback" not in err and "internal error" not in err, err
        if proc.returncode == 1:
            assert err and "\n" not in err, err
            kinds[err.split(":")[0][:50]] = kinds.get(err.split(":")[0][:50], 0) + 1
        seen[proc.returncode] += 1
    run()
    print(f"\nprestart --dry-run: {sum(seen.values())} runs (exit 0: {seen[0]}, "
          f"exit 1: {seen[1]}); errors: {sorted(kinds.items(), key=lambda kv: -kv[1])[:8]}")


# ---- very long and very large values into every parser (issue 8, classes 4 and 5) ------------

huge_numbers = (st.integers(1, 20_000).map(lambda n: "9" * n)
                | st.integers(min_value=10**18, max_value=10**600).map(str)
                | st.text(alphabet="0123456789", min_size=11, max_size=6000))
long_texts = (st.integers(300, 60_000).map(lambda n: "a" * n)
              | st.text(min_size=300, max_size=8000))
long_values = huge_numbers | long_texts | st.builds(
    lambda fmt, n: fmt.format(n=n),
    st.sampled_from(["cuda>={n}", "driver>={n}.{n}", "{n}.{n}", "0:{n}", "{n}:0", "GPU-{n}",
                     "MIG-{n}", "brand={n}", "arch=8.{n}", "v{n}", "{n}.0.0-rc{n}",
                     "{n},{n},{n}", "libcuda.so.{n}", "include {n}\n/{n}\n", "0x{n}:00:00"]),
    huge_numbers)
LONG_BUDGET_S = 2  # per input: bounded work, whatever the length


def survive_bounded(name: str, fn: Callable[[], object]) -> None:
    """`survive`, within LONG_BUDGET_S, and an error message that quotes at most a part of a
    hostile value (a clear line, not the value)."""
    COUNTS[name] = COUNTS.get(name, 0) + 1
    with bounded(LONG_BUDGET_S):
        try:
            fn()
        except (NvhookError, NvmountError) as err:
            assert str(err).strip() and len(str(err)) < 2000, str(err)[:300]


def test_long_and_large_values_in_the_hook_parsers(tmp_path: Path) -> None:
    """The state's pid, the spec's env (device ids, requirements, CUDA_VERSION, IMEX channels,
    MIG lists), semver, config.toml numbers, ld.so.conf text, fault specs."""
    from nvhook.config.load import load_config
    from nvhook.config.model import config_from_document
    from nvhook.hook import semver
    from nvhook.hook.mount import imex_channel
    from nvhook.hook.oci import Spec
    from nvhook.hook.request import derive_request
    from nvmount.faults import Faults
    from nvmount.ldcache.ldconf import parse_conf

    config = config_from_document({}, None)
    toml = tmp_path / "config.toml"
    names = ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_REQUIRE_CUDA", "NVIDIA_REQUIRE_X", "CUDA_VERSION",
             "NVIDIA_IMEX_CHANNELS", "NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"]

    @FUZZ_SETTINGS
    @given(long_values, st.sampled_from(names), st.booleans())
    def run(value: str, name: str, privileged: bool) -> None:
        caps = {"bounding": ["CAP_SYS_ADMIN"]} if privileged else None
        spec = Spec("/x/config.json", "1.0.2", ("NVIDIA_VISIBLE_DEVICES=0", f"{name}={value}"),
                    caps, "rootfs", ())
        survive_bounded("long", lambda: derive_request(spec, config))
        survive_bounded("long", lambda: _load_state(b'{"pid": %s, "bundle": "/b"}'
                                                  % value.encode(errors="replace")))
        survive_bounded("long", lambda: _wrap_value_error(lambda: semver.parse_major_minor(value)))
        survive_bounded("long", lambda: semver.compare("v" + value, "v1.0.0"))
        survive_bounded("long", lambda: imex_channel(value))
        survive_bounded("long", lambda: parse_conf(value))
        survive_bounded("long", lambda: Faults.parse(f"mount:{value}"))
        toml.write_text(f"[nvhook]\nproc-root = {value}\n", errors="surrogateescape")
        survive_bounded("long", lambda: load_config(str(toml), {}))
    run()
    print(f"\nlong and large values (hook parsers): {COUNTS['long']} inputs")


def _wrap_value_error(fn: Callable[[], object]) -> None:
    """parse_major_minor reports with ValueError (the toolkit's texts); the request wraps it."""
    try:
        fn()
    except ValueError as err:
        assert len(str(err)) < 200, str(err)[:300]


@pytest.mark.root
def test_long_and_large_values_in_the_engine_parsers(inventory: Any) -> None:
    """Device selection, requirements (parse, compare, check), IMEX channels, compat lib
    versions: bounded work and a clear error for any length."""
    from nvmount.capabilities import DriverCapability
    from nvmount.plan.mounts import compat_dirs
    from nvmount.plan.requirements import Facts, check_requirements, compare_versions
    from nvmount.plan.selection import select_devices
    from nvmount.plan.types import ContainerLayout, PlanOptions

    facts = [Facts(cuda="12.4", driver="550.54.15", arch="8.0", brand="Tesla")] * 64

    @FUZZ_SETTINGS
    @given(long_values, long_values)
    def run(value: str, other: str) -> None:
        survive_bounded("engine-long", lambda: select_devices(inventory.gpus, value,
                                                            mig_config=other))
        survive_bounded("engine-long", lambda: check_requirements([value, other], facts))
        digits = "".join(c for c in value if c.isdigit())[:20_000] or "0"
        survive_bounded("engine-long", lambda: compare_versions(digits, "1." + digits))
        layout = ContainerLayout("/usr/bin", "/usr/lib64", "/usr/lib32",
                                 (f"/usr/local/cuda/compat/libcuda.so.{value[:240]}",))
        survive_bounded("engine-long", lambda: compat_dirs(
            inventory, DriverCapability.all(), layout, PlanOptions()))
    run()
    print(f"\nlong and large values (engine parsers): {COUNTS['engine-long']} inputs")
