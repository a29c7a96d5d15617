"""nvhook.hook.request / nvhook.hook.device_lists: every rule and message of hook-spec 1.5-1.14."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from nvhook.config.model import HookConfig, config_from_document
from nvhook.errors import RequestError, SpecError
from nvhook.hook import device_lists
from nvhook.hook.oci import Spec
from nvhook.hook.request import (
    MODE_ERROR,
    ContainerRequest,
    derive_request,
    is_privileged,
)
from nvmount.capabilities import DriverCapability as Cap

PRIV = {"bounding": ["CAP_SYS_ADMIN"]}
UNPRIV = {"bounding": ["CAP_CHOWN"], "effective": ["CAP_SYS_ADMIN"]}
ALL = Cap.all()
DEFAULT = Cap.COMPUTE | Cap.UTILITY
ROOT = "/var/run/nvidia-container-devices"


def conf(**settings: Any) -> HookConfig:
    """A config from dotted keys, with '_' for '-': conf(**{"features.x-y": True})."""
    doc: dict[str, Any] = {}
    for dotted, value in settings.items():
        node = doc
        *parents, leaf = dotted.replace("_", "-").split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return config_from_document(doc, "/test/config.toml")


VOLUMES = conf(accept_nvidia_visible_devices_as_volume_mounts=True)
NO_UNPRIV = conf(accept_nvidia_visible_devices_envvar_when_unprivileged=False)


def make_spec(
    env: tuple[str, ...] | list[str] = (),
    caps: Any = None,
    version: str = "1.0.2",
    mounts: tuple[tuple[str, str], ...] = (),
) -> Spec:
    return Spec("/b/config.json", version, tuple(env), caps, "rootfs", mounts)


def derive(env: Any = (), caps: Any = None, config: HookConfig | None = None,
           mounts: tuple[tuple[str, str], ...] = (), version: str = "1.0.2") -> Any:
    return derive_request(make_spec(env, caps, version, mounts), config or conf())


def devices_of(*args: Any, **kwargs: Any) -> tuple[str, ...] | None:
    request = derive(*args, **kwargs)
    return None if request is None else request.devices


def dev(*targets: str) -> tuple[tuple[str, str], ...]:
    return tuple(("/dev/null", t if t.startswith("/") else f"{ROOT}/{t}") for t in targets)


# --- 1.5 environment -------------------------------------------------------------------------

def test_env_entry_without_equals_fails_even_without_gpus() -> None:
    with pytest.raises(RequestError) as info:
        derive(["PATH=/bin", "FOO"])
    assert str(info.value).startswith("invalid environment variable: FOO")


ENV_CASES = [
    (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_VISIBLE_DEVICES=1"], ("1",)),
    (["NVIDIA_VISIBLE_DEVICES=a=b"], ("a=b",)),
    (["nvidia_visible_devices=all"], None),
    (["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES="], None),
    (["=x", "NVIDIA_VISIBLE_DEVICES=0"], ("0",)),
]
ENV_IDS = ["last-duplicate-wins", "value-with-equals", "names-case-sensitive",
           "set-empty-later-wins", "empty-name"]  # fmt: skip


@pytest.mark.parametrize(("env", "want"), ENV_CASES, ids=ENV_IDS)
def test_env_parsing(env: list[str], want: tuple[str, ...] | None) -> None:
    assert devices_of(env) == want


# --- 1.6 privileged detection ----------------------------------------------------------------

PRIVILEGED = [
    ("1.0.2", None, False),
    ("1.0.2", PRIV, True),
    ("1.0.2", UNPRIV, False),
    ("1.0.2", {"bounding": None}, False),
    ("1.0.2", {"Bounding": ["CAP_SYS_ADMIN"]}, True),
    ("1.0.2", {"bounding": [None, "CAP_SYS_ADMIN"]}, True),
    ("1.0.2", {}, False),
    ("1.0.0-rc1", ["CAP_SYS_ADMIN"], True),
    ("1.0.0-rc4", ["CAP_SYS_ADMIN"], True),
    ("1.0.0-rc2-dev", ["CAP_SYS_ADMIN"], True),
    ("1.0.0-rc10", ["CAP_SYS_ADMIN"], True),
    ("1.0.0-rc1", ["CAP_CHOWN"], False),
    ("1.0.0-rc5", PRIV, True),
    ("1.0.0", PRIV, True),
    ("1.0", PRIV, True),
    ("", PRIV, True),
    ("foo", PRIV, True),
    ("0.9.0", PRIV, True),
]  # fmt: skip
PRIV_IDS = ["no-caps", "bounding", "effective-only", "null-bounding", "key-case", "null-entry",
            "empty-object", "rc1-list", "rc4-list", "rc2-dev-list", "rc10-list-quirk",
            "rc1-list-unprivileged", "rc5-object", "1.0.0", "shorthand-1.0", "empty-version",
            "invalid-version", "below-rc1"]  # fmt: skip


@pytest.mark.parametrize(("version", "caps", "want"), PRIVILEGED, ids=PRIV_IDS)
def test_is_privileged(version: str, caps: Any, want: bool) -> None:
    assert is_privileged(make_spec(caps=caps, version=version)) is want


PRIV_ERRORS = [
    ("1.0.2", ["CAP_SYS_ADMIN"],
     "json: cannot unmarshal array into Go value of type specs.LinuxCapabilities"),
    ("1.0.0-rc5", ["CAP_SYS_ADMIN"],
     "json: cannot unmarshal array into Go value of type specs.LinuxCapabilities"),
    ("1.0.0-rc1", PRIV, "json: cannot unmarshal object into Go value of type []string"),
    ("1.0.0-rc1", ["CAP_SYS_ADMIN", 1],
     "json: cannot unmarshal number into Go value of type string"),
    ("1.0.2", "CAP_SYS_ADMIN",
     "json: cannot unmarshal string into Go value of type specs.LinuxCapabilities"),
    ("1.0.2", {"bounding": "CAP_SYS_ADMIN"},
     "json: cannot unmarshal string into Go struct field LinuxCapabilities.bounding "
     "of type []string"),
    ("1.0.2", {"bounding": [], "effective": [True]},
     "json: cannot unmarshal bool into Go struct field LinuxCapabilities.effective "
     "of type string"),
    ("1.0.2", {"ambient": {}},
     "json: cannot unmarshal object into Go struct field LinuxCapabilities.ambient "
     "of type []string"),
]  # fmt: skip
PRIV_ERROR_IDS = ["new-format-array", "rc5-array", "old-format-object", "old-format-number",
                  "string", "bounding-string", "unused-set-checked-too", "ambient-object"]


@pytest.mark.parametrize(("version", "caps", "detail"), PRIV_ERRORS, ids=PRIV_ERROR_IDS)
def test_capabilities_decode_errors_fail_every_container(
    version: str, caps: Any, detail: str
) -> None:
    with pytest.raises(SpecError) as info:
        derive([], caps=caps, version=version)  # no NVIDIA_VISIBLE_DEVICES: not a GPU container
    assert str(info.value) == (
        f"could not decode Process.Capabilities in OCI spec: {detail} (in /b/config.json)"
    )


# --- 1.8 device lists ------------------------------------------------------------------------

NVD = [
    (None, None),
    ("", None),
    ("  ", None),
    (",,", None),
    ("void", None),
    ("0,void", None),
    ("void,all", None),
    ("none", ()),
    ("0,none", ()),
    ("none,all", ()),
    ("all", ("all",)),
    ("all,none", ("all",)),
    ("0,all", ("all",)),
    ("gpu0,gpu1", ("gpu0", "gpu1")),
    (" 0 , 1 ,", ("0", "1")),
    ("0,0", ("0",)),
    ("0,1,0", ("0", "1")),
    ("GPU-8b2b5f8a-1c2d-4e5f-9a0b-123456789abc", ("GPU-8b2b5f8a-1c2d-4e5f-9a0b-123456789abc",)),
    ("MIG-GPU-abc/1/0,MIG-abc", ("MIG-GPU-abc/1/0", "MIG-abc")),
    ("0:1", ("0:1",)),
    ("ALL", ("ALL",)),
    ("\u00a0all\u00a0", ("all",)),
]  # fmt: skip
NVD_IDS = ["unset", "empty", "spaces", "only-commas", "void", "void-anywhere", "void-first",
           "none", "none-after-id", "first-none-wins", "all", "first-all-wins", "all-after-id",
           "ids", "trimmed", "dup-deduped", "dup-deduped-order", "uuid", "mig", "mig-index",
           "uppercase-all-is-an-id", "unicode-space-trimmed"]  # fmt: skip


@pytest.mark.parametrize(("value", "want"), NVD, ids=NVD_IDS)
def test_visible_devices(value: str | None, want: tuple[str, ...] | None) -> None:
    env = [] if value is None else [f"NVIDIA_VISIBLE_DEVICES={value}"]
    assert devices_of(env) == want
    assert devices_of(env, caps=PRIV) == want


SWARM = conf(swarm_resource="DOCKER_RESOURCE_GPU")
SWARM2 = conf(swarm_resource=" A, B ,")
SWARM_CASES = [
    (SWARM, ["DOCKER_RESOURCE_GPU=0", "NVIDIA_VISIBLE_DEVICES=1"], ("0",)),
    (SWARM, ["DOCKER_RESOURCE_GPU=", "NVIDIA_VISIBLE_DEVICES=all"], None),
    (SWARM, ["NVIDIA_VISIBLE_DEVICES=1"], ("1",)),
    (SWARM2, ["A=0", "B=1,2", "NVIDIA_VISIBLE_DEVICES=all"], ("0", "1", "2")),
    (SWARM2, ["B=1"], ("1",)),
    (SWARM2, ["B=void", "A=0"], None),
    (SWARM2, ["A=none", "B=1"], ()),
    (conf(swarm_resource=" "), ["NVIDIA_VISIBLE_DEVICES=0"], ("0",)),
    (SWARM, ["DOCKER_RESOURCE_GPU=", "CUDA_VERSION=9.0"], None),
    (SWARM, ["CUDA_VERSION=9.0"], ("all",)),
]  # fmt: skip
SWARM_IDS = ["swarm-wins", "set-empty-hides-nvd", "unset-falls-back", "concatenated",
             "only-one-set", "void", "none", "blank-config", "legacy-but-swarm-set",
             "legacy-nothing-set"]  # fmt: skip


@pytest.mark.parametrize(("config", "env", "want"), SWARM_CASES, ids=SWARM_IDS)
def test_swarm_resource(config: HookConfig, env: list[str], want: Any) -> None:
    assert devices_of(env, config=config) == want


UNPRIVILEGED = [
    (NO_UNPRIV, None, ["NVIDIA_VISIBLE_DEVICES=all"], None, True),
    (NO_UNPRIV, PRIV, ["NVIDIA_VISIBLE_DEVICES=all"], ("all",), False),
    (NO_UNPRIV, UNPRIV, ["NVIDIA_VISIBLE_DEVICES=none"], None, True),
    (NO_UNPRIV, None, ["NVIDIA_VISIBLE_DEVICES=void"], None, False),
    (conf(accept_nvidia_visible_devices_envvar_when_unprivileged=False, swarm_resource="S"),
     None, ["S=0"], None, True),
    (conf(), None, ["NVIDIA_VISIBLE_DEVICES=all"], ("all",), False),
]  # fmt: skip
UNPRIV_IDS = ["refused", "privileged", "none-refused", "void-no-log", "swarm-names-its-variable",
              "accepted-by-default"]


@pytest.mark.parametrize(("config", "caps", "env", "want", "logged"), UNPRIVILEGED,
                         ids=UNPRIV_IDS)  # fmt: skip
def test_unprivileged_policy(
    caplog: pytest.LogCaptureFixture, config: HookConfig, caps: Any, env: list[str],
    want: Any, logged: bool,
) -> None:  # fmt: skip
    with caplog.at_level(logging.INFO):
        assert devices_of(env, caps=caps, config=config) == want
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    variable = "S" if any(e.startswith("S=") for e in env) else "NVIDIA_VISIBLE_DEVICES"
    assert lines == ([device_lists.UNPRIVILEGED_LOG % variable] if logged else [])
    assert device_lists.UNPRIVILEGED_LOG % variable == (  # NVIDIA 1.20's line
        "Ignoring devices requested by environment variable(s) in unprivileged container: "
        f"[{variable}]")


MOUNT_CASES = [
    (dev("0"), [], ("0",)),
    (dev("0", "1"), ["NVIDIA_VISIBLE_DEVICES=all"], ("0", "1")),
    ((("/dev/null/", f"{ROOT}/0"),), [], ("0",)),
    ((("/dev//null", f"{ROOT}/0"),), [], ("0",)),
    ((("/dev/zero", f"{ROOT}/0"),), [], None),
    (dev(ROOT), [], None),
    (dev(ROOT + "/"), ["NVIDIA_VISIBLE_DEVICES=3"], ("3",)),
    (dev(ROOT + "X"), [], ("X",)),
    (dev("/run/nvidia-container-devices/0"), ["NVIDIA_VISIBLE_DEVICES=2"], ("2",)),
    (dev("GPU0-MIG0/0/1"), [], ("GPU0-MIG0/0/1",)),
    (dev("cdi/nvidia.com/gpu=0", "imex/1", "0"), [], ("nvidia.com/gpu=0", "0")),
    (dev("imex/1"), ["NVIDIA_VISIBLE_DEVICES=5"], ("5",)),
    (dev("all"), [], ("all",)),
    (dev("none"), [], ("none",)),
    (dev("void"), [], ("void",)),
    (dev("0/", "0"), [], ("0",)),
    (dev("1", "0", "1"), [], ("1", "0")),
    (dev(f"{ROOT}/a/../b"), [], ("b",)),
    (dev(ROOT + "//0//"), [], ("0",)),
]  # fmt: skip
MOUNT_IDS = ["one", "mounts-win-over-env", "source-trailing-slash", "source-double-slash",
             "other-source", "root-itself-skipped", "root-itself-then-env", "plain-prefix-quirk",
             "run-not-var-run", "slashes-kept", "cdi-counts-imex-dropped", "only-imex-falls-back",
             "all-literal", "none-literal", "void-literal", "repeat-destination",
             "dup-deduped", "cleaned", "slashes-trimmed"]  # fmt: skip


@pytest.mark.parametrize(("mounts", "env", "want"), MOUNT_CASES, ids=MOUNT_IDS)
def test_volume_mount_device_lists(
    mounts: tuple[tuple[str, str], ...], env: list[str], want: Any
) -> None:
    assert devices_of(env, config=VOLUMES, mounts=mounts) == want


def test_volume_mounts_only_when_accepted() -> None:
    assert devices_of([], mounts=dev("0")) is None
    assert devices_of(["NVIDIA_VISIBLE_DEVICES=1"], mounts=dev("0")) == ("1",)


def test_volume_mounts_bypass_the_privilege_gate(caplog: pytest.LogCaptureFixture) -> None:
    config = conf(accept_nvidia_visible_devices_as_volume_mounts=True,
                  accept_nvidia_visible_devices_envvar_when_unprivileged=False)
    assert devices_of(["NVIDIA_VISIBLE_DEVICES=all"], config=config, mounts=dev("0")) == ("0",)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


# --- 1.7 legacy images -----------------------------------------------------------------------

def test_legacy_image() -> None:
    request = derive(["CUDA_VERSION=9.0"])
    assert request == ContainerRequest(
        devices=("all",), mig_config_devices=(), mig_monitor_devices=(), imex_channels=(),
        driver_capabilities=ALL, requirements=("cuda>=9.0",), disable_require=False,
    )  # fmt: skip


LEGACY = [
    (["CUDA_VERSION=9.0", "NVIDIA_REQUIRE_CUDA="], ("all",), ("", "cuda>=9.0")),
    (["CUDA_VERSION=9.0", "NVIDIA_REQUIRE_CUDA=cuda>=9.0"], None, None),
    (["CUDA_VERSION="], None, None),
    (["CUDA_VERSION=9.0", "NVIDIA_VISIBLE_DEVICES="], None, None),
    (["CUDA_VERSION=9.0", "NVIDIA_VISIBLE_DEVICES=void"], None, None),
    (["CUDA_VERSION=9.0", "NVIDIA_VISIBLE_DEVICES=1"], ("1",), ("cuda>=9.0",)),
    (["CUDA_VERSION=v11.6.2"], ("all",), ("cuda>=11.6",)),
    (["CUDA_VERSION=8"], ("all",), ("cuda>=8.0",)),
    (["CUDA_VERSION=9.0", "NVIDIA_DISABLE_REQUIRE=true"], ("all",), ()),
    (["CUDA_VERSION=legacy", "NVIDIA_DISABLE_REQUIRE=1"], ("all",), ()),
    (["CUDA_VERSION=09.0", "NVIDIA_VISIBLE_DEVICES=void"], None, None),
]  # fmt: skip
LEGACY_IDS = ["require-cuda-empty-is-legacy", "modern", "empty-cuda-version", "nvd-empty",
              "nvd-void", "nvd-set", "v-prefix", "major-only", "disable-require",
              "invalid-version-not-parsed-when-disabled", "invalid-version-no-gpu"]


@pytest.mark.parametrize(("env", "devices", "requirements"), LEGACY, ids=LEGACY_IDS)
def test_legacy_rules(env: list[str], devices: Any, requirements: Any) -> None:
    request = derive(env)
    assert (None if request is None else request.devices) == devices
    assert (None if request is None else request.requirements) == requirements


@pytest.mark.parametrize(
    ("version", "cause"),
    [("09.0", "invalid version string"), ("9.0.116.50", "invalid version string"),
     ("legacy", "invalid version string"), ("9.4294967296", "invalid minor version"),
     ("4294967296", "invalid major version")],
    ids=["leading-zero", "four-parts", "word", "minor-overflow", "major-overflow"],
)  # fmt: skip
def test_invalid_cuda_version(version: str, cause: str) -> None:
    with pytest.raises(RequestError) as info:
        derive([f"CUDA_VERSION={version}"])
    assert str(info.value).startswith(
        "failed to get requirements failed to get version: invalid CUDA version "
        f"{version}: {cause} ("
    )


# --- 1.9 MIG ---------------------------------------------------------------------------------

GPU = ["NVIDIA_VISIBLE_DEVICES=all"]
MIG_ERRORS = [
    (["NVIDIA_MIG_CONFIG_DEVICES=all"], None, "MIG_CONFIG_DEVICES"),
    (["NVIDIA_MIG_MONITOR_DEVICES=0"], None, "MIG_MONITOR_DEVICES"),
    (["NVIDIA_MIG_MONITOR_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=0"], None, "MIG_CONFIG_DEVICES"),
    (["NVIDIA_MIG_CONFIG_DEVICES= "], UNPRIV, "MIG_CONFIG_DEVICES"),
]  # fmt: skip


@pytest.mark.parametrize(("env", "caps", "name"), MIG_ERRORS,
                         ids=["config", "monitor", "config-checked-first", "raw-space"])
def test_mig_needs_privilege(env: list[str], caps: Any, name: str) -> None:
    with pytest.raises(RequestError) as info:
        derive(GPU + env, caps=caps)  # accept-...-when-unprivileged is true: does not relax this
    assert str(info.value).startswith(f"cannot set {name} in non privileged container (")


MIG_OK = [
    (["NVIDIA_MIG_CONFIG_DEVICES="], None, (), ()),
    (["NVIDIA_MIG_CONFIG_DEVICES=all", "NVIDIA_MIG_MONITOR_DEVICES=0, 1"], PRIV, ("all",),
     ("0", "1")),
    (["NVIDIA_MIG_CONFIG_DEVICES=0,0"], PRIV, ("0",), ()),
]  # fmt: skip


@pytest.mark.parametrize(("env", "caps", "config", "monitor"), MIG_OK,
                         ids=["set-empty", "privileged", "deduped"])
def test_mig_devices(env: list[str], caps: Any, config: Any, monitor: Any) -> None:
    request = derive(GPU + env, caps=caps)
    assert (request.mig_config_devices, request.mig_monitor_devices) == (config, monitor)


def test_mig_ignored_for_non_gpu_containers() -> None:
    assert derive(["NVIDIA_MIG_CONFIG_DEVICES=all"]) is None


# --- 1.10 IMEX -------------------------------------------------------------------------------

IMEX = [
    (conf(), None, (), ["NVIDIA_IMEX_CHANNELS=0,1"], ("0", "1")),
    (conf(), None, (), ["NVIDIA_IMEX_CHANNELS=all"], ()),
    (conf(), None, (), ["NVIDIA_IMEX_CHANNELS=none"], ()),
    (conf(), None, (), ["NVIDIA_IMEX_CHANNELS="], ()),
    (conf(), None, (), ["NVIDIA_IMEX_CHANNELS=void,0"], ()),
    (conf(), None, (), ["NVIDIA_IMEX_CHANNELS=0,0"], ("0",)),
    (conf(), None, (), ["CUDA_VERSION=9.0"], ()),
    (conf(**{"features.ignore_imex_channel_requests": True}), None, (),
     ["NVIDIA_IMEX_CHANNELS=0"], ()),
    (VOLUMES, None, dev("imex/3", "imex/4"), ["NVIDIA_IMEX_CHANNELS=0"], ("3", "4")),
    (VOLUMES, None, dev("cdi/x"), ["NVIDIA_IMEX_CHANNELS=0"], ("0",)),
    (conf(), None, dev("imex/3"), ["NVIDIA_IMEX_CHANNELS=0"], ("0",)),
    (conf(accept_nvidia_visible_devices_as_volume_mounts=True,
          accept_nvidia_visible_devices_envvar_when_unprivileged=False),
     None, dev("0"), ["NVIDIA_IMEX_CHANNELS=1"], ()),
    (conf(accept_nvidia_visible_devices_as_volume_mounts=True,
          accept_nvidia_visible_devices_envvar_when_unprivileged=False),
     PRIV, dev("0"), ["NVIDIA_IMEX_CHANNELS=1"], ("1",)),
    (conf(accept_nvidia_visible_devices_as_volume_mounts=True,
          accept_nvidia_visible_devices_envvar_when_unprivileged=False),
     None, dev("0", "imex/2"), [], ("2",)),
]  # fmt: skip
IMEX_IDS = ["ids", "all-ignored", "none", "empty", "void", "deduped", "legacy-default-all-ignored",
            "feature-ignores", "mounts-win", "no-imex-mounts-fall-back", "mounts-not-accepted",
            "unprivileged-silently-dropped", "privileged", "mounts-bypass-privilege"]


@pytest.mark.parametrize(("config", "caps", "mounts", "env", "want"), IMEX, ids=IMEX_IDS)
def test_imex_channels(config: HookConfig, caps: Any, mounts: Any, env: list[str],
                       want: tuple[str, ...]) -> None:  # fmt: skip
    base = [] if mounts and any("imex" not in d and "cdi" not in d for _, d in mounts) else GPU
    request = derive(base + env, caps=caps, config=config, mounts=mounts)
    assert request is not None and request.imex_channels == want


# --- 1.11 requirements -----------------------------------------------------------------------

REQUIREMENTS = [
    (["NVIDIA_REQUIRE_CUDA=cuda>=11", "NVIDIA_REQUIRE_BRAND=brand=tesla"],
     ("brand=tesla", "cuda>=11")),
    (["NVIDIA_REQUIRE_X="], ("",)),
    (["NVIDIA_REQUIRE_="], ("",)),
    (["NVIDIA_REQUIRE_JETPACK=csv-mounts=all", "NVIDIA_REQUIRE_JETPACKX=1"], ()),
    (["NVIDIA_REQUIRE_ARCH=arch=x86_64", "CUDA_VERSION=10.2", "NVIDIA_REQUIRE_CUDA="],
     ("arch=x86_64", "", "cuda>=10.2")),
    (["NVIDIA_REQUIRE_A=a=b,c"], ("a=b,c",)),
    (["NVIDIA_REQUIRES=x"], ()),
]  # fmt: skip
REQ_IDS = ["sorted-by-name", "empty-value-kept", "bare-prefix", "jetpack-skipped",
           "legacy-last", "raw-value", "not-the-prefix"]


@pytest.mark.parametrize(("env", "want"), REQUIREMENTS, ids=REQ_IDS)
def test_requirements(env: list[str], want: tuple[str, ...]) -> None:
    assert derive(GPU + env).requirements == want


@pytest.mark.parametrize(
    ("value", "disabled"),
    [("1", True), ("t", True), ("T", True), ("TRUE", True), ("true", True), ("True", True),
     ("yes", False), ("on", False), ("", False), ("false", False), ("0", False),
     ("tRUE", False), (" true", False), (None, False)],
    ids=["1", "t", "T", "TRUE", "true", "True", "yes", "on", "empty", "false", "0",
         "mixed-case", "space", "unset"],
)  # fmt: skip
def test_disable_require(value: str | None, disabled: bool) -> None:
    env = [*GPU, "NVIDIA_REQUIRE_CUDA=cuda>=99"]
    if value is not None:
        env.append(f"NVIDIA_DISABLE_REQUIRE={value}")
    request = derive(env)
    assert request.disable_require is disabled
    assert request.requirements == (() if disabled else ("cuda>=99",))


def test_disable_require_config_overrides_the_container() -> None:
    env = [*GPU, "NVIDIA_DISABLE_REQUIRE=false", "NVIDIA_REQUIRE_CUDA=cuda>=99"]
    request = derive(env, config=conf(disable_require=True))
    assert request.disable_require and request.requirements == ()


# --- 1.12 driver capabilities ----------------------------------------------------------------

CAPS = [
    (None, False, "all", DEFAULT),
    (None, True, "all", ALL),
    ("", True, "all", DEFAULT),
    ("", False, "all", DEFAULT),
    ("all", False, "all", ALL),
    ("compute,video", False, "all", Cap.COMPUTE | Cap.VIDEO),
    (" graphics , display ", False, "all", Cap.GRAPHICS | Cap.DISPLAY),
    ("all,foo", False, "all", ALL),
    ("utility,compute,utility", False, "all", DEFAULT),
    (" , ", False, "all", Cap(0)),
    (None, False, "", Cap(0)),
    (None, True, "compute,video", Cap.COMPUTE | Cap.VIDEO),
    (None, False, "compute,video", Cap.COMPUTE),
    ("all", False, "utility", Cap.UTILITY),
]  # fmt: skip
CAPS_IDS = ["unset", "unset-legacy", "empty-legacy", "empty", "all", "list", "trimmed",
            "all-wins", "duplicates", "only-separators", "nothing-supported",
            "legacy-supported-subset", "default-intersected", "all-is-supported"]


@pytest.mark.parametrize(("value", "legacy", "supported", "want"), CAPS, ids=CAPS_IDS)
def test_driver_capabilities(value: str | None, legacy: bool, supported: str, want: Cap) -> None:
    env = ["CUDA_VERSION=9.0"] if legacy else list(GPU)
    if value is not None:
        env.append(f"NVIDIA_DRIVER_CAPABILITIES={value}")
    request = derive(env, config=conf(supported_driver_capabilities=supported))
    assert request.driver_capabilities == want


VALID = ("valid: compat32, compute, display, graphics, ngx, utility, video or all (fix "
         "NVIDIA_DRIVER_CAPABILITIES)")
CAPS_ERRORS = [
    ("compute,foo", "all", "unsupported capabilities found in 'compute,foo': 'foo' is not a "
     f"driver capability; {VALID}"),
    ("foo,compute", "all", "unsupported capabilities found in 'compute,foo': 'foo' is not a "
     f"driver capability; {VALID}"),
    ("none", "all", f"unsupported capabilities found in 'none': 'none' is not a driver "
     f"capability; {VALID}"),
    ("utility", "compute", "unsupported capabilities found in 'utility': 'utility' not in "
     "supported-driver-capabilities 'compute' of the config (add it there, or leave it out of "
     "NVIDIA_DRIVER_CAPABILITIES)"),
    ("video,compute", "compute", "unsupported capabilities found in 'compute,video': 'video' "
     "not in supported-driver-capabilities 'compute' of the config (add it there, or leave it "
     "out of NVIDIA_DRIVER_CAPABILITIES)"),
    ("Compute", "all", "unsupported capabilities found in 'Compute': 'Compute' is not a driver "
     f"capability (did you mean 'compute'?); {VALID}"),
    ("compte,utility", "all", "unsupported capabilities found in 'compte,utility': 'compte' is "
     f"not a driver capability (did you mean 'compute'?); {VALID}"),
    ("utlity,vidoe", "all", "unsupported capabilities found in 'utlity,vidoe': not driver "
     "capabilities: 'utlity' (did you mean 'utility'?), 'vidoe' (did you mean 'video'?); "
     f"{VALID}"),
]  # fmt: skip


@pytest.mark.parametrize(("value", "supported", "message"), CAPS_ERRORS,
                         ids=["unknown", "sorted", "none", "unsupported", "partly", "case",
                              "typo", "typos"])
def test_driver_capabilities_errors(value: str, supported: str, message: str) -> None:
    with pytest.raises(RequestError) as info:
        derive([*GPU, f"NVIDIA_DRIVER_CAPABILITIES={value}"],
               config=conf(supported_driver_capabilities=supported))
    assert str(info.value) == message


# --- 1.13 summary table ----------------------------------------------------------------------

SUMMARY = [
    (["CUDA_VERSION=9.0"], ("all",), ALL, ("cuda>=9.0",)),
    (["NVIDIA_REQUIRE_CUDA=cuda>=11.0", "CUDA_VERSION=11.0"], None, None, None),
    (["NVIDIA_REQUIRE_CUDA=cuda>=11.0", "NVIDIA_VISIBLE_DEVICES=0"], ("0",), DEFAULT,
     ("cuda>=11.0",)),
    (["NVIDIA_VISIBLE_DEVICES=all"], ("all",), DEFAULT, ()),
]  # fmt: skip


@pytest.mark.parametrize(("env", "devices", "caps", "requirements"), SUMMARY,
                         ids=["legacy", "modern-unset", "modern", "no-cuda-vars"])
def test_summary_table(env: list[str], devices: Any, caps: Any, requirements: Any) -> None:
    request = derive(env)
    got = None if request is None else (
        request.devices, request.driver_capabilities, request.requirements)
    assert got == (None if devices is None else (devices, caps, requirements))


# --- 1.14 mode check -------------------------------------------------------------------------

MODE_OK = [
    (conf(), ["NVIDIA_VISIBLE_DEVICES=all"], (), "Auto-detected mode as 'legacy'"),
    (conf(), ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0,1"], (), "Auto-detected mode as 'legacy'"),
    (conf(), ["NVIDIA_VISIBLE_DEVICES=none"], (), "Auto-detected mode as 'legacy'"),
    (conf(**{"nvidia-container-runtime.mode": "legacy"}),
     ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"], (), "Using requested mode 'legacy'"),
    (conf(**{"nvidia-container-runtime-hook.skip-mode-detection": True,
             "nvidia-container-runtime.mode": "cdi"}),
     ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all"], (), None),
    (VOLUMES, ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"], dev("0"),
     "Auto-detected mode as 'legacy'"),
    (VOLUMES, [], dev("cdi/nvidia.com/gpu=0", "1"), "Auto-detected mode as 'legacy'"),
]  # fmt: skip


@pytest.mark.parametrize(("config", "env", "mounts", "line"), MODE_OK,
                         ids=["all", "mixed-cdi-and-index", "none", "requested-legacy",
                              "skipped", "index-mount-wins", "mixed-mounts"])  # fmt: skip
def test_mode_check_passes(caplog: pytest.LogCaptureFixture, config: HookConfig, env: list[str],
                           mounts: Any, line: str | None) -> None:  # fmt: skip
    with caplog.at_level(logging.INFO, logger="nvhook"):
        assert derive(env, config=config, mounts=mounts) is not None
    lines = [r.getMessage() for r in caplog.records if "mode" in r.getMessage()]
    assert lines == ([line] if line else [])


MODE_FAIL = [
    (conf(), ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"], ()),
    (conf(), ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0,example.com/net=eth0"], ()),
    (conf(), ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"], dev("cdi/nvidia.com/gpu=1")),
    (conf(), ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"], dev("0")),
    (VOLUMES, [], dev("cdi/nvidia.com/gpu=0", "imex/1")),
    (VOLUMES, ["NVIDIA_VISIBLE_DEVICES=5"], dev("cdi/nvidia.com/gpu/1")),
    (conf(**{"nvidia-container-runtime.mode": "cdi"}), ["NVIDIA_VISIBLE_DEVICES=all"], ()),
    (conf(**{"nvidia-container-runtime.mode": "jit-cdi"}), ["NVIDIA_VISIBLE_DEVICES=0"], ()),
]  # fmt: skip


@pytest.mark.parametrize(("config", "env", "mounts"), MODE_FAIL,
                         ids=["cdi-name", "cdi-names", "ignored-cdi-mount", "ignored-index-mount",
                              "cdi-mount-counts", "cdi-mount-slash-form", "cdi", "jit-cdi"])
def test_mode_check_fails(config: HookConfig, env: list[str], mounts: Any) -> None:
    with pytest.raises(RequestError) as info:
        derive(env, config=config, mounts=mounts)
    assert str(info.value) == MODE_ERROR
    assert str(info.value) == (
        "invoking the NVIDIA Container Runtime Hook directly (e.g. specifying the docker --gpus "
        "flag) is not supported. Please use the NVIDIA Container Runtime (e.g. specify the "
        "--runtime=nvidia flag) instead."
    )


def test_csv_mode_is_the_hooks_own() -> None:
    """Tegra CSV mode: the hook's engine reads the mount specs (nvmount.discover.csv_backend)."""
    request = derive(["NVIDIA_VISIBLE_DEVICES=all"],
                     config=conf(**{"nvidia-container-runtime.mode": "csv"}))
    assert request is not None and request.devices == ("all",)


