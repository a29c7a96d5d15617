"""`nvhook runtime configure --runtime=containerd [--remove]`: the files it reads and writes.

Decisions are in `containerd` (the drop-in's content) and `imports` (the load order, the import
line); this module reads the main config and every file it imports, then writes:

1. the drop-in (default /etc/containerd/conf.d/99-nvidia.toml): re-derived on every run;
2. only when the main config does not import it: the main file with one `imports` entry added
   (the previous bytes kept as `<main>.nvhook.bak`), or a new main file where there was none
   (containerd's defaults and the import).

A config whose CRI plugin is disabled (Docker's containerd.io ships `disabled_plugins = ["cri"]`)
is refused: enabling CRI is the admin's decision, and a runtime for it would serve nothing.
`--dry-run` prints the drop-in and a diff of the main file, and writes nothing. Running it again
changes nothing. `remove` undoes it: the runtime leaves the drop-in (the file goes when nothing of
nvhook's is left; its directory too, when empty and the drop-in's header says nvhook made it),
and the main file gets its backup back when it is otherwise unchanged (or goes, when nvhook
created it), so it is byte for byte what it was.

`configure` and `remove` are the API (nvidia-ctk's `runtime configure` calls them with NVIDIA's
defaults); both print what they did and return the exit status.
"""

from __future__ import annotations

import contextlib
import difflib
import glob
import os
import sys
from typing import Any

from nvhook.admin.configure import containerd, imports
from nvhook.admin.configure.files import read_text, read_toml, write_atomic
from nvhook.errors import ConfigureError

BACKUP_SUFFIX = ".nvhook.bak"


def configure(main_path: str, drop_path: str, runtime_path: str, *, name: str = "nvidia",
              set_default: bool = False, enable_cdi: bool = False, dry_run: bool = False,
              default_version: int | None = None) -> int:
    """Register runtime `name` (`runtime_path`) with containerd's CRI plugin."""
    main_text = read_text(main_path)
    main_doc = read_toml(main_path) if main_text is not None else None
    version = containerd.config_version(main_doc, default_version or default_config_version())
    disabled = containerd.cri_disabled(main_doc, version)
    if disabled:
        raise ConfigureError(
            f"{main_path}: the CRI plugin is disabled (disabled_plugins has {disabled!r}, as "
            "Docker's containerd.io package ships it): Kubernetes cannot run pods through this "
            "containerd, so nvhook registers no runtime there (enable CRI yourself by removing "
            f"{disabled!r} from disabled_plugins, or configure Docker: --runtime=docker); "
            "nothing was written")
    before, after = _around(main_path, main_doc, version, drop_path)
    effective = containerd.effective_section([doc for _, doc in before], version)
    current = read_text(drop_path)
    owned = containerd.owned_runtimes(current)
    doc, names = containerd.drop_in_document(
        effective, read_toml(drop_path) if current is not None else None, owned, version, name,
        runtime_path, set_default=set_default, enable_cdi=enable_cdi, where=drop_path)
    from nvhook.admin.configure.tomlw import render_checked

    made = containerd.made_directory(current) or not os.path.isdir(os.path.dirname(drop_path))
    text = containerd.header(version, main_path, names, made_directory=made) + \
        render_checked(doc, drop_path)
    new_main = main_text
    if not imports.covers(main_doc, main_path, version, drop_path):
        pattern = imports.import_pattern(drop_path, main_path)
        new_main = imports.add_import(main_text, main_doc, pattern, version, main_path)
    if dry_run:
        sys.stdout.write(text + _diff(main_path, main_text, new_main))
        return 0
    _write(drop_path, current, text)
    if new_main != main_text:
        _edit_main(main_path, main_text, new_main or "")
    _masked_by(after, drop_path, version)
    return 0


def remove(main_path: str, drop_path: str, *, name: str = "nvidia",
           dry_run: bool = False) -> int:
    """Take runtime `name` out again; restore the main file nvhook edited or created."""
    main_text = read_text(main_path)
    main_doc = read_toml(main_path) if main_text is not None else None
    version = containerd.config_version(main_doc, default_config_version())
    current = read_text(drop_path)
    owned = containerd.owned_runtimes(current)
    gone = current is None or (owned is not None and set(owned) <= {name})
    if current is not None and not gone:
        before, _ = _around(main_path, main_doc, version, drop_path)
        effective = containerd.effective_section([doc for _, doc in before], version)
        doc = containerd.remove_runtime(read_toml(drop_path) or {}, version, name, effective)
        from nvhook.admin.configure.tomlw import render_checked

        left = [n for n in owned or () if n != name]
        text = (containerd.header(version, main_path, left,
                                  made_directory=containerd.made_directory(current))
                if owned is not None else "") + render_checked(doc, drop_path)
        if dry_run:
            sys.stdout.write(text)
            return 0
        _write(drop_path, current, text)
        return 0
    restored = _restored_main(main_path, main_text, main_doc, version, drop_path)
    if dry_run:
        if current is not None:
            print(f"would remove {drop_path}")
        sys.stdout.write(_diff(main_path, main_text, restored))
        return 0
    if current is not None:
        _unlink(drop_path)
        print(f"Removed {drop_path}")
        if containerd.made_directory(current):  # nvhook made it: it goes when empty
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(drop_path))
    if restored != main_text:
        _restore_main(main_path, restored)
    return 0


