"""Where the hook's config.toml is, and its parsed document (stage 0 of the hook, its I/O).

Lookup order (`find_config`, in the one order of `nvhook.config.basics`): `--config` >
`NVIDIA_CTK_CONFIG_FILE_PATH` >
`$XDG_CONFIG_HOME/nvidia-container-runtime/config.toml` -> `/etc/nvidia-container-runtime/
config.toml`. A missing explicit file is an error; missing default files mean built-in
defaults. The TOML document is parsed once per change of the file: it is kept in a root-only
cache (`nvmount.cachefile`, /run/nvhook) keyed by the file's dev/inode/size/mtime/ctime and
nvhook's version, so a container start with an unchanged config imports no TOML parser. The
document is validated every time (`nvhook.config.model.config_from_document`).

The hook's environment is an input an image may control (older runtimes and some wrappers hand
the hook the container's environment), so a file named by the environment is honoured only
when it is trusted (`untrusted_reason`): an absolute path to a regular file owned by root (or
by the user running the hook) and writable by nobody else, in directories that nobody else can
write to (sticky ones like /tmp excepted), and - for a hook running as root - not inside its
starting directory (runc: the container's bundle, which holds the image). A relative or
untrusted `NVIDIA_CTK_CONFIG_FILE_PATH` is an error; a relative or untrusted
`$XDG_CONFIG_HOME` file is skipped with a warning (the search goes on to /etc). `--config`
comes from the hook entry's arguments (the runtime's configuration) and is used as given.
Every file is opened O_NONBLOCK and must be a regular file (a FIFO cannot stall the hook); at
most 4 MiB is read.
"""

from __future__ import annotations

import os
import stat

from nvhook import __version__
from nvhook.config.basics import CONFIG_PATH_ENV, DEFAULT_CONFIG_PATH, EXPLICIT, XDG_ENV
from nvhook.config.basics import candidates as config_candidates
from nvhook.errors import ConfigError
from nvmount.bounds import shorten
from nvmount.cachefile import DEFAULT_DIR, file_stamp, load, store

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from nvhook.config.model import HookConfig

__all__ = ("CONFIG_PATH_ENV", "DEFAULT_CONFIG_PATH", "XDG_ENV")  # re-exported
MAX_CONFIG_BYTES = 4 * 1024 * 1024
_CACHE_NAME = "config"  # {path: (file stamp, document)} of the last few files parsed
_CACHED_FILES = 8


def find_config(
    explicit_path: str | None, environ: Mapping[str, str], cwd: str | None = None
) -> tuple[str | None, str]:
    """(path to load or None for built-in defaults, what named it: "--config",
    "NVIDIA_CTK_CONFIG_FILE_PATH", "XDG_CONFIG_HOME", or "" for /etc; the last two are
    optional). A relative `--config` is taken relative to `cwd` (the hook's original
    directory); a relative `NVIDIA_CTK_CONFIG_FILE_PATH` is an error."""
    for path, origin, _ in config_candidates(environ, explicit_path,
                                             default=DEFAULT_CONFIG_PATH):
        if origin == EXPLICIT:
            return (os.path.join(cwd, path) if cwd else path), EXPLICIT
        if origin == CONFIG_PATH_ENV:
            if not path.startswith("/"):
                raise ConfigError(
                    f"{CONFIG_PATH_ENV}={shorten(path)!r}: not an absolute path (paths from "
                    "the hook's environment must be absolute; name the file with --config "
                    "instead)")
            return path, CONFIG_PATH_ENV
        if origin == XDG_ENV:  # the XDG spec: a relative value is invalid and ignored
            if path.startswith("/") and os.path.exists(path):
                why = untrusted_reason(path, cwd)
                if why is None:
                    return path, XDG_ENV
                _warn(f"ignoring {shorten(path, 300)} named by {XDG_ENV}: {why}")
        elif os.path.exists(path):
            return path, ""
    return None, ""


def _warn(message: str) -> None:
    from nvmount.log import get_logger

    get_logger(__name__).warning("%s", message)


def untrusted_reason(path: str, cwd: str | None) -> str | None:
    """Why `path` must not configure the hook (None: trusted). See the module docstring."""
    trusted = _trusted_owners()
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return None  # missing or unreadable: the open reports it
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid not in trusted or st.st_mode & 0o022:
        return _who_may_write(real, st)
    parent = os.path.dirname(real)
    while True:
        try:
            pst = os.lstat(parent)
        except OSError as err:
            return f"cannot check directory {parent}: {err.strerror}"
        sticky = pst.st_mode & stat.S_ISVTX
        if pst.st_uid not in trusted or (pst.st_mode & 0o022 and not sticky):
            return f"directory {parent} is {_who_may_write(parent, pst)}"
        if parent == "/":
            break
        parent = os.path.dirname(parent)
    if cwd and os.geteuid() == 0:
        base = os.path.realpath(cwd)  # "/" is no bundle (crun starts hooks there: userns)
        if base != "/" and (real == base or real.startswith(base + "/")):
            return (f"it is inside the hook's starting directory {base} (the container's "
                    "bundle: the image must not configure the hook)")
    return None


