"""`nvhook config check` and `nvhook config default`: what is wrong with a config.toml before
a container start finds out, and the documented default file. Stage: commands, off the hook's
path.

    nvhook config check [--config PATH] [--json]   every finding, one line each; exit 1 on errors
    nvhook config default                          the default file (the package's conffile)

Findings (`check_document`, pure): `error` for what fails every GPU container (wrong types,
values outside their choices, a broken TOML file), `warning` for unknown keys (named with the
nearest known key: nvhook and NVIDIA both ignore them, so a typo silently keeps a default) and
`note` for keys nvhook reads for compatibility but does not act on (and why).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from nvhook.config.model import _SCHEMA, config_from_document, known_keys, unknown_keys
from nvhook.errors import ConfigError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvhook.flags import GlobalOptions

_JIT = ("nvhook's runtime has no jit-cdi mode (the hook, or the wrapper's spec mode, applies "
        "the engine's plan); for a spec file: nvidia-ctk cdi generate --feature-flag")
# Keys NVIDIA's tools read that change nothing in nvhook, and why.
UNUSED: dict[str, str] = {
    "nvidia-container-cli.path": "nvhook's engine runs in the hook's process: there is no "
                                 "nvidia-container-cli to find",
    "nvidia-container-cli.environment": "no nvidia-container-cli process is started",
    "nvidia-container-cli.no-pivot": "nvhook never pivots: it works on the rootfs through "
                                     "file descriptors in the container's mount namespace",
    "nvidia-container-cli.user": "no unprivileged helper process: NVML runs in a child of "
                                 "the hook with the hook's credentials",
    "nvidia-ctk.path": "nvhook's runtime adds no nvidia-ctk hooks (no jit-cdi mode); "
                       "/usr/bin/nvidia-ctk is nvhook's drop-in",
    "features.disable-cuda-compat-lib-hook": "there is no separate compat hook: "
                                             "nvidia-container-runtime.modes.legacy."
                                             "cuda-compat-mode decides",
    # NVIDIA 1.20's keys
    "nvidia-container-runtime.modes.jit-cdi.nvcdi-feature-flags": _JIT,
    "nvidia-container-runtime.modes.jit-cdi.nvcdi-disable-hooks": _JIT,
    "nvidia-container-runtime.modes.csv.compat-container-root":
        "nvhook's CSV (Tegra) backend finds CUDA compat libraries as for every image "
        "(/usr/local/cuda/compat)",
    "features.allow-unknown-oci-spec-fields": "nvhook's runtime wrapper edits config.json as "
                                              "JSON and keeps every field, known or not",
    "features.no-additional-gids-for-device-nodes": "nvhook's CDI specs carry no "
                                                    "additionalGids (cdiVersion 0.5.0)",
}
_LEVELS = ("error", "warning", "note")
_DEFAULTS: dict[str, Any] = {  # the defaults of UNUSED keys
    "nvidia-container-cli": {"environment": []}, "nvidia-ctk": {"path": "nvidia-ctk"},
    "nvidia-container-runtime": {"modes": {"csv": {"compat-container-root": ""}, "jit-cdi": {
        "nvcdi-feature-flags": [], "nvcdi-disable-hooks": []}}},
    "features": {"allow-unknown-oci-spec-fields": False, "disable-cuda-compat-lib-hook": False,
                 "no-additional-gids-for-device-nodes": False}}


def check_document(document: dict[str, Any], path: str) -> list[tuple[str, str, str]]:
    """(level, key, message) for every finding of a parsed config file, errors first."""
    findings = [("warning", key, f"unknown key {key}: ignored{_nearest_hint(key)}")
                for key in unknown_keys(document)]
    for key, _, _, _ in _SCHEMA:
        try:
            value = _value(document, key)
        except ConfigError as err:
            findings.append(("error", key, _strip(str(err), path)))
            continue
        if value is None:
            continue
        try:  # each key alone on the defaults: one finding per bad key, not the first only
            config_from_document(_single(key, value), path)
        except ConfigError as err:
            findings.append(("error", key, _strip(str(err), path)))
        else:
            if key in UNUSED and value != _value(_DEFAULTS, key):
                findings.append(("note", key, f"{key} is read but unused: {UNUSED[key]}"))
    return sorted(findings, key=lambda f: _LEVELS.index(f[0]))


def _value(document: dict[str, Any], dotted: str) -> Any:
    node: Any = document
    for depth, part in enumerate(dotted.split(".")):
        if not isinstance(node, dict):
            parent = ".".join(dotted.split(".")[:depth])
            raise ConfigError(f"invalid config {parent}: {parent} is not a table, it cannot "
                              f"hold {dotted}")
        if part not in node:
            return None
        node = node[part]
    return node


def _single(dotted: str, value: Any) -> dict[str, Any]:
    document: dict[str, Any] = {}
    node = document
    *parents, last = dotted.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return document


def _strip(message: str, path: str) -> str:
    for prefix in (f"invalid config {path}: ", "invalid config "):
        if message.startswith(prefix):
            return message[len(prefix):]
    return message


def _nearest_hint(key: str) -> str:
    """" (did you mean K?)" for the known key K nearest to `key`: a misspelt key or table of
    the same table, or a known key put in the wrong table."""
    import difflib

    def nearest(word: str, keys: list[str], last: bool, cutoff: float) -> list[str]:
        by_word = {(k.rsplit(".", 1)[-1] if last else k): k for k in keys}
        return [by_word[m] for m in difflib.get_close_matches(word, list(by_word), 1, cutoff)]

    known = list(known_keys())
    parent, _, last = key.rpartition(".")
    siblings = [k for k in known if k.rpartition(".")[0] == parent]
    tables = sorted({k.rsplit(".", n)[0] for k in known for n in range(1, k.count(".") + 1)})
    siblings += [t for t in tables if t.rpartition(".")[0] == parent]
    close = nearest(last, siblings, True, 0.7) or nearest(last, known, True, 0.8)
    return f" (did you mean {close[0]}?)" if close else ""


def main_config(argv: list[str], opts: GlobalOptions) -> int:
    parser = argparse.ArgumentParser(
        prog="nvhook config", description="check config.toml, or print the default one")
    sub = parser.add_subparsers(dest="action", required=True)
    check = sub.add_parser("check", help="list the problems of the config file the hook uses")
    check.add_argument("--json", action="store_true", help="print the findings as JSON")
    default = sub.add_parser("default", help="print the default config.toml")
    default.add_argument("--output", "-o", metavar="PATH",
                         help="write it to PATH instead (atomically, 0644)")
    args = parser.parse_args(argv)
    if args.action == "default":
        from nvhook.config.default import default_text

        if args.output:
            write_output(os.path.join(opts.cwd or os.getcwd(), args.output), default_text())
        else:
            sys.stdout.write(default_text())
        return 0
    return _run_check(opts, as_json=args.json)


def write_output(path: str, text: str) -> None:
    """`config default --output`: a trusted write (`nvmount.fs.trusted`: every directory on
    the way root's and writable by no one else, missing ones made 0755; mode 0644)."""
    from nvmount.errors import TrustError
    from nvmount.fs.trusted import write_atomic

    try:
        write_atomic(os.path.normpath(path), text.encode("utf-8"), "write config", mode=0o644,
                     parents=True)
    except TrustError as err:
        raise ConfigError(str(err)) from err
    except OSError as err:
        raise ConfigError(f"write config {path}: {err.strerror}") from err


def _run_check(opts: GlobalOptions, *, as_json: bool) -> int:
    from nvhook.config.load import _read_toml, find_config

    path, origin = find_config(opts.config_path, os.environ, opts.cwd)
    findings: list[tuple[str, str, str]] = []
    if path is not None:
        try:
            document = _read_toml(path, origin)
        except ConfigError as err:
            document, findings = None, [("error", "", str(err))]
        if document is not None:
            findings = check_document(document, path)
    shown = path if path is not None else "(none: built-in defaults)"
    if as_json:
        rows = [{"level": lv, "key": k, "message": m} for lv, k, m in findings]
        sys.stdout.write(json.dumps({"config": path, "origin": origin, "findings": rows},
                                    indent=2) + "\n")
    else:
        print(f"config {shown}" + (f" (named by {origin})" if origin else ""))
        for level, _, message in findings:
            print(f"{level}: {message}")
        errors = sum(1 for f in findings if f[0] == "error")
        print(f"{errors} error(s), {len(findings) - errors} other finding(s)"
              if findings else "ok: no problems found")
    return 1 if any(f[0] == "error" for f in findings) else 0