def test_mode_check_skipped_for_non_gpu_containers() -> None:
    assert derive([], config=conf(**{"nvidia-container-runtime.mode": "cdi"})) is None


CDI_NAMES = [
    ("nvidia.com/gpu=0", True),
    ("nvidia.com/gpu=all", True),
    ("vendor.example/class_1=dev:0.a-b", True),
    ("a/b=c", True),
    ("nvidia.com/gpu=", False),
    ("nvidia.com/=0", False),
    ("/gpu=0", False),
    ("nvidia.com=0", False),
    ("0", False),
    ("", False),
    ("1nvidia.com/gpu=0", False),
    ("nvidia.com-/gpu=0", False),
    ("nvidia.com/gpu/x=0", False),
    ("nvidia.com/gpu=0=1", False),
    ("nvidia.com/gpu=-0", False),
    ("nvidia.com/gpu=0:", False),
    ("nvidia.com/g pu=0", False),
    ("nvidia.com/gpü=0", False),
]  # fmt: skip


@pytest.mark.parametrize(("name", "want"), CDI_NAMES, ids=[n or "empty" for n, _ in CDI_NAMES])
def test_is_qualified_cdi_name(name: str, want: bool) -> None:
    assert device_lists.is_qualified_cdi_name(name) is want


# --- 1.2 error precedence --------------------------------------------------------------------

