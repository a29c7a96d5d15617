"""The hook's first step for a container that wants no GPU: decline it before the hook is
even loaded. Stage: entry point (the launcher calls `screen` before importing `nvhook.cli`).

With runtime wrappers, CRI-O and Podman hooks.d files, every container runs the prestart hook,
and most want no GPU. The interpreter's own start is the floor of what a Python hook costs;
`screen` adds little to it: it imports only builtin modules (`posix`, `marshal`; not even
`os`, whose import alone would cost ~2.5 ms) and the one strict JSON decoder
(`nvmount.jsonio`, on `_json`) and answers "this container surely wants no
GPU, and nothing about its state, spec or config is an error", after which the launcher exits
0. Whenever it is not sure, it hands the state it read to the full hook, which decides
everything again, errors included. It declines only when all of these hold:

- the command line is `prestart`, or `--config /abs/path prestart` (no --debug, --dry-run);
  neither NVIDIA_CTK_CONFIG_FILE_PATH nor XDG_CONFIG_HOME is set;
- the config is the built-in default (no /etc/nvidia-container-runtime/config.toml), or a
  file whose validated facts are in the root-only config cache (`nvhook.config.load`: written
  by a full run after the file validated, keyed by its dev/inode/size/mtime/ctime), and the
  config keeps no debug log;
- the state and `config.json` decode as the hook decodes them (4 MiB bounds, a regular
  config.json, ociVersion/process/root present, the field types the hook expects), with
  every key spelled exactly (Go's case-insensitive matching is left to the hook), an
  absolute, clean bundle path, and a pid from 0 to 2^31-1;
- every `process.env` entry has "="; none of NVIDIA_VISIBLE_DEVICES, the swarm-resource
  variables or a non-empty CUDA_VERSION (a legacy CUDA image wants all GPUs) is set;
- no mount destination names nvidia-container-devices when volume-mount lists count;
- `process.capabilities` is absent, or (an ociVersion not of 1.0.0's prereleases, so the
  current format) an object whose capability sets are null or lists of strings.
"""

from __future__ import annotations

import marshal
import posix

from nvhook.config.basics import CONFIG_PATH_ENV, DEFAULT_CONFIG_PATH, XDG_ENV
from nvhook.hook.request_env import CUDA_VERSION, DEVICE_LIST_DIR, VISIBLE_DEVICES

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from typing import Any

MAX_DOCUMENT = 4 * 1024 * 1024  # nvhook.hook.oci.MAX_DOCUMENT_BYTES
CACHE = ("/run/nvhook", "config")  # nvmount.cachefile.DEFAULT_DIR, nvhook.config.load
CACHE_FORMAT = 1  # nvmount.cachefile.FORMAT
_CAP_SETS = frozenset(("bounding", "effective", "inheritable", "permitted", "ambient"))
_O_PATH = 0o10000000
_DEFER = (False, None)


def config_path(argv: list[str]) -> tuple[bool, str | None]:
    """(argv is a plain prestart, the --config value)."""
    if argv == ["prestart"]:
        return True, None
    if len(argv) == 3 and argv[2] == "prestart" and argv[0] in ("-config", "--config"):
        return True, argv[1]
    if len(argv) == 2 and argv[1] == "prestart":
        for flag in ("-config=", "--config="):
            if argv[0].startswith(flag):
                return True, argv[0][len(flag):]
    return False, None


def screen(argv: list[str], cwd: str) -> tuple[bool, bytes | None]:
    """(decline, the state bytes it read from stdin, or None when it read nothing)."""
    try:
        facts = _facts(argv)
        if facts is None:
            return _DEFER
        data = _read_state(0)
    except Exception:  # the hook itself reports whatever this was
        return _DEFER
    return declines(data, facts), data


def declines(data: bytes, facts: tuple[tuple[str, ...], bool]) -> bool:
    """Whether the container of state `data` surely wants no GPU (see the module docstring)."""
    try:
        return _decide(data, facts)
    except Exception:  # something unusual: the hook decides, and says why
        return False


def _facts(argv: list[str]) -> tuple[tuple[str, ...], bool] | None:
    """(swarm variables, volume mounts count) of the config, or None (let the hook decide)."""
    plain, explicit = config_path(argv)
    env = posix.environ
    if not plain or CONFIG_PATH_ENV.encode() in env or XDG_ENV.encode() in env:
        return None
    if explicit is not None and not explicit.startswith("/"):
        return None
    path = explicit or DEFAULT_CONFIG_PATH
    try:
        st = posix.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return None if explicit else ((), False)  # an explicit missing file is an error
    stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    from nvhook import __version__

    entries = _cache(__version__)
    hit = entries.get(path) if isinstance(entries, dict) else None
    if not isinstance(hit, tuple) or len(hit) != 3 or hit[0] != stamp:
        return None
    swarm, volume_mounts, debug_log = hit[2]
    return None if debug_log else (tuple(swarm), bool(volume_mounts))


