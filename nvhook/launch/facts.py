"""The facts the runtime launcher reads instead of the config file. Effects: /run/nvhook only.

The sh launcher (`nvhook.launch.runtime_sh`) cannot parse TOML; what it needs of a config file
the Python wrapper writes, after it loaded that file, into two root-only text files:

    <facts>          nvhook-runtime-facts 2       the format
                     0.1.0                        nvhook's version (the launcher's must match)
                     /etc/nvidia-container-runtime/config.toml    the config file
                     2049:1234:812:1700000000.123456789:1700000000.123456789
                                                  its identity when read (`identity`)
                     runc                         nvidia-container-runtime.runtimes, in order
                     crun
                     (an empty line)
    <facts>.needles  nvhook-runtime-facts 2 0.1.0 /etc/nvidia-container-runtime/config.toml ID
                     then the strings of `Settings.needles`, one per line (`grep -F -f`; the
                     first line, a pattern no config.json holds, names what they came from)

The identity is the config file's device, inode, size, mtime and ctime (nanoseconds), as
`stat -L -c '%d:%i:%s:%.9Y:%.9Z'` prints them: the launcher runs that `stat` once per call and
trusts the facts while they are owned by root, not symlinks, and name that file with that
identity. A config replaced in place or by rename, even with an older mtime (`cp -p`,
`rsync -t`, `tar x`, `touch -d`), has another ctime - which no copy tool can set - so its first
call goes to the wrapper. The directory is root's alone (0700), like every cache in
/run/nvhook. The wrapper rewrites the facts (needles first, each by rename) whenever they no
longer hold, and only when the config file still has the identity it had when read, so facts
never describe a file that changed meanwhile. No facts while the wrapper logs debug records
to its debug file (every call then goes through it and is logged), or for a value with a
newline.
"""

from __future__ import annotations

import os
import stat

from nvhook import __version__

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvhook.launch.runtime_log import RuntimeLog
    from nvhook.launch.settings import Settings

FACTS_DIR = "/run/nvhook"  # nvmount.cachefile.DEFAULT_DIR
FACTS_FORMAT = "nvhook-runtime-facts 2"
STAT_FORMAT = "%d:%i:%s:%.9Y:%.9Z"  # `identity` as GNU stat prints it
_READ_MAX = 1 << 16


def facts_path(config: str | None, directory: str = FACTS_DIR) -> str:
    """The facts file of a launcher that records `config` (None: the default lookup)."""
    import zlib

    return f"{directory}/runtime-{zlib.crc32((config or '').encode()):08x}"


def identity(stamp: tuple[int, ...]) -> str:
    """A config file's (dev, inode, size, mtime ns, ctime ns) as `stat -c STAT_FORMAT`."""
    dev, ino, size, mtime, ctime = stamp

    def seconds(ns: int) -> str:
        return f"{ns // 10**9}.{ns % 10**9:09d}"

    return f"{dev}:{ino}:{size}:{seconds(mtime)}:{seconds(ctime)}"


def facts_texts(settings: Settings) -> tuple[str, str] | None:
    """(facts, needles) file contents for `settings`, or None when they cannot be written."""
    if settings.path is None or settings.stamp is None:
        return None
    ident = identity(settings.stamp)
    head = [FACTS_FORMAT, __version__, settings.path, ident, *settings.runtimes]
    needles = settings.needles()
    if any("\n" in v or "\r" in v or not v for v in head) or any("\n" in n for n in needles):
        return None
    header = f"{FACTS_FORMAT} {__version__} {settings.path} {ident}\n"  # never matches
    return "\n".join(head) + "\n\n", header + "".join(f"{n}\n" for n in needles)


def logs_debug(settings: Settings) -> bool:
    return settings.log_level in ("debug", "trace") and settings.debug_file not in (
        "", "/dev/null")


def refresh_facts(path: str, settings: Settings, log: RuntimeLog) -> bool:
    """Rewrite the facts at `path` unless they are current; whether it wrote them."""
    texts = facts_texts(settings)
    if texts is None or os.geteuid() != 0 or logs_debug(settings) or settings.stamp is None:
        return False
    assert settings.path is not None
    try:
        st = os.stat(settings.path)
    except OSError:
        return False
    if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) != settings.stamp:
        return False  # changed since it was read: the next call writes facts for it
    suffixes = ((".needles", texts[1]), ("", texts[0]))
    if all(_read_own(path + suffix) == text.encode() for suffix, text in suffixes):
        return False
    dfd = _dir_fd(os.path.dirname(path) or ".", log)
    if dfd is None:
        return False
    try:
        for suffix, text in suffixes:
            _replace(dfd, os.path.basename(path) + suffix, text.encode())
    except OSError as err:
        log.debug(f"runtime facts {path}: {err.strerror}")
        return False
    finally:
        os.close(dfd)
    log.debug(f"runtime facts {path} written for {settings.path}")
    return True


def prime_facts(recorded: str | None) -> bool:
    """`nvhook install`: the facts of the config its launchers will read (none when it does
    not load: the first call then reaches the wrapper, which reports the error)."""
    from nvhook.errors import ConfigError
    from nvhook.launch.runtime_log import RuntimeLog
    from nvhook.launch.settings import load_settings

    try:
        settings = load_settings({}, recorded)
    except ConfigError:
        return False
    return refresh_facts(facts_path(recorded), settings, RuntimeLog())


def read_runtimes(path: str) -> tuple[str, ...]:
    """The runtime candidates of a facts file, whatever config it names (() when unusable):
    what a non-create call falls back to when the config file cannot be loaded."""
    data = _read_own(path)
    lines = data.decode("utf-8", "replace").split("\n") if data else []
    if len(lines) < 5 or lines[0] != FACTS_FORMAT:
        return ()
    out = []
    for line in lines[4:]:
        if not line:
            break
        out.append(line)
    return tuple(out)


def _read_own(path: str) -> bytes | None:
    """A root-owned regular file's bytes (no symlink), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
            return None
        return os.read(fd, _READ_MAX)
    finally:
        os.close(fd)


def _dir_fd(directory: str, log: RuntimeLog) -> int | None:
    """An fd on the facts directory if it is root's alone (created 0700 when missing)."""
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    except OSError as err:
        log.debug(f"runtime facts directory {directory}: {err.strerror}")
        return None
    try:
        fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    st = os.fstat(fd)
    if st.st_uid != 0 or st.st_mode & 0o077:
        os.close(fd)
        log.warning(f"runtime facts directory {directory} is not root's alone (mode "
                    f"{stat.S_IMODE(st.st_mode):o}, uid {st.st_uid}): not used")
        return None
    return fd


def _replace(dfd: int, name: str, data: bytes) -> None:
    tmp = f".{name}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                 dir_fd=dfd)
    try:
        os.write(fd, data)
        os.fchmod(fd, 0o644)
    finally:
        os.close(fd)
    try:
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except OSError:
        os.unlink(tmp, dir_fd=dfd)
        raise
