"""nvhook.config: NVIDIA's config.toml keys and defaults, lookup, validation (hook-spec 2, 1.12,
1.16) and the [nvhook] table."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from nvhook.config import load as config_file
from nvhook.config import model as cfgmod
from nvhook.config.load import load_config
from nvhook.config.model import HookConfig, config_from_document
from nvhook.errors import ConfigError
from nvmount.capabilities import DriverCapability

ALL_CAPS = DriverCapability.all()


@pytest.fixture(autouse=True)
def _no_system_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never read the host's /etc/nvidia-container-runtime/config.toml in these tests."""
    monkeypatch.setattr(config_file, "DEFAULT_CONFIG_PATH", str(tmp_path / "etc-config.toml"))


def _attr(config: HookConfig, dotted: str) -> Any:
    value: Any = config
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _load_text(tmp_path: Path, text: str) -> HookConfig:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return load_config(str(path), {})


DEFAULTS = [
    ("path", None),
    ("disable_require", False),
    ("swarm_resource", ""),
    ("accept_nvidia_visible_devices_envvar_when_unprivileged", True),
    ("accept_nvidia_visible_devices_as_volume_mounts", False),
    ("supported_driver_capabilities", ALL_CAPS),
    ("cli.root", ""),
    ("cli.path", ""),
    ("cli.environment", ()),
    ("cli.debug", ""),
    ("cli.ldcache", ""),
    ("cli.load_kmods", True),
    ("cli.no_pivot", False),
    ("cli.no_cgroups", False),
    ("cli.ldconfig", cfgmod.default_ldconfig()),
    ("runtime.debug", "/dev/null"),
    ("runtime.log_level", "info"),
    ("runtime.runtimes", ("runc", "crun")),
    ("runtime.mode", "auto"),
    ("runtime.modes_csv_mount_spec_path",
     "/etc/nvidia-container-runtime/host-files-for-container.d"),
    ("runtime.modes_cdi_default_kind", "nvidia.com/gpu"),
    ("runtime.modes_cdi_annotation_prefixes", ("cdi.k8s.io/",)),
    ("runtime.modes_cdi_spec_dirs", ("/etc/cdi", "/var/run/cdi")),
    ("runtime.modes_legacy_cuda_compat_mode", "ldconfig"),
    ("runtime_hook.path", "nvidia-container-runtime-hook"),
    ("runtime_hook.skip_mode_detection", False),
    ("ctk.path", "nvidia-ctk"),
    ("features.allow_cuda_compat_libs_from_container", False),
    ("features.allow_ldconfig_from_container", False),
    ("features.disable_cuda_compat_lib_hook", False),
    ("features.disable_imex_channel_creation", False),
    ("features.ignore_imex_channel_requests", False),
    ("nvhook.proc_root", "/proc"),
    ("nvhook.timing_log", ""),
    ("nvhook.ldconfig_required", False),
]  # fmt: skip


@pytest.mark.parametrize(("attr", "want"), DEFAULTS, ids=[a for a, _ in DEFAULTS])
def test_defaults_without_a_file(attr: str, want: Any) -> None:
    assert _attr(load_config(None, {}), attr) == want


@pytest.mark.parametrize(("attr", "want"), DEFAULTS[1:], ids=[a for a, _ in DEFAULTS[1:]])
def test_empty_file_means_defaults(tmp_path: Path, attr: str, want: Any) -> None:
    assert _attr(_load_text(tmp_path, ""), attr) == want


def test_default_user_matches_host() -> None:
    assert load_config(None, {}).cli.user == cfgmod.default_user()