PRECEDENCE = [
    (["FOO", "NVIDIA_VISIBLE_DEVICES=0"], "bad", RequestError, "invalid environment variable"),
    (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=0",
      "NVIDIA_DRIVER_CAPABILITIES=foo"], "bad", SpecError, "could not decode Process"),
    (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=0",
      "NVIDIA_DRIVER_CAPABILITIES=foo"], None, RequestError, "cannot set MIG_CONFIG_DEVICES"),
    (["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0", "NVIDIA_DRIVER_CAPABILITIES=foo",
      "CUDA_VERSION=x", "NVIDIA_REQUIRE_CUDA="], None, RequestError, "unsupported capabilities"),
    (["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0", "CUDA_VERSION=x"], None, RequestError,
     "failed to get requirements"),
]  # fmt: skip


@pytest.mark.parametrize(("env", "caps", "error", "start"), PRECEDENCE,
                         ids=["env-first", "capabilities-next", "mig-before-caps",
                              "caps-before-requirements", "requirements-before-mode"])
def test_error_precedence(env: list[str], caps: Any, error: type[Exception], start: str) -> None:
    with pytest.raises(error) as info:
        derive(env, caps="not-an-object" if caps == "bad" else caps)
    assert str(info.value).startswith(start)


# --- output ----------------------------------------------------------------------------------

