"""NVIDIA 1.20's command surface in nvhook (nvhook.compat): the urfave grammar, the hook
dispatch, the CUDA compat decision, `config --set`, `runtime configure` against 1.20.0's own
output (committed fixtures), `cdi generate|list|transform` and `system` on the simulated driver.
No root needed; the container side of the hooks is tests/e2e/test_nvidia_hooks.py."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from nvhook.compat import urfave
from nvhook.compat.cdihook import cudacompat, params
from nvhook.compat.cdihook.nvidia_cdi_hook import main as cdi_hook
from nvhook.compat.nvctk import cdi, config
from nvhook.compat.nvctk.nvidia_ctk import main as ctk
from nvhook.compat.urfave import BOOL, SLICE, CliError, Flag
from nvhook.dev.sim import SimRoot
from nvhook.logrus import go_quote
from nvmount.plan.app_profile import gpu_mask
from tests.fixtures.nvidia_specs import CONFIGURE, CONFIGURE_CASES, RUNTIME_PATH, spec_for

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FLAGS = (Flag("dry-run", BOOL), Flag("runtime", default="docker", env=("RT",)),
         Flag("link", SLICE, env=("LINKS",)), Flag("set-as-default", BOOL, aliases=("s",)),
         Flag("old", refused="gone"))


# -- the grammar -----------------------------------------------------------------------------
@pytest.mark.parametrize(("argv", "env", "want"), [
    (["--runtime", "crio"], {}, {"runtime": "crio"}),
    (["--runtime=crio"], {}, {"runtime": "crio"}),
    (["-runtime", "crio"], {}, {"runtime": "crio"}),
    (["--runtime=a", "--runtime=b"], {}, {"runtime": "b"}),  # the last wins
    ([], {"RT": "containerd"}, {"runtime": "containerd"}),  # variable fallback
    (["--runtime=x"], {"RT": "containerd"}, {"runtime": "x"}),  # the flag wins
    (["--link", "a::/b", "--link=c::/d,e::/f"], {}, {"link": ["a::/b", "c::/d", "e::/f"]}),
    ([], {"LINKS": "a::/b, c::/d"}, {"link": ["a::/b", "c::/d"]}),
    (["--dry-run"], {}, {"dry-run": True}),
    (["--dry-run=false"], {}, {"dry-run": False}),
    (["-s"], {}, {"set-as-default": True}),
], ids=["space", "equals", "single-dash", "repeated", "env", "flag-over-env", "slice-commas",
        "slice-env", "bool", "bool-false", "alias"])
def test_grammar(argv: list[str], env: dict[str, str], want: dict[str, Any]) -> None:
    parsed = urfave.parse(argv, FLAGS, command="t", environ=env)
    for key, value in want.items():
        assert parsed.values[key] == value
    assert set(want) <= parsed.given


def test_positionals_and_terminator() -> None:
    parsed = urfave.parse(["x", "--dry-run", "--", "--runtime"], FLAGS, command="t", environ={})
    assert parsed.args == ["x", "--runtime"] and parsed.values["dry-run"] is True
    sub = urfave.parse(["--dry-run", "configure", "--runtime=a"], FLAGS, command="t",
                       environ={}, subcommands=True)
    assert sub.args == ["configure", "--runtime=a"] and sub.values["runtime"] == "docker"


@pytest.mark.parametrize(("argv", "env", "message"), [
    (["--bogus"], {}, "flag provided but not defined: -bogus"),
    (["--runtime"], {}, "flag needs an argument: -runtime"),
    (["--dry-run=maybe"], {}, 'invalid value "maybe" for flag -dry-run'),
    (["--old=x"], {}, "flag --old is not supported by nvhook's drop-in: gone"),
], ids=["undefined", "no-value", "bad-bool", "refused"])
def test_grammar_errors(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(CliError, match=message.replace("(", r"\(")):
        urfave.parse(argv, FLAGS, command="t", environ=env)


def test_refused_flag_through_its_variable() -> None:
    flags = (Flag("ldconfig-path", env=("LDP",), refused="no"),)
    with pytest.raises(CliError, match="ldconfig-path is not supported"):
        urfave.parse([], flags, command="t", environ={"LDP": "/sbin/ldconfig"})


@pytest.mark.parametrize(("text", "want"), [
    ("plain", "plain"), ("Found 17 CDI devices", '"Found 17 CDI devices"'),
    ('a "b"\nc', '"a \\"b\\"\\nc"'), ("\x1b[31m", '"\\x1b[31m"')])
def test_logrus_quoting(text: str, want: str) -> None:
    assert go_quote(text) == want


# -- the hook dispatch -------------------------------------------------------------------------
@pytest.mark.parametrize(("argv", "rc", "said"), [
    (["newer-hook", "--with-flags"], 0, "level=warning msg=\"Unsupported CDI hook: newer-hook\""),
    ([], 0, 'msg="No CDI hook specified"'),
    (["--bogus", "newer-hook"], 0, "Unsupported CDI hook: newer-hook"),
    (["create-symlinks", "--bogus"], 1, 'level=error msg="flag provided but not defined: -bogus"'),
    (["--bogus", "create-symlinks"], 1, "flag provided but not defined"),
    (["noop"], 0, ""),
    (["create-symlinks", "--link", "no-separator"], 1,
     'msg="invalid symlink specification no-separator"'),
    (["chmod", "--mode", "9z", "--path", "/x"], 1, "failed to parse mode as octal"),
    (["update-ldcache", "--folder", "relative"], 1, "not an absolute container path"),
], ids=["unknown-hook", "no-hook", "flag-before-unknown", "unknown-flag", "flag-before-known",
        "noop", "bad-link", "bad-mode", "relative-folder"])
def test_hook_dispatch(argv: list[str], rc: int, said: str,
                       capsys: pytest.CaptureFixture[str]) -> None:
    assert cdi_hook(argv, stdin=b"", environ={}) == rc
    assert said in capsys.readouterr().err


def test_versions(capsys: pytest.CaptureFixture[str]) -> None:
    assert cdi_hook(["--version"], environ={}) == 0
    assert ctk(["-v"], environ={}) == 0
    out = capsys.readouterr().out
    assert "NVIDIA CDI Hook version 1.20.0\n" in out
    assert "NVIDIA Container Toolkit CLI version 1.20.0\n" in out


def test_ctk_unknown_command_and_hook_passthrough(capsys: pytest.CaptureFixture[str]) -> None:
    assert ctk(["bogus"], environ={}) == 3
    assert "No help topic for 'bogus'" in capsys.readouterr().err
    assert ctk(["hook", "from-the-future"], environ={}) == 0
    assert "Unsupported CDI hook: from-the-future" in capsys.readouterr().err
    assert ctk(["--quiet", "hook", "from-the-future"], environ={}) == 0
    assert capsys.readouterr().err == ""


# -- enable-cuda-compat's decision ---------------------------------------------------------------
def elf_with_note(description: dict[str, Any] | None, owner: bytes = b"NVIDIA Corporation",
                  section: bytes = b".note.cuda.fwd_compatibility") -> bytes:
    """An ELF64 object with a section table: null, the note (SHT_NOTE) and .shstrtab."""
    desc = json.dumps(description).encode() if description is not None else b""
    name = owner + b"\0"
    name += b"\0" * (-len(name) % 4)
    note = struct.pack("<III", len(owner) + 1, len(desc), 1) + name + desc
    shstrtab = b"\0" + section + b"\0.shstrtab\0"
    note_off, str_off = 64, 64 + len(note)
    shoff = str_off + len(shstrtab) + (-(str_off + len(shstrtab)) % 8)
    header = b"\x7fELF\x02\x01\x01" + b"\0" * 9 + struct.pack(
        "<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 3, 2)
    sections = [struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
                struct.pack("<IIQQQQIIQQ", 1, 7, 2, 0, note_off, len(note), 0, 0, 4, 0),
                struct.pack("<IIQQQQIIQQ", 2 + len(section), 3, 0, 0, str_off, len(shstrtab),
                            0, 0, 1, 0)]
    body = header + note + shstrtab
    return body + b"\0" * (shoff - len(body)) + b"".join(sections)


def reader(data: bytes) -> Any:
    return lambda offset, size: data[offset:offset + size]


def test_note_is_read() -> None:
    doc = {"Format": 1, "CUDA Version": "12.8", "Driver": [535, 550], "Device": []}
    assert cudacompat.read_note(reader(elf_with_note(doc))) == doc
    assert cudacompat.read_note(reader(elf_with_note(doc, owner=b"Someone Else"))) is None
    assert cudacompat.read_note(reader(elf_with_note(doc, section=b".note.other"))) is None
    with pytest.raises(ValueError):
        cudacompat.read_note(reader(b"not an elf" * 10))
    truncated = elf_with_note(doc)[:-10]
    with pytest.raises(ValueError):
        cudacompat.read_note(reader(truncated))


NOTE = {"CUDA Version": "12.8", "Driver": [535, 550]}


@pytest.mark.parametrize(("compat", "note", "driver", "cuda", "use"), [
    ("570.86.10", NOTE, "550.54.15", "", True),  # listed branch, newer library
    ("570.86.10", NOTE, "560.28.03", "", False),  # branch not in the note
    ("550.40.07", NOTE, "550.54.15", "", False),  # not newer
    ("570.86.10", NOTE, "", "12.4", True),  # no driver: the note's CUDA version decides
    ("570.86.10", NOTE, "", "12.8", False),
    ("570.86.10", None, "550.54.15", "", True),  # no note: majors
    ("550.99.01", None, "550.54.15", "", False),
    ("570.86.10", None, "550.54.15", "12.4", False),  # no note and a CUDA version: never
    ("570.86.10", None, "", "", False),
    ("junk", None, "550.54.15", "", False),
], ids=["note-newer", "note-branch", "note-older", "note-cuda", "note-cuda-same",
        "major-newer", "major-same", "cuda-no-note", "nothing", "bad-version"])
def test_use_compat(compat: str, note: dict[str, Any] | None, driver: str, cuda: str,
                    use: bool) -> None:
    assert cudacompat.use_compat(compat, note, driver, cuda)[0] is use


def test_versions_parse_loosely() -> None:
    assert cudacompat.parse_version("535.104.05") == (535, 104, 5, 1, "")
    assert cudacompat.parse_version("v12.4") == (12, 4, 0, 1, "")
    assert cudacompat.parse_version("12.4.0-rc1") < cudacompat.parse_version("12.4.0")  # type: ignore[operator]
    assert cudacompat.parse_version("1.2.3.4") is None


# -- params, application profile ----------------------------------------------------------------
@pytest.mark.parametrize(("text", "want"), [
    (b"Mode: 1\nModifyDeviceFiles: 1\nX: 2\n", b"Mode: 1\nModifyDeviceFiles: 0\nX: 2\n"),
    (b"ModifyDeviceFiles: 0\n", None), (b"Other: 1\n", None)])
def test_params_rewrite(text: bytes, want: bytes | None) -> None:
    assert params.modified(text) == want


def test_gpu_mask() -> None:
    assert gpu_mask([0, 2]) == (0b101, [])
    assert gpu_mask([3, 64, 70]) == (0b1000, [64, 70])


# -- config --set --------------------------------------------------------------------------------
DEFAULT_NVIDIA = """#accept-nvidia-visible-devices-as-volume-mounts = false
disable-require = false