KEYS = [
    ("disable-require = true", "disable_require", True),
    ('swarm-resource = "DOCKER_RESOURCE_GPU"', "swarm_resource", "DOCKER_RESOURCE_GPU"),
    ("accept-nvidia-visible-devices-envvar-when-unprivileged = false",
     "accept_nvidia_visible_devices_envvar_when_unprivileged", False),
    ("accept-nvidia-visible-devices-as-volume-mounts = true",
     "accept_nvidia_visible_devices_as_volume_mounts", True),
    ('supported-driver-capabilities = "compute,utility"', "supported_driver_capabilities",
     DriverCapability.COMPUTE | DriverCapability.UTILITY),
    ('[nvidia-container-cli]\nroot = "/run/nvidia/driver"', "cli.root", "/run/nvidia/driver"),
    ('[nvidia-container-cli]\npath = "/usr/bin/nvidia-container-cli"', "cli.path",
     "/usr/bin/nvidia-container-cli"),
    ('[nvidia-container-cli]\nenvironment = ["A=1", "B=2"]', "cli.environment", ("A=1", "B=2")),
    ('[nvidia-container-cli]\ndebug = "/var/log/nvhook.log"', "cli.debug", "/var/log/nvhook.log"),
    ('[nvidia-container-cli]\nldcache = "/etc/ld.so.cache"', "cli.ldcache", "/etc/ld.so.cache"),
    ("[nvidia-container-cli]\nload-kmods = false", "cli.load_kmods", False),
    ("[nvidia-container-cli]\nno-pivot = true", "cli.no_pivot", True),
    ("[nvidia-container-cli]\nno-cgroups = true", "cli.no_cgroups", True),
    ('[nvidia-container-cli]\nuser = "root:video"', "cli.user", "root:video"),
    ('[nvidia-container-cli]\nldconfig = "@/nonexistent/ldconfig"', "cli.ldconfig",
     "@/nonexistent/ldconfig"),
    ('[nvidia-container-runtime]\ndebug = "/tmp/rt.log"', "runtime.debug", "/tmp/rt.log"),
    ('[nvidia-container-runtime]\nlog-level = "debug"', "runtime.log_level", "debug"),
    ('[nvidia-container-runtime]\nruntimes = ["runc"]', "runtime.runtimes", ("runc",)),
    ('[nvidia-container-runtime]\nmode = "legacy"', "runtime.mode", "legacy"),
    ('[nvidia-container-runtime.modes.csv]\nmount-spec-path = "/x"',
     "runtime.modes_csv_mount_spec_path", "/x"),
    ('[nvidia-container-runtime.modes.cdi]\ndefault-kind = "example.com/gpu"',
     "runtime.modes_cdi_default_kind", "example.com/gpu"),
    ('[nvidia-container-runtime.modes.cdi]\nannotation-prefixes = ["a/", "b/"]',
     "runtime.modes_cdi_annotation_prefixes", ("a/", "b/")),
    ('[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["/cdi"]', "runtime.modes_cdi_spec_dirs",
     ("/cdi",)),
    ('[nvidia-container-runtime.modes.legacy]\ncuda-compat-mode = "mount"',
     "runtime.modes_legacy_cuda_compat_mode", "mount"),
    ('[nvidia-container-runtime-hook]\npath = "/usr/local/bin/hook"', "runtime_hook.path",
     "/usr/local/bin/hook"),
    ("[nvidia-container-runtime-hook]\nskip-mode-detection = true",
     "runtime_hook.skip_mode_detection", True),
    ('[nvidia-ctk]\npath = "/usr/bin/nvidia-ctk"', "ctk.path", "/usr/bin/nvidia-ctk"),
    ("[features]\nallow-cuda-compat-libs-from-container = true",
     "features.allow_cuda_compat_libs_from_container", True),
    ("[features]\nallow-ldconfig-from-container = true",
     "features.allow_ldconfig_from_container", True),
    ("[features]\ndisable-cuda-compat-lib-hook = true",
     "features.disable_cuda_compat_lib_hook", True),
    ("[features]\ndisable-imex-channel-creation = true",
     "features.disable_imex_channel_creation", True),
    ("[features]\nignore-imex-channel-requests = true",
     "features.ignore_imex_channel_requests", True),
    ("[features]\nignore-imex-channel-requests = false",
     "features.ignore_imex_channel_requests", False),
    ('[nvhook]\nproc-root = "/sim/proc"', "nvhook.proc_root", "/sim/proc"),
    ('[nvhook]\ntiming-log = "/var/log/t.jsonl"', "nvhook.timing_log", "/var/log/t.jsonl"),
    ("[nvhook]\nldconfig-required = true", "nvhook.ldconfig_required", True),
    # dotted keys at the top level are the same as tables
    ('nvidia-container-cli.root = "/d"', "cli.root", "/d"),
    ('nvidia-container-runtime.modes.legacy.cuda-compat-mode = "disabled"',
     "runtime.modes_legacy_cuda_compat_mode", "disabled"),
    ('[nvidia-container-runtime]\nmodes.legacy.cuda-compat-mode = "hook"',
     "runtime.modes_legacy_cuda_compat_mode", "hook"),
    ("features.disable-imex-channel-creation = true",
     "features.disable_imex_channel_creation", True),
    ('nvhook.proc-root = "/p"', "nvhook.proc_root", "/p"),
    # unknown keys and tables are ignored
    ('unknown-key = 5\n[nvidia-container-cli]\nunknown = "x"\nroot = "/r"\n[other]\na = 1',
     "cli.root", "/r"),
    # NVIDIA 1.20's keys
    ("[features]\nallow-unknown-oci-spec-fields = true",
     "features.allow_unknown_oci_spec_fields", True),
    ("[features]\nno-additional-gids-for-device-nodes = true",
     "features.no_additional_gids_for_device_nodes", True),
    ('[nvidia-container-runtime.modes.jit-cdi]\nnvcdi-feature-flags = ["disable-nvsandboxutils"]',
     "runtime.modes_jit_cdi_nvcdi_feature_flags", ("disable-nvsandboxutils",)),
    ('[nvidia-container-runtime.modes.jit-cdi]\nnvcdi-disable-hooks = ["all"]',
     "runtime.modes_jit_cdi_nvcdi_disable_hooks", ("all",)),
    ('[nvidia-container-runtime.modes.csv]\ncompat-container-root = "/opt/compat"',
     "runtime.modes_csv_compat_container_root", "/opt/compat"),
]  # fmt: skip
KEY_IDS = [k.split("\n")[-1].split(" =")[0] + f"-{i}" for i, (k, _, _) in enumerate(KEYS)]