def test_request_json_shape() -> None:
    request = derive([*GPU, "NVIDIA_DRIVER_CAPABILITIES=video,compute", "NVIDIA_IMEX_CHANNELS=7",
                      "NVIDIA_MIG_MONITOR_DEVICES=all", "NVIDIA_REQUIRE_CUDA=cuda>=12"], caps=PRIV)
    assert request.to_json() == {
        "devices": ["all"],
        "mig_config_devices": [],
        "mig_monitor_devices": ["all"],
        "imex_channels": ["7"],
        "driver_capabilities": ["compute", "video"],
        "requirements": ["cuda>=12"],
        "disable_require": False,
    }


def test_gated_features_need_exactly_enabled() -> None:
    from nvhook.hook.request import gated_features

    env = {"NVIDIA_GDS": "enabled", "NVIDIA_MOFED": "Enabled", "NVIDIA_NVSWITCH": "true",
           "NVIDIA_GDRCOPY": "enabled"}
    assert gated_features(env) == ("gds", "gdrcopy")
    assert gated_features({}) == ()


# --- one request, one policy: CDI requests (NVIDIA 1.20's runtime in cdi mode) -----------------

STRICT = conf(accept_nvidia_visible_devices_envvar_when_unprivileged=False)
STRICT_VOLUMES = conf(accept_nvidia_visible_devices_envvar_when_unprivileged=False,
                      accept_nvidia_visible_devices_as_volume_mounts=True)
