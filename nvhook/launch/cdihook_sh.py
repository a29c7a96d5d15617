"""The launcher of NVIDIA's hook commands (`nvidia-cdi-hook`, `nvidia-ctk`): a POSIX sh front
that starts Python only when there is work. Pure (text only).

The sh is `hookfront.sh` beside this module; `render` fills its header
(`nvhook.launch.shfile`) and puts the Python launcher into its closing here-document.

A spec NVIDIA wrote runs five or six hook processes per container, one after the other; the
first of a group does the group's work (`nvhook.compat.cdihook.batch`) and leaves a record
for the others. A Python interpreter costs about 10 ms of CPU before its first line, a shell
about 1 ms, so the front answers, without Python:

- `nvidia-cdi-hook noop` / `nvidia-ctk hook noop` (no flags): exit 0, as NVIDIA's;
- a call listed in its container's record: exit 0, after emptying that entry. The record is
  `/run/nvhook/cdi-hooks/PID-START.NN`, one file per later call: the call's path and
  arguments, one per line (`hook_records.call_lines`); PID-START names the container's first
  process as the host's procfs shows it - the topmost ancestor in this process's mount
  namespace (`hook_records.container_key`, computed here the same way with `-ef` on the
  ns/mnt links) - and only in the host's view: its "/" must be the root of the runtime that
  made the container (`-ef` on <proc>/PID/root, `hook_records.host_view`), as it is for a
  createContainer hook before pivot_root; a startContainer hook's "/" is the image's, where
  a record is the image's and is never looked up. The front runs as root (`/` is its own:
  not a user namespace) and trusts only root's entries, no symlink among them; it compares
  every line with its arguments.

Anything else - another command, no record or no match, an unreadable /proc - execs
`python3 -IS -c LOADER PATH ARGS...`: LOADER (`_LOADER`) reads the Python launcher of
`nvhook.launch.write` (environment hygiene, working directory, import paths) from the end of
this file, after the line the shell never gets to, and runs it with the launcher's path as
its first argument; the Python text stays readable in the file, and a re-execution (the
environment hygiene) finds the loader in its own command line. When the interpreter or
nvhook is gone, the front says so in one line and exits 127. The shell reads nothing from
its environment (dash: no ENV, no imported functions; IFS is unset here) and runs no other
program.
"""

from __future__ import annotations

from nvhook.launch.hook_records import RECORD_DIR, RECORD_PARENT
from nvhook.launch.shfile import TemplateError
from nvhook.launch.shfile import render as render_file

FILE = "hookfront.sh"
_END = "NVHOOK_PYTHON_LAUNCHER"
# runs the Python text after the here-document line of the launcher (argv[1]), as its own file
_LOADER = (f'import sys;p=sys.argv[1];c=open(p,"rb").read().split(b"<<\'{_END}\'\\n",1)[1]'
           f';exec(compile(c[:c.rindex(b"{_END}")],p,"exec"))')


def render(kind: str, python: str, code: str, module: str, *, marker: str, version: str) -> str:
    """The launcher text of `kind` ("cdihook" or "ctk") for `python` running `code` (the
    Python launcher, which reads the launcher's path from argv[1]), put in the sh front's
    closing here-document; `module` is a file of nvhook the front checks before starting
    Python."""
    gone = (f"cannot run {python} -IS with nvhook ({module} is missing): the installation "
            "moved or is gone (re-run `nvhook install`, or reinstall the nvhook package)")
    if f"\n{_END}\n" in f"\n{code}\n":
        raise ValueError(f"the Python launcher holds the line {_END}")
    text = render_file(FILE, f"{marker} ({kind}), written by `nvhook install` (nvhook "
                       f"{version}); re-run it after moving nvhook.", {
                           "nvhook_kind": kind, "nvhook_parent": RECORD_PARENT,
                           "nvhook_dir": RECORD_DIR, "nvhook_python": python,
                           "nvhook_module": module, "nvhook_gone": gone,
                           "nvhook_loader": _LOADER})
    closing = f"\n: <<'{_END}'\n{_END}\n"
    if not text.endswith(closing):
        raise TemplateError(f"{FILE}: does not end with an empty here-document {_END}")
    return text[:-len(_END) - 1] + code + ("" if code.endswith("\n") else "\n") + _END + "\n"