@pytest.mark.parametrize(("text", "attr", "want"), KEYS, ids=KEY_IDS)
def test_keys(tmp_path: Path, text: str, attr: str, want: Any) -> None:
    config = _load_text(tmp_path, text)
    assert _attr(config, attr) == want
    assert config.path == str(tmp_path / "config.toml")


def test_generated_default_file(tmp_path: Path) -> None:
    """`nvidia-ctk config default` output (v1.20: v1.17.8's but for `runtimes`, which
    dropped docker-runc) loads to the defaults."""
    text = """#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
#debug = "/var/log/nvidia-container-toolkit.log"
environment = []
#ldcache = "/etc/ld.so.cache"
ldconfig = "@/sbin/ldconfig"
load-kmods = true
#no-cgroups = false
#path = "/usr/bin/nvidia-container-cli"
#root = "/run/nvidia/driver"
#user = "root:video"

[nvidia-container-runtime]
#debug = "/var/log/nvidia-container-runtime.log"
log-level = "info"
mode = "auto"
runtimes = ["runc", "crun"]

[nvidia-container-runtime.modes]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
spec-dirs = ["/etc/cdi", "/var/run/cdi"]

[nvidia-container-runtime.modes.csv]
mount-spec-path = "/etc/nvidia-container-runtime/host-files-for-container.d"

[nvidia-container-runtime.modes.legacy]
cuda-compat-mode = "ldconfig"

[nvidia-container-runtime-hook]
path = "nvidia-container-runtime-hook"
skip-mode-detection = false

[nvidia-ctk]
path = "nvidia-ctk"
"""
    loaded = _load_text(tmp_path, text)
    defaults = load_config(None, {})
    for attr, _ in DEFAULTS[1:]:
        if attr != "cli.ldconfig":
            assert _attr(loaded, attr) == _attr(defaults, attr), attr