ANNOTATED = {"cdi.k8s.io/plugin_x": "nvidia.com/gpu=1,nvidia.com/gpu=0", "other/x": "a/b=c"}
CDI_CASES = [
    (conf(), UNPRIV, ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all"], (), {},
     ("nvidia.com/gpu=all",)),
    (STRICT, UNPRIV, ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all"], (), {}, None),
    (STRICT, PRIV, ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all"], (), {}, ("nvidia.com/gpu=all",)),
    (STRICT, UNPRIV, [], (), ANNOTATED, ("nvidia.com/gpu=1", "nvidia.com/gpu=0")),
    (conf(**{"nvidia-container-runtime.modes.cdi.annotation-prefixes": []}), None, [], (),
     ANNOTATED, None),
    (STRICT_VOLUMES, UNPRIV, [], dev("cdi/nvidia.com/gpu/1"), {}, ("nvidia.com/gpu=1",)),
    (STRICT, UNPRIV, [], dev("cdi/nvidia.com/gpu=1"), {}, None),
    (conf(), None, ["NVIDIA_VISIBLE_DEVICES=0"], (), {}, None),
    (conf(), None, ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0,1"], (), {}, None),
    (conf(**{"nvidia-container-runtime.mode": "cdi"}), None, ["NVIDIA_VISIBLE_DEVICES=0,1"], (),
     {}, ("nvidia.com/gpu=0", "nvidia.com/gpu=1")),
    (conf(swarm_resource="S"), None, ["S=nvidia.com/gpu=2", "NVIDIA_VISIBLE_DEVICES=all"], (),
     {}, ("nvidia.com/gpu=2",)),
    (conf(), None, ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"], (), {"cdi.k8s.io/x": "0"},
     ("nvidia.com/gpu=0",)),
]  # fmt: skip
CDI_IDS = ["unprivileged-accepted-by-default", "strict-unprivileged-refused",
           "strict-privileged", "annotations-need-no-privilege", "annotations-off",
           "accepted-cdi-mount", "cdi-mount-not-accepted", "index-is-legacy", "mixed-is-legacy",
           "cdi-mode-default-kind", "swarm-wins", "non-cdi-annotation-ignored"]


@pytest.mark.parametrize(("config", "caps", "env", "mounts", "annotations", "want"), CDI_CASES,
                         ids=CDI_IDS)
def test_cdi_requests_go_through_the_same_policy(config: HookConfig, caps: Any, env: list[str],
                                                 mounts: Any, annotations: dict[str, str],
                                                 want: Any) -> None:
    """Issue 19 class 1: a CDI name in the env of an unprivileged container under the strict
    policy is refused exactly as an index would be (NVIDIA 1.20's `VisibleDevices` order:
    annotations, accepted volume mounts, then swarm/NVD with the privilege policy)."""
    from nvhook.hook.request import cdi_request

    spec = make_spec(env, caps, mounts=mounts)
    assert cdi_request(spec, annotations, config) == want
    if want is None and config is STRICT and not annotations and not mounts:  # as an index
        assert derive([e.replace("nvidia.com/gpu=all", "all") for e in env], caps,
                      config) is None


def test_imex_and_invalid_cdi_mount_warnings(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        request = derive(["NVIDIA_IMEX_CHANNELS=1"], UNPRIV, STRICT_VOLUMES, dev("0"))
        assert request is not None and request.imex_channels == ()
        assert derive([], None, VOLUMES, dev("cdi/nvidia.com")) is None
    assert [r.getMessage() for r in caplog.records] == [
        "Ignoring request by environment variable(s) in unprivileged container: "
        "[NVIDIA_IMEX_CHANNELS]",
        "Ignoring invalid mount request for CDI device cdi/nvidia.com: invalid mount CDI device "
        "request: cdi/nvidia.com"]


def test_cli_devices_follow_the_id_rules_and_refuse_cdi_names() -> None:
    from nvhook.hook.device_lists import cli_devices

    assert cli_devices(["0,1", "1", "GPU-x"]) == ("0", "1", "GPU-x")
    with pytest.raises(RequestError, match=r"--device=nvidia\.com/gpu=0: a CDI device name"):
        cli_devices(["0,nvidia.com/gpu=0"])
    with pytest.raises(RequestError, match="more than 10 digits"):
        cli_devices(["1" * 11])
