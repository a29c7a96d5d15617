"""What a spec nvhook generated records and a later run trusts: policy, read only through the
trusted-path rule (`nvmount.fs.trusted`).

`nvhook cdi refresh` (the boot, udev, path and timer units) and `nvhook cdi check` regenerate
our spec from what its stamp and entries record: the config file it was generated with, the
driver root that config names, and the hook path its entries run. An admin who once passed
`--config ~/cfg.toml` or `--config /tmp/x.toml` did not mean every later refresh to trust a
file a user can write by then (a home directory, a /tmp file deleted and re-created), so each
recorded path must pass `check_path` now: the file (or directory) and every directory above
it root's and writable by no one else. Otherwise a `CdiError` of one line naming the path,
why, and what to do; the caller keeps the old spec as it is (exit 1).

| recorded         | where it comes from            | checked                                |
|------------------|--------------------------------|----------------------------------------|
| config file      | the stamp's `config=`          | `check_path` before it is read         |
| driver root      | that config's cli.root         | `check_path` (a directory)             |
| hook path        | the spec's first hook's `path` | `check_path` (runtimes run it as root) |

Effects: walks the recorded paths (openat, fstat), reads the recorded config.
"""

from __future__ import annotations

from typing import Any

from nvhook.errors import CdiError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvhook.config.model import HookConfig


def trusted(path: str, what: str, spec_path: str) -> None:
    """`path` passes the trusted-path rule, else a one-line CdiError. A missing path is
    judged by its nearest existing directory (only its owner could create the name there)."""
    import os

    from nvmount.errors import TrustError
    from nvmount.fs.trusted import check_path

    where = path
    for _ in range(64):
        try:
            check_path(where, what)
            return
        except TrustError as err:
            raise CdiError(
                f"{spec_path}: not regenerated, left as it was: {err} (the spec records it; "
                "regenerate it from trusted paths: nvhook --config FILE cdi generate "
                f"--output {spec_path})") from err
        except FileNotFoundError:
            if where in ("/", ""):
                break
            where = os.path.dirname(where.rstrip("/")) or "/"
        except OSError as err:
            raise CdiError(
                f"{spec_path}: not regenerated, left as it was: {what} {path}: "
                f"{err.strerror} (regenerate it: nvhook cdi generate --output {spec_path})"
            ) from err


def generate_warning(config_path: str | None) -> str | None:
    """A line for `cdi generate --output`: the config it records is not trusted now, so every
    later refresh of that spec will refuse (None: it is)."""
    from nvmount.errors import TrustError
    from nvmount.fs.trusted import check_path

    if not config_path:
        return None
    try:
        check_path(config_path, "the config")
    except TrustError as err:
        return (f"warning: {err}: the spec records it, and `nvhook cdi refresh` will refuse to "
                "regenerate it from there (move the config to a root-owned directory)")
    except OSError:
        return None
    return None


def policy(old: dict[str, Any], config: HookConfig, spec_path: str, *, explicit: bool,
           hook_path: str | None) -> HookConfig:
    """The config to regenerate `old` with: the one it records (when it still exists and the
    caller named none), trusted; its driver root and the spec's hook path trusted too."""
    from nvhook.cdi.check import recorded_config

    recorded = recorded_config(old)
    if recorded and not explicit and recorded != config.path:
        from nvhook.config.load import load_config

        trusted(recorded, "the config the spec was generated with", spec_path)
        config = load_config(recorded, {})
    if config.cli.root and config.cli.root != "/":
        trusted(config.cli.root, "the driver root the config names", spec_path)
    hooks = (old.get("containerEdits") or {}).get("hooks") or [{}]
    recorded_hook = hook_path or hooks[0].get("path") or ""
    if recorded_hook:
        trusted(str(recorded_hook), "the hook the spec runs", spec_path)
    return config