BAD = [
    ("load-kmods = 1", None),  # unknown top-level key: ignored, not an error
    ('[nvidia-container-cli]\nload-kmods = "yes"',
     "nvidia-container-cli.load-kmods = 'yes' is a string, expected a boolean"),
    ("disable-require = 1", "disable-require = 1 is an integer, expected a boolean"),
    ("swarm-resource = true", "swarm-resource = True is a boolean, expected a string"),
    ('[nvidia-container-cli]\nenvironment = "A=1"',
     "nvidia-container-cli.environment = 'A=1' is a string, expected an array of strings"),
    ("[nvidia-container-cli]\nenvironment = [1]",
     "nvidia-container-cli.environment = [1] is an array, expected an array of strings"),
    ('nvidia-container-cli = "x"',
     "nvidia-container-cli = 'x' is a string, expected a table"),
    ('[nvidia-container-runtime]\nmodes = 3',
     "nvidia-container-runtime.modes = 3 is an integer, expected a table"),
    ("[features]\nallow-ldconfig-from-container = 'true'",
     "features.allow-ldconfig-from-container = 'true' is a string, expected a boolean"),
    ("[nvhook]\nproc-root = 5", "nvhook.proc-root = 5 is an integer, expected a string"),
    ('[nvhook]\nproc-root = "proc"', "nvhook.proc-root = 'proc' is not an absolute path"),
    ('[nvhook]\ntiming-log = "t.jsonl"', "nvhook.timing-log = 't.jsonl' is not an absolute path"),
    ('[nvidia-container-runtime]\nmode = "foo"',
     "nvidia-container-runtime.mode = 'foo' (allowed: auto, cdi, csv, jit-cdi, legacy)"),
    ('[nvidia-container-runtime.modes.legacy]\ncuda-compat-mode = "mounts"',
     "nvidia-container-runtime.modes.legacy.cuda-compat-mode = 'mounts' (allowed: '', "
     "disabled, hook, ldconfig, mount)"),
]  # fmt: skip
BAD_IDS = ["unknown-top-level-ignored", "bool-as-string", "bool-as-int", "string-as-bool",
           "list-as-string", "list-of-ints", "table-as-string", "subtable-as-int",
           "feature-as-string", "nvhook-int", "proc-root-relative", "timing-log-relative",
           "mode-unknown", "cuda-compat-mode-unknown"]  # fmt: skip


@pytest.mark.parametrize(("text", "message"), BAD, ids=BAD_IDS)
def test_invalid_values(tmp_path: Path, text: str, message: str | None) -> None:
    if message is None:
        _load_text(tmp_path, text)
        return
    with pytest.raises(ConfigError) as info:
        _load_text(tmp_path, text)
    path = tmp_path / "config.toml"
    assert str(info.value) == f"invalid config {path}: {message}"


@pytest.mark.parametrize("mode", ["auto", "legacy", "cdi", "csv", "jit-cdi"])
def test_modes_accepted(mode: str) -> None:
    doc = {"nvidia-container-runtime": {"mode": mode}}
    assert config_from_document(doc, "/c").runtime.mode == mode


@pytest.mark.parametrize("mode", ["", "ldconfig", "mount", "hook", "disabled"])
def test_cuda_compat_modes_accepted(mode: str) -> None:
    doc = {"nvidia-container-runtime": {"modes": {"legacy": {"cuda-compat-mode": mode}}}}
    assert config_from_document(doc, "/c").runtime.modes_legacy_cuda_compat_mode == mode


def test_parse_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _load_text(tmp_path, "[nvidia-container-cli\nroot = 1")
    assert str(info.value).startswith(f"couldn't parse configuration file {tmp_path}/config.toml: ")
    assert "\n" not in str(info.value)


def test_duplicate_key_is_a_parse_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="couldn't parse configuration file"):
        _load_text(tmp_path, 'swarm-resource = "A"\nswarm-resource = "B"')


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b'swarm-resource = "\xff"')
    with pytest.raises(ConfigError, match="couldn't parse configuration file"):
        load_config(str(path), {})