def _cache(version: str) -> object:
    """The config cache's value, trusted as `nvmount.cachefile.load` trusts it, else None."""
    if posix.geteuid() != 0:
        return None
    dfd = posix.open(CACHE[0], _O_PATH | posix.O_DIRECTORY | posix.O_NOFOLLOW | posix.O_CLOEXEC)
    try:
        st = posix.fstat(dfd)
        if st.st_uid != 0 or st.st_mode & 0o077:
            return None
        fd = posix.open(CACHE[1], posix.O_RDONLY | posix.O_NOFOLLOW | posix.O_NONBLOCK
                        | posix.O_CLOEXEC, dir_fd=dfd)
    finally:
        posix.close(dfd)
    try:
        st = posix.fstat(fd)
        if (st.st_mode & 0o170000 != 0o100000 or st.st_uid != 0 or st.st_mode & 0o022
                or st.st_size > 16 << 20):
            return None
        fmt, saved, value = marshal.loads(posix.read(fd, st.st_size + 1))
    finally:
        posix.close(fd)
    return value if fmt == CACHE_FORMAT and saved == version else None


def _decode(data: bytes) -> Any:
    """As the hook decodes (`nvhook.hook.oci.decode_json`): one strict decoder for both."""
    from nvmount.jsonio import strict_loads

    return strict_loads(data, go=True, max_bytes=MAX_DOCUMENT)


def _read_state(fd: int) -> bytes:
    """stdin until EOF or a complete JSON object (as `nvhook.hook.oci` reads it), bounded."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = posix.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_DOCUMENT:
            raise ValueError("the state is too large")
        if chunk.rstrip().endswith(b"}"):
            data = b"".join(chunks)
            try:
                _decode(data)
            except Exception:
                continue
            return data


def _decide(data: bytes, facts: tuple[tuple[str, ...], bool]) -> bool:
    state = _object(_decode(data), ("pid", "bundle", "bundlepath"))
    pid = state.get("pid")
    if pid is not None and (type(pid) is not int or not 0 <= pid <= 2**31 - 1):
        return False
    bundle = state.get("bundle") or state.get("bundlePath")
    if not isinstance(bundle, str) or not _clean_absolute(bundle):
        return False
    spec = _object(_decode(_read_spec(bundle.rstrip("/") + "/config.json")),
                   ("ociversion", "process", "root", "mounts"))
    return _spec_wants_no_gpu(spec, *facts)


def _object(value: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """`value` as an object whose keys among `names` (any case) are spelled as the hook's."""
    if type(value) is not dict:
        raise ValueError("not an object")
    canonical = {"bundlepath": "bundlePath", "ociversion": "ociVersion"}
    for key in value:
        low = key.lower()
        if not key.isascii() or (low in names and key != canonical.get(low, low)):
            raise ValueError("a key the hook matches differently")
    return value


def _clean_absolute(path: str) -> bool:
    if not path.startswith("/") or "\0" in path or "//" in path:
        return False
    return not any(part in (".", "..") for part in path.split("/"))


def _read_spec(path: str) -> bytes:
    fd = posix.open(path, posix.O_RDONLY | posix.O_CLOEXEC | posix.O_NOCTTY | posix.O_NONBLOCK)
    try:
        st = posix.fstat(fd)
        if st.st_mode & 0o170000 != 0o100000 or st.st_size > MAX_DOCUMENT:
            raise ValueError("not a regular file of a sane size")
        data = posix.read(fd, MAX_DOCUMENT + 1)
    finally:
        posix.close(fd)
    if len(data) > MAX_DOCUMENT:
        raise ValueError("too large")
    return data


def _spec_wants_no_gpu(spec: dict[str, Any], swarm: tuple[str, ...],
                       volume_mounts: bool) -> bool:
    version, process, root = spec.get("ociVersion"), spec.get("process"), spec.get("root")
    if type(version) is not str or process is None or root is None:
        return False
    process = _object(process, ("env", "capabilities"))
    path = _object(root, ("path",)).get("path")
    if path is not None and type(path) is not str:
        return False
    env = _env(process.get("env"))
    if env is None or any(n in env for n in (VISIBLE_DEVICES, *swarm)):
        return False
    if env.get(CUDA_VERSION) or not _mounts_ok(spec.get("mounts"), volume_mounts):
        return False
    return _capabilities_ok(process.get("capabilities"), version)


def _env(entries: Any) -> dict[str, str] | None:
    env: dict[str, str] = {}
    if entries is None:
        return env
    if type(entries) is not list:
        return None
    for entry in entries:
        if type(entry) is not str or "=" not in entry:
            return None
        name, _, value = entry.partition("=")
        env[name] = value
    return env


def _mounts_ok(mounts: Any, volume_mounts: bool) -> bool:
    if mounts is None:
        return True
    if type(mounts) is not list:
        return False
    for mount in mounts:
        if mount is None:
            continue
        item = _object(mount, ("source", "destination"))
        src, dst = item.get("source"), item.get("destination")
        if any(v is not None and type(v) is not str for v in (src, dst)):
            return False
        if volume_mounts and dst and DEVICE_LIST_DIR in dst:
            return False
    return True


def _capabilities_ok(caps: Any, oci_version: str) -> bool:
    if caps is None:
        return True
    if oci_version.startswith("1.0.0-") or type(caps) is not dict:
        return False  # 1.0.0-rc1..rc4 select the old list format: the hook decides
    for key, value in caps.items():
        if not key.isascii():
            return False
        if key.lower() in _CAP_SETS and value is not None and not (
                type(value) is list and all(type(v) is str for v in value)):
            return False
    return True