[nvidia-container-cli]
environment = []
load-kmods = true
#no-cgroups = false
#root = "/run/nvidia/driver"

[nvidia-container-runtime]
log-level = "info"
runtimes = ["runc", "crun"]
"""


@pytest.mark.parametrize(("item", "want"), [
    ("nvidia-container-cli.no-cgroups", ("nvidia-container-cli.no-cgroups", True)),
    ("nvidia-container-cli.no-cgroups=false", ("nvidia-container-cli.no-cgroups", False)),
    ("nvidia-container-cli.root=/x", ("nvidia-container-cli.root", "/x")),
    ("nvidia-container-runtime.runtimes=a:b", ("nvidia-container-runtime.runtimes", ["a", "b"])),
    ("nvidia-container-runtime.runtimes=a,b", ("nvidia-container-runtime.runtimes", ["a", "b"])),
    ("features.allow-unknown-oci-spec-fields=nil",
     ("features.allow-unknown-oci-spec-fields", None)),
    ("nvhook.sim-procfs=true", ("nvhook.sim-procfs", True)),
])
def test_set_value_types(item: str, want: tuple[str, object]) -> None:
    assert config.set_value(item, ":") == want


@pytest.mark.parametrize(("item", "message"), [
    ("bogus.key=1", 'undefined field: "bogus"'),
    ("nvidia-container-cli.root", "expected key=value"),
    ("nvidia-container-cli.load-kmods=yes", "invalid format"),
])
def test_set_value_errors(item: str, message: str) -> None:
    with pytest.raises(CliError, match=message):
        config.set_value(item, ":")


def test_set_keeps_comments_and_activates_commented_lines() -> None:
    text = config.set_key(DEFAULT_NVIDIA, "nvidia-container-cli.no-cgroups", True)
    text = config.set_key(text, "nvidia-container-cli.root", "/r")
    text = config.set_key(text, "accept-nvidia-visible-devices-as-volume-mounts", True)
    text = config.set_key(text, "nvidia-container-runtime.mode", "legacy")
    text = config.set_key(text, "features.no-additional-gids-for-device-nodes", True)
    lines = text.splitlines()
    assert "no-cgroups = true" in lines and 'root = "/r"' in lines
    assert lines[0] == "accept-nvidia-visible-devices-as-volume-mounts = true"
    assert lines.index('mode = "legacy"') == lines.index('runtimes = ["runc", "crun"]') + 1
    assert lines[-2:] == ["[features]", "no-additional-gids-for-device-nodes = true"]
    assert "#no-cgroups" not in text and "environment = []" in lines  # the rest kept
    removed = config.set_key(text, "features.no-additional-gids-for-device-nodes", None)
    assert "no-additional-gids" not in removed


def test_set_falls_back_to_a_full_rewrite() -> None:
    text = 'nvidia-container-cli = { root = "/a" }\n'  # an inline table: no line to edit
    out = config.set_key(text, "nvidia-container-cli.root", "/b")
    assert tomllib.loads(out) == {"nvidia-container-cli": {"root": "/b"}}


def test_config_command_in_place(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.toml"
    path.write_text(DEFAULT_NVIDIA)
    assert ctk(["config", "--config-file", str(path), "--set",
                "nvidia-container-cli.no-cgroups", "--in-place"], environ={}) == 0
    assert "no-cgroups = true" in path.read_text().splitlines()
    assert ctk(["config", "-c", str(path), "--set", "nvidia-container-cli.ldconfig=/sbin/x",
                "-i"], environ={}) == 1  # config check's error: not written
    assert "is not host-relative" in capsys.readouterr().err
    assert "/sbin/x" not in path.read_text()
    assert ctk(["config", "default", "-o", str(tmp_path / "d" / "c.toml")], environ={}) == 0
    from nvhook.config.default import default_text

    assert (tmp_path / "d" / "c.toml").read_text() == default_text()


# -- runtime configure against 1.20.0's own output ----------------------------------------------
def _docs(runtime: str, text: str) -> Any:
    if runtime == "docker":
        return json.loads(text)
    # 1.20 prints the drop-in, then the main file; nvhook the drop-in, then the main file's diff
    return tomllib.loads(text.split("\nimports = ")[0].split("\n--- ")[0])


def _runtime_table(runtime: str, doc: dict[str, Any]) -> tuple[Any, ...]:
    if runtime == "docker":
        return (doc["runtimes"]["nvidia"], doc.get("default-runtime"),
                (doc.get("features") or {}).get("cdi"))
    if runtime == "crio":
        runtime_section = doc["crio"]["runtime"]
        return runtime_section["runtimes"]["nvidia"], runtime_section.get("default_runtime")
    plugin = next(iter(doc["plugins"].values()))
    table = plugin["containerd"]["runtimes"]["nvidia"]
    return ({k: table[k] for k in ("runtime_type", "options")},
            plugin["containerd"].get("default_runtime_name")
            if doc.get("version") == 2 and "default_runtime_name" in str(plugin) else None,
            plugin.get("enable_cdi"))


@pytest.mark.parametrize("case", CONFIGURE_CASES, ids=[c[0] for c in CONFIGURE_CASES])
def test_runtime_configure_as_120_writes_it(case: tuple[str, str, str, str, list[str]],
                                           tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    name, runtime, main_name, text, flags = case
    main = tmp_path / main_name
    main.write_text(text)
    drop = [] if runtime == "docker" else ["--drop-in-config", str(tmp_path / "drop.toml")]
    argv = ["runtime", "configure", f"--runtime={runtime}", "--config", str(main), *drop,
            "--dry-run", f"--nvidia-runtime-path={RUNTIME_PATH}", *flags]
    assert ctk(argv, environ={}) == 0
    ours = _docs(runtime, capsys.readouterr().out)
    theirs = _docs(runtime, (CONFIGURE / name / "nvidia-ctk-1.20.0.out").read_text())
    assert _runtime_table(runtime, ours) == _runtime_table(runtime, theirs)
    if runtime == "docker":  # every other key kept (1.20 drops "buildkit": its bug)
        assert {k: v for k, v in ours.items() if k != "features"} == {
            k: v for k, v in json.loads(text).items() if k != "features"} | {
            k: v for k, v in ours.items() if k in ("runtimes", "default-runtime")}


def test_runtime_configure_writes_and_is_idempotent(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    daemon = tmp_path / "daemon.json"
    argv = ["runtime", "configure", "--runtime=docker", f"--config={daemon}",
            f"--runtime-path={RUNTIME_PATH}"]
    assert ctk(argv, environ={}) == 0
    assert json.loads(daemon.read_text())["runtimes"]["nvidia"]["path"] == RUNTIME_PATH
    assert ctk(argv, environ={}) == 0
    assert "already up to date" in capsys.readouterr().out


@pytest.mark.parametrize(("flags", "message"), [
    (["--runtime=podman"], "unrecognized runtime 'podman'"),
    (["--runtime=containerd", "--drop-in-config="], "nvhook writes a drop-in only"),
    (["--runtime=docker", "--drop-in-config=/x.json"], "does not support drop-in configs"),
    (["--runtime=crio", "--drop-in-config=rel.toml"], "is not an absolute path"),
    (["--runtime=containerd", "--config-source=command"], "--config-source=command"),
    (["--runtime=crio", "--nvidia-runtime-path=nvidia-container-runtime"],
     "is not an absolute path"),
    (["--config-mode=oci-hook", "--oci-hook-path=/x/hook.json"], "oci-nvidia-hook.json"),
], ids=["podman", "main-file", "docker-drop-in", "relative-drop-in", "command-source",
        "relative-runtime", "hook-file-name"])
def test_runtime_configure_refusals(flags: list[str], message: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert ctk(["runtime", "configure", "--dry-run", *flags], environ={}) == 1
    assert message in capsys.readouterr().err


# -- cdi -----------------------------------------------------------------------------------------
def test_cdi_generate_with_nvidia_flags(sim_root: SimRoot, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    env = {"NVIDIA_CTK_CDI_GENERATE_DEVICE_IDS": "1,GPU-" + sim_root.gpus[3].uuid[4:],
           "NVIDIA_CTK_CDI_GENERATE_VENDOR": "example.com"}
    out = tmp_path / "spec.json"
    assert ctk(["--config", sim_root.config_path, "cdi", "generate", "--output", str(out)],
               environ=env) == 0
    spec = json.loads(out.read_text())
    names = [d["name"] for d in spec["devices"]]
    assert spec["kind"] == "example.com/gpu"
    assert names == ["1", sim_root.gpus[1].uuid, "3", sim_root.gpus[3].uuid, "all"]
    paths = [n["path"] for n in spec["devices"][-1]["containerEdits"]["deviceNodes"]]
    assert [p for p in paths if p.startswith("/dev/nvidia")] == [
        f"/dev/nvidia{sim_root.gpus[1].minor}", f"/dev/nvidia{sim_root.gpus[3].minor}"]
    assert ctk(["--config", sim_root.config_path, "cdi", "generate", "--no-all-device",
                "--device-name-strategy=uuid", "--format=json"], environ={}) == 0
    names = [d["name"] for d in json.loads(capsys.readouterr().out)["devices"]]
    assert names == [g.uuid for g in sim_root.gpus]


@pytest.mark.parametrize(("flags", "message"), [
    (["--mode=imex"], "--mode=imex: not supported"),
    (["--disable-hook=all"], "flag --disable-hook is not supported"),
    (["--nvidia-cdi-hook-path=/usr/bin/nvidia-cdi-hook"], "runs nvhook's own hooks"),
    (["--device-name-strategy=index", "--device-name-strategy=type-index"], "type-index"),
    (["--feature-flag=enable-coherent-annotations"], "not supported by nvhook's drop-in"),
    (["--device-id=42"], "unknown device id(s) 42"),
], ids=["mode", "hooks", "hook-path", "strategies", "feature", "device-id"])
def test_cdi_generate_refusals(sim_root: SimRoot, flags: list[str], message: str,
                               capsys: pytest.CaptureFixture[str]) -> None:
    assert ctk(["--config", sim_root.config_path, "cdi", "generate", *flags], environ={}) == 1
    assert message in capsys.readouterr().err


def test_cdi_list_reads_nvidia_specs(tmp_path: Path, sim_root: SimRoot,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    for version in ("1.17.8", "1.20.0"):
        (tmp_path / f"{version}.yaml").write_text(yaml.safe_dump(spec_for(version, sim_root.path)))
    (tmp_path / "broken.yaml").write_text("kind: [")
    assert ctk(["cdi", "list", "--spec-dir", str(tmp_path)], environ={}) == 0
    out, err = capsys.readouterr()
    names = out.split()
    assert names == sorted(names) and len(names) == 17  # 0-7, 8 UUIDs, all: both specs agree
    assert "nvidia.com/gpu=all" in names and 'msg="Found 17 CDI devices"' in err
    assert "broken.yaml" in err  # a broken spec is a warning, the others listed


def test_cdi_transform_root(tmp_path: Path, sim_root: SimRoot) -> None:
    spec = spec_for("1.20.0", sim_root.path)
    cdi.transform_root(spec, str(sim_root.path), "/host", "host")
    nodes = spec["containerEdits"]["deviceNodes"]
    assert all(n["hostPath"].startswith("/host/dev/") for n in nodes)
    assert all(m["hostPath"].startswith("/host/") for m in spec["containerEdits"]["mounts"])
    hooks = spec["containerEdits"]["hooks"]
    assert hooks[0]["path"] == "/usr/bin/nvidia-cdi-hook"  # outside the root: unchanged
    cdi.transform_root(spec, "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "container")
    links = [a for h in hooks for a in h["args"] if "::" in a]
    assert links and all("/usr/lib/x86_64-linux-gnu" not in a for a in links)


def test_cdi_select_devices_rebuilds_all() -> None:
    edits = [{"deviceNodes": [{"path": f"/dev/nvidia{i}"}]} for i in range(3)]
    spec = {"devices": [{"name": str(i), "containerEdits": e} for i, e in enumerate(edits)]
            + [{"name": "all", "containerEdits": {}}]}
    out = cdi.select_devices(spec, ["2", "0"], all_device=True)
    assert [d["name"] for d in out["devices"]] == ["0", "2", "all"]
    assert out["devices"][-1]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia0"}, {"path": "/dev/nvidia2"}]


# -- system ------------------------------------------------------------------------------------
def test_dev_char_symlinks(sim_root: SimRoot, tmp_path: Path,
                           capsys: pytest.CaptureFixture[str]) -> None:
    char = tmp_path / "char"
    argv = ["--config", sim_root.config_path, "system", "create-dev-char-symlinks",
            "--driver-root", str(sim_root.path), "--dev-char-path", str(char)]
    assert ctk([*argv, "--dry-run"], environ={}) == 0
    assert not char.exists() and "Creating link" in capsys.readouterr().err
    assert ctk(argv, environ={}) == 0
    links = {p.name: str(p.readlink()) for p in char.iterdir()}
    for gpu in sim_root.gpus:
        assert links[f"195:{gpu.minor}"] == f"{sim_root.path}/dev/nvidia{gpu.minor}"
    assert links["195:255"] == f"{sim_root.path}/dev/nvidiactl"
    assert ctk(argv, environ={}) == 0  # again: each existing link is a warning, exit 0
    assert "Could not create symlink" in capsys.readouterr().err
    assert ctk([*argv, "--create-all", "--dry-run"], environ={}) == 0
    err = capsys.readouterr().err
    assert f"{char}/195:254 => {sim_root.path}/dev/nvidia-modeset" in err


@pytest.mark.parametrize(("old", "value", "want"), [
    ("/run/nvidia/driver", "/run/nvidia/driver-backup/lib/libcuda.so", None),  # #1955
    ("/run/nvidia/driver", "/run/nvidia/driverx", None),
    ("/run/nvidia/driver", "/run/nvidia/driver/lib/libcuda.so", "/host/lib/libcuda.so"),
    ("/run/nvidia/driver/", "/run/nvidia/driver/lib/libcuda.so", "/host/lib/libcuda.so"),
    ("/run/nvidia/driver/", "/run/nvidia/driver", "/host"),
    ("/run/nvidia/driver", "/run/nvidia/driver", "/host"),
    ("/", "/usr/lib/libcuda.so", "/host/usr/lib/libcuda.so"),
])
def test_cdi_transform_root_at_a_component_boundary(old: str, value: str,
                                                    want: str | None) -> None:
    """NVIDIA's #1955 (after 1.20.0): the root matches whole path components only."""
    from nvhook.compat.nvctk import cdi

    spec = {"devices": [], "containerEdits": {"mounts": [
        {"hostPath": value, "containerPath": "/c"}]}}
    cdi.transform_root(spec, old, "/host", "host")
    assert spec["containerEdits"]["mounts"][0]["hostPath"] == (want or value)