CAPS = [
    ("all", ALL_CAPS),
    ("", DriverCapability(0)),
    ("compute", DriverCapability.COMPUTE),
    (" compute , utility ,", DriverCapability.COMPUTE | DriverCapability.UTILITY),
    ("compat32,compute,display,graphics,ngx,utility,video", ALL_CAPS),
    (",,", DriverCapability(0)),
]
CAPS_IDS = ["all", "empty", "one", "spaces-and-empties", "full-list", "only-commas"]


@pytest.mark.parametrize(("value", "want"), CAPS, ids=CAPS_IDS)
def test_supported_driver_capabilities(value: str, want: DriverCapability) -> None:
    assert cfgmod.parse_supported_capabilities(value) == want


@pytest.mark.parametrize(
    "value", ["all,compute", "none", "compute,foo", "Compute", " all"],
    ids=["all-mixed", "none", "unknown", "uppercase", "all-with-space"],
)
def test_supported_driver_capabilities_invalid(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load_text(tmp_path, f'supported-driver-capabilities = "{value}"')
    assert str(info.value) == (
        f"Invalid value for config option 'supported-driver-capabilities'; {value} "
        "(supported: compat32,compute,display,graphics,ngx,utility,video)"
    )


def test_ldconfig_normalisation(tmp_path: Path) -> None:
    host = tmp_path / "sbin"
    host.mkdir()
    (host / "ldconfig").touch()
    plain, real = f"@{host}/ldconfig", f"@{host}/ldconfig.real"
    assert cfgmod.normalise_ldconfig(plain, False, checked=True) == plain
    assert cfgmod.normalise_ldconfig(real, False, checked=True) == plain  # no .real on the host
    (host / "ldconfig.real").touch()
    assert cfgmod.normalise_ldconfig(plain, False, checked=True) == real
    assert cfgmod.normalise_ldconfig(real, False, checked=True) == real
    assert cfgmod.normalise_ldconfig(real + ".real", False, checked=True) == real  # one .real


LDCONFIG = [
    ("/sbin/ldconfig", False, 'nvidia-container-cli.ldconfig value "/sbin/ldconfig" is not '
     "host-relative (does not start with a '@'): invalid config value"),
    ("", False, 'nvidia-container-cli.ldconfig value "" is not host-relative'),
    ("/sbin/ldconfig", True, "/sbin/ldconfig"),
    ("", True, ""),
]  # fmt: skip


@pytest.mark.parametrize(("value", "allow", "want"), LDCONFIG,
                         ids=["container-path", "empty", "container-path-allowed", "empty-allowed"])
def test_ldconfig_rule(tmp_path: Path, value: str, allow: bool, want: str) -> None:
    text = f'[nvidia-container-cli]\nldconfig = "{value}"\n'
    if allow:
        text += "[features]\nallow-ldconfig-from-container = true\n"
        assert _load_text(tmp_path, text).cli.ldconfig == want
        return
    with pytest.raises(ConfigError) as info:
        _load_text(tmp_path, text)
    assert str(info.value).startswith(want)


def test_ldconfig_rule_only_for_loaded_files() -> None:
    doc = {"nvidia-container-cli": {"ldconfig": "/sbin/ldconfig"}}
    assert config_from_document(doc, None).cli.ldconfig == "/sbin/ldconfig"


def _write(path: Path, swarm: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'swarm-resource = "{swarm}"\n')
    return str(path)


LOOKUP = [
    # (explicit, env, xdg file, /etc file) present -> which file wins
    ((True, True, True, True), "explicit"),
    ((False, True, True, True), "env"),
    ((False, False, True, True), "xdg"),
    ((False, False, False, True), "etc"),
    ((False, False, False, False), ""),
]


@pytest.mark.parametrize(("present", "winner"), LOOKUP,
                         ids=["explicit", "env", "xdg", "etc", "defaults"])  # fmt: skip
def test_lookup_order(tmp_path: Path, present: tuple[bool, ...], winner: str) -> None:
    explicit, env_file, xdg, etc = present
    environ: dict[str, str] = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    path = None
    if explicit:
        path = _write(tmp_path / "explicit.toml", "explicit")
    if env_file:
        environ["NVIDIA_CTK_CONFIG_FILE_PATH"] = _write(tmp_path / "env.toml", "env")
    if xdg:
        _write(tmp_path / "xdg" / "nvidia-container-runtime" / "config.toml", "xdg")
    if etc:
        _write(Path(config_file.DEFAULT_CONFIG_PATH), "etc")
    assert load_config(path, environ).swarm_resource == winner


def test_missing_explicit_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as info:
        load_config(str(path), {})
    assert str(info.value).startswith(
        f"couldn't open required configuration file {path}: file does not exist (named by --config"
    )


def test_missing_env_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match="named by NVIDIA_CTK_CONFIG_FILE_PATH"):
        load_config(None, {"NVIDIA_CTK_CONFIG_FILE_PATH": str(path)})