def _trusted_owners() -> set[int]:
    """Root and the hook's user; in a user namespace (a rootless runtime runs the hook there,
    with no more power than its user) also the overflow uid, which host root's files show."""
    owners = {0, os.geteuid()}
    try:
        with open("/proc/self/uid_map", "rb") as f:
            initial = f.read(256).split() == [b"0", b"0", b"4294967295"]
        if not initial:
            with open("/proc/sys/kernel/overflowuid", "rb") as f:
                owners.add(int(f.read(16).strip() or b"65534"))
    except (OSError, ValueError):
        pass
    return owners


def _who_may_write(path: str, st: os.stat_result) -> str:
    mode = st.st_mode & 0o777
    return (f"owned by uid {st.st_uid} with mode {mode:04o}: writable by someone other than "
            "root (trusted files are owned by root and writable only by it)")


def load_config(
    explicit_path: str | None, environ: Mapping[str, str], *, cwd: str | None = None
) -> HookConfig:
    """The hook's configuration: from the file `find_config` names, else built-in defaults.

    The parsed document is cached with what `nvhook.launch.screen` needs of the validated config."""
    from nvhook.config.model import config_from_document

    path, origin = find_config(explicit_path, environ, cwd)
    if path is None:
        return config_from_document({}, None)
    if origin == CONFIG_PATH_ENV:  # trusted first, cached or not (the module docstring)
        why = untrusted_reason(path, cwd)
        if why is not None:
            raise ConfigError(f"couldn't use configuration file {shorten(path, 300)} named by "
                              f"{CONFIG_PATH_ENV}: {why}")
    stamp = file_stamp(path)
    entries = cached_entries()
    hit = entries.get(path)
    if not (isinstance(hit, tuple) and len(hit) == 3 and hit[0] == stamp
            and isinstance(hit[1], dict)):
        hit = None  # absent, stale, or not what this version writes: a miss
    if hit is not None and isinstance(hit[2], tuple):
        return config_from_document(dict(hit[1]), path)
    document = dict(hit[1]) if hit is not None else _read_toml(path, origin)
    if document is None:
        return config_from_document({}, None)
    config = config_from_document(document, path)
    if stamp is not None:  # cached only once it validated
        kept = {k: v for k, v in list(entries.items())[-(_CACHED_FILES - 1):] if k != path}
        store(DEFAULT_DIR, _CACHE_NAME, __version__,
              {**kept, path: (stamp, document, gate_facts(config))})
    return config


def cached_entries() -> dict[str, Any]:
    """{path: (file stamp, document, gate facts)} of the config cache ({} when none)."""
    cached = load(DEFAULT_DIR, _CACHE_NAME, __version__)
    return cached if isinstance(cached, dict) else {}


def gate_facts(config: HookConfig) -> tuple[tuple[str, ...], bool, bool]:
    """What `nvhook.launch.screen` needs of a validated config: the swarm-resource variable names,
    whether /dev/null volume mounts can request devices, and whether a debug log is kept
    (then every container goes through the hook, which logs its decision)."""
    from nvhook.config.basics import swarm_names

    return (swarm_names(config.swarm_resource),
            config.accept_nvidia_visible_devices_as_volume_mounts, bool(config.cli.debug))


def _read_toml(path: str, origin: str) -> dict[str, Any] | None:
    """The parsed file; None when an optional (default) file vanished after the lookup."""
    data = _read_bounded(path, origin)
    if data is None:
        return None
    from nvhook.config.toml_read import TomlUnavailable, loads

    try:
        return loads(data.decode("utf-8"))
    except TomlUnavailable as err:
        raise ConfigError(f"couldn't parse configuration file {path}: {err}") from err
    except ValueError as err:  # UnicodeDecodeError, TOMLDecodeError, int()'s digit limit
        raise ConfigError(
            f"couldn't parse configuration file {path}: {shorten(str(err), 200)} (fix the TOML "
            "syntax)"
        ) from err


def _read_bounded(path: str, origin: str) -> bytes | None:
    """At most MAX_CONFIG_BYTES of the regular file `path`, opened without blocking."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError as err:
        if origin in ("", XDG_ENV):
            return None
        raise ConfigError(
            f"couldn't open required configuration file {path}: file does not exist "
            f"(named by {origin}; create it or name an existing file)"
        ) from err
    except OSError as err:
        raise ConfigError(f"couldn't open configuration file {path}: {err.strerror}") from err
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"couldn't open configuration file {path}: not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_CONFIG_BYTES and (chunk := os.read(fd, MAX_CONFIG_BYTES + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as err:
        raise ConfigError(f"couldn't read configuration file {path}: {err.strerror}") from err
    finally:
        os.close(fd)
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(f"couldn't load configuration file {path}: larger than 4 MiB")
    return b"".join(chunks)