def default_config_version() -> int:
    """No main config: version 3 for a containerd 2.x binary, else 2."""
    import subprocess

    from nvhook.programs import trusted_which

    binary = trusted_which("containerd", os.environ.get("PATH", ""))
    if binary is None:  # absent, or where a user could have put it: not run as root
        return 2
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True,
                             timeout=10, check=False, cwd="/").stdout
    except OSError:
        return 2
    words = [w for w in out.split() if w.startswith(("v1.", "v2.", "1.", "2."))]
    return 3 if words and words[0].lstrip("v").startswith("2.") else 2


def _around(main_path: str, main_doc: dict[str, Any] | None, version: int,
            drop_path: str) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """The files containerd loads before the drop-in, and after it (where it would be loaded
    once it exists; at the end where nothing imports it yet)."""
    target = os.path.normpath(os.path.abspath(drop_path))

    def expand(pattern: str) -> list[str]:
        found = set(glob.glob(pattern))
        return sorted(found | {target}) if imports.matches(target, pattern) else sorted(found)

    def read(path: str) -> dict[str, Any] | None:
        return {} if path == target else _read_imported(path)

    order = imports.load_order(main_path, main_doc, version, read, expand)
    paths = [os.path.normpath(os.path.abspath(p)) for p, _ in order]
    if target not in paths:
        return order, []
    at = paths.index(target)
    return order[:at], order[at + 1:]


def _read_imported(path: str) -> dict[str, Any] | None:
    return read_toml(path) if os.path.isfile(path) else None


def _masked_by(after: list[tuple[str, Any]], drop_path: str, version: int) -> None:
    if version == 3:
        return
    for path, doc in after:
        if containerd.cri_section(doc, version) is not None:
            sys.stderr.write(
                f"warning: containerd reads {path} after {drop_path}, and its CRI plugin "
                "section replaces the whole section of the drop-in: the runtime is not seen "
                f"(move that file's CRI settings into the main config)\n")


def _diff(path: str, old: str | None, new: str | None) -> str:
    if old == new:
        return ""
    lines = difflib.unified_diff((old or "").splitlines(keepends=True),
                                 (new or "").splitlines(keepends=True),
                                 fromfile=path if old is not None else "/dev/null",
                                 tofile=path if new is not None else "/dev/null")
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def _write(path: str, current: str | None, text: str) -> None:
    if current == text:
        print(f"{path} is already up to date (nothing written)")
        return
    write_atomic(path, text)
    print(f"Wrote updated config to {path}")


def _edit_main(main_path: str, old: str | None, new: str) -> None:
    if old is None:
        write_atomic(main_path, new)
        print(f"Created {main_path} (containerd's defaults, importing the drop-in)")
        return
    backup = main_path + BACKUP_SUFFIX
    write_atomic(backup, old)
    write_atomic(main_path, new)
    print(f"Added the drop-in's directory to the imports of {main_path} (previous file: "
          f"{backup})")


def _restored_main(main_path: str, main_text: str | None, main_doc: dict[str, Any] | None,
                   version: int, drop_path: str) -> str | None:
    """The main file as it was before nvhook edited it, if nvhook's edit is all that changed
    (else the file as it is, with a note)."""
    if main_text is None:
        return None
    entry = imports.import_pattern(drop_path, main_path)
    others = [p for p in glob.glob(entry) if os.path.abspath(p) != os.path.abspath(drop_path)]
    backup = main_path + BACKUP_SUFFIX
    old = read_text(backup)
    if old is None:
        return None if main_text == imports.created_main(entry, version) and not others \
            else main_text
    old_doc = read_toml(backup)
    try:
        edited = imports.add_import(old, old_doc, entry, version, backup)
    except ConfigureError:
        edited = None
    if others or edited != main_text:
        why = f"{', '.join(others)} still use the import" if others else "it changed since"
        sys.stderr.write(f"note: {main_path} left as it is ({why}); nvhook's edit is the "
                         f"{entry!r} import, the file before it is {backup}\n")
        return main_text
    return old


def _restore_main(main_path: str, restored: str | None) -> None:
    backup = main_path + BACKUP_SUFFIX
    if restored is None:
        _unlink(main_path)
        print(f"Removed {main_path} (nvhook had created it)")
        return
    write_atomic(main_path, restored)
    _unlink(backup)
    print(f"Restored {main_path} from {backup}")


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as err:
        raise ConfigureError(f"remove {path}: {err.strerror}") from err