def test_missing_xdg_file_falls_through(tmp_path: Path) -> None:
    _write(Path(config_file.DEFAULT_CONFIG_PATH), "etc")
    assert load_config(None, {"XDG_CONFIG_HOME": str(tmp_path / "none")}).swarm_resource == "etc"


def test_relative_config_flag_uses_cwd(tmp_path: Path) -> None:
    _write(tmp_path / "c.toml", "rel")
    assert load_config("c.toml", {}, cwd=str(tmp_path)).swarm_resource == "rel"


# ---- files named by the hook's environment (an image may control it: issue 8, class 2) ----

def test_relative_env_path_is_an_error_never_the_bundle(tmp_path: Path) -> None:
    """Before: NVIDIA_CTK_CONFIG_FILE_PATH=rootfs/etc/x.toml was joined with the hook's cwd
    (the bundle), so the image supplied the whole config."""
    _write(tmp_path / "c.toml", "rel")
    with pytest.raises(ConfigError, match=r"^NVIDIA_CTK_CONFIG_FILE_PATH='c.toml': not an "
                       "absolute path"):
        load_config(None, {"NVIDIA_CTK_CONFIG_FILE_PATH": "c.toml"}, cwd=str(tmp_path))


def test_relative_xdg_config_home_is_ignored(tmp_path: Path) -> None:
    _write(tmp_path / "xdg" / "nvidia-container-runtime" / "config.toml", "xdg")
    _write(Path(config_file.DEFAULT_CONFIG_PATH), "etc")
    config = load_config(None, {"XDG_CONFIG_HOME": "xdg"}, cwd=str(tmp_path))
    assert config.swarm_resource == "etc"


UNTRUSTED = [
    # (what to do to the file or its directory, the reason's words)
    ("inside-bundle", "inside the hook's starting directory"),
    ("group-writable", "mode 0664"),
    ("other-owner", "owned by uid 4321"),
    ("dir-world-writable", "directory"),
    ("fifo", "not a regular file"),
]


def _untrusted(tmp_path: Path, how: str) -> tuple[Path, Path]:
    """(config file, the hook's cwd) made untrusted in way `how`."""
    bundle = tmp_path / "bundle"
    (bundle / "rootfs" / "etc").mkdir(parents=True)
    path = tmp_path / "elsewhere" / "nvidia-container-runtime" / "config.toml"
    if how == "inside-bundle":
        path = bundle / "rootfs" / "etc" / "nvidia-container-runtime" / "config.toml"
    if how == "fifo":
        path.parent.mkdir(parents=True)
        os.mkfifo(path)
        return path, bundle
    _write(path, "untrusted")
    if how == "group-writable":
        path.chmod(0o664)
    elif how == "other-owner":
        os.chown(path, 4321, 4321)
    elif how == "dir-world-writable":
        path.parent.chmod(0o777)
    return path, bundle


