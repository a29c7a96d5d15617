"""The launchers' sh, as shipped and as written, passes shellcheck; the header is the only
part `render` fills, and the rendered fronts run under every POSIX sh a node may have.

`shellcheck -s sh` runs on `nvhook/launch/*.sh`, on every sh launcher `nvhook install` writes
(values with quotes, spaces, `$`, backticks and newlines in them) and on the packaging scripts.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from nvhook.launch import runtime_sh, shfile, write
from nvhook.launch.write import render
from tests.fixtures.required import missing

REPO = Path(__file__).resolve().parent.parent.parent
SCRIPTS = ("packaging/setup.sh", "packaging/build-deb", "packaging/image/install-on-host")
ODD = "/opt/it's a \"dir\" $HOME `x`"
SHELLS = [s for s in (["/bin/sh"], ["/bin/dash"], ["/bin/bash", "--posix"],
                      ["/bin/busybox", "sh"]) if Path(s[0]).exists()]


def shellcheck(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("shellcheck")
    if tool is None:
        missing("shellcheck is not installed (apt-get install shellcheck; packaging/setup.sh "
                "installs it)")
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=120,
                          check=False)


def launchers(paths: list[str], config: str | None) -> dict[str, str]:
    return {kind: render(kind, "/usr/bin/python3", paths, version="0.1.0",
                         loader=("LD_PRELOAD",), xoption="nvhook-reexec", config=config)
            for kind in ("runtime", "ctk", "cdihook")}


def test_the_shipped_sh_files_pass_shellcheck() -> None:
    files = sorted(str(p) for p in (REPO / "nvhook/launch").glob("*.sh"))
    assert len(files) >= 2
    proc = shellcheck("-s", "sh", *files)
    assert proc.returncode == 0, proc.stdout


def test_the_packaging_scripts_pass_shellcheck() -> None:
    proc = shellcheck(*(str(REPO / s) for s in SCRIPTS))
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize(("paths", "config"), [
    (["/usr/lib/python3/dist-packages"], None),
    ([ODD, "/x\ny"], f"{ODD}/config.toml"),
])
def test_every_written_sh_launcher_passes_shellcheck(tmp_path: Path, paths: list[str],
                                                      config: str | None) -> None:
    for kind, text in launchers(paths, config).items():
        assert text.startswith("#!/bin/sh\n# nvhook hook launcher")
        (tmp_path / kind).write_text(text)
    proc = shellcheck("-s", "sh", *sorted(str(p) for p in tmp_path.iterdir()))
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("shell", SHELLS, ids=[" ".join(s) for s in SHELLS])
def test_the_header_holds_the_values_exactly(tmp_path: Path, shell: list[str]) -> None:
    """Every header variable, read back by the shell, is the value given (no expansion)."""
    odd = {"nvhook_python": ODD, "nvhook_module": "a\nb", "nvhook_config": "",
           "nvhook_facts": "'", "nvhook_version": "$(id)", "nvhook_format": "x y",
           "nvhook_stat": "/s t", "nvhook_code": "\\n`", "nvhook_gone": "*",
           "nvhook_gone_json": "--", "nvhook_needles": "\\u\n\\/"}
    values = {**runtime_sh.values("/usr/bin/python3", ["/x"], version="0"), **odd}
    text = shfile.render("runtime.sh", "# m", values)
    head = text[:text.index("\n# The runtime wrapper behind")]
    names = shfile.header_names(shfile.source("runtime.sh"))
    show = "".join(f'printf "%s\\0" "${n}"\n' for n in names)
    proc = subprocess.run([*shell, "-c", head + "\n" + show], capture_output=True, timeout=30,
                          check=True)
    assert proc.stdout.decode().split("\0")[:-1] == list(values.values())


def test_render_takes_exactly_the_header_names() -> None:
    names = shfile.header_names(shfile.source("hookfront.sh"))
    assert "nvhook_loader" in names
    with pytest.raises(shfile.TemplateError):
        shfile.render("hookfront.sh", "# m", dict.fromkeys(names[1:], "x"))
    with pytest.raises(shfile.TemplateError):
        shfile.render("hookfront.sh", "# m", {**dict.fromkeys(names, "x"), "nvhook_extra": ""})


@pytest.mark.parametrize("kind", ["hook", "cli", "ctk", "cdihook"])
def test_the_python_launcher_header_holds_the_values_exactly(kind: str) -> None:
    """launcher.pyt: the header is the only part written; it compiles for every kind, and
    the header, run alone, binds the values given (odd paths and loader names too)."""
    values = write.python_values(kind, [ODD, "/x\ny"], loader=("LD_PRELOAD", "GCONV_PATH"),
                                 xoption="nvhook-reexec", config=f"{ODD}/c.toml")
    text = write.render(kind, "/usr/bin/python3", [ODD, "/x\ny"], version="0.1.0",
                        loader=("LD_PRELOAD", "GCONV_PATH"), xoption="nvhook-reexec",
                        config=f"{ODD}/c.toml")
    if kind in ("ctk", "cdihook"):  # the Python text is the sh front's here-document
        text = text.split("<<'NVHOOK_PYTHON_LAUNCHER'\n", 1)[1].rsplit(
            "NVHOOK_PYTHON_LAUNCHER", 1)[0]
    assert text.startswith("#!/usr/bin/python3 -IS\n# nvhook hook launcher")
    compile(text, kind, "exec")
    bound: dict[str, object] = {}
    exec(text[:text.index("\n# The Python launcher")], bound)
    assert {k: bound[k] for k in values} == values
    assert shfile.header_names(shfile.source(write.PYTHON_FILE)) == tuple(values)