@pytest.mark.parametrize(("how", "words"), UNTRUSTED, ids=[u[0] for u in UNTRUSTED])
def test_env_named_file_must_be_trusted(tmp_path: Path, how: str, words: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("ownership checks need root (chown, the bundle rule)")
    path, bundle = _untrusted(tmp_path, how)
    with pytest.raises(ConfigError) as info:
        load_config(None, {"NVIDIA_CTK_CONFIG_FILE_PATH": str(path)}, cwd=str(bundle))
    assert str(info.value).startswith(f"couldn't use configuration file {path} named by "
                                      "NVIDIA_CTK_CONFIG_FILE_PATH: ")
    assert words in str(info.value)


@pytest.mark.parametrize(("how", "words"), UNTRUSTED, ids=[u[0] for u in UNTRUSTED])
def test_untrusted_xdg_file_falls_through_to_etc(tmp_path: Path, how: str, words: str,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    if os.geteuid() != 0:
        pytest.skip("ownership checks need root (chown, the bundle rule)")
    target, bundle = _untrusted(tmp_path, how)
    xdg = target.parent.parent
    _write(Path(config_file.DEFAULT_CONFIG_PATH), "etc")
    with caplog.at_level("WARNING"):
        config = load_config(None, {"XDG_CONFIG_HOME": str(xdg)}, cwd=str(bundle))
    assert config.swarm_resource == "etc"
    assert f"ignoring {target} named by XDG_CONFIG_HOME: " in caplog.text


def test_config_file_that_is_a_fifo_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config(str(fifo), {})


def test_config_is_frozen() -> None:
    config = load_config(None, {})
    with pytest.raises(AttributeError):
        config.swarm_resource = "x"  # type: ignore[misc]


OS_RELEASE = [
    ('ID=opensuse-leap\nID_LIKE="suse opensuse"\n', "root:video"),
    ("ID=sles\nID_LIKE=suse\n", "root:video"),
    ("ID=debian\n", ""),
    ('ID=ubuntu\nID_LIKE="debian"\n', ""),
    ('ID_LIKE="notsuse"\n', ""),
]


@pytest.mark.parametrize(("text", "want"), OS_RELEASE,
                         ids=["opensuse", "sles", "debian", "ubuntu", "substring"])  # fmt: skip
def test_default_user(tmp_path: Path, text: str, want: str) -> None:
    path = tmp_path / "os-release"
    path.write_text(text)
    assert cfgmod.default_user(str(path)) == want
    assert cfgmod.default_user(str(tmp_path / "missing")) == ""


@pytest.mark.parametrize(
    ("value", "want"),
    [(" a ", "a"), ("\t\n a\r\v\f", "a"), ("\u00a0a\u3000", "a"), ("\x1ca\x1f", "\x1ca\x1f")],
    ids=["spaces", "ascii-whitespace", "unicode-space", "not-go-space"],
)
def test_go_trim_space(value: str, want: str) -> None:
    assert cfgmod.go_trim_space(value) == want


def test_in_a_user_namespace_host_roots_files_are_trusted() -> None:
    """A rootless runtime runs the hook in the user's namespace, where host root's files show
    the overflow uid: they stay trusted (the hook has no more power than its user there)."""
    import shutil
    import subprocess
    import sys

    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("setpriv") is None:
        pytest.skip("needs root, unshare and setpriv")
    import tempfile

    directory = Path(tempfile.mkdtemp(prefix="nvhook-userns-", dir="/tmp"))  # nobody can reach
    directory.chmod(0o755)
    path = directory / "config.toml"
    path.write_text("x = 1\n")
    code = ("import os, sys; from nvhook.config.load import untrusted_reason; "
            f"print(os.stat({str(path)!r}).st_uid, untrusted_reason({str(path)!r}, None))")
    try:
        proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               "unshare", "-U", "-r", sys.executable, "-c", code],
                              capture_output=True, text=True, check=False,
                              env={"PYTHONPATH": str(Path(__file__).parents[2])})
    finally:
        shutil.rmtree(directory)
    if proc.returncode and "unshare" in proc.stderr:
        pytest.skip(f"no unprivileged user namespaces: {proc.stderr.strip()}")
    assert proc.stdout.split() == ["65534", "None"], proc.stderr
