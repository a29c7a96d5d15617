"""The launcher of NVIDIA's hook commands (`nvidia-cdi-hook`, `nvidia-ctk`): a POSIX sh front
that starts Python only when there is work. Pure (text only).

A spec NVIDIA wrote runs five or six hook processes per container, one after the other; the
first of a group does the group's work (`nvhook.compat.cdihook.batch`) and leaves a record
for the others. A Python interpreter costs about 10 ms of CPU before its first line, a shell
about 1 ms, so the front answers, without Python:

- `nvidia-cdi-hook noop` / `nvidia-ctk hook noop` (no flags): exit 0, as NVIDIA's;
- a call listed in its container's record: exit 0, after emptying that entry. The record is
  `/run/nvhook/cdi-hooks/PID-START.NN`, one file per later call: the call's path and
  arguments, one per line (`record.call_lines`); PID-START names the container's first
  process as the host's procfs shows it - the topmost ancestor in this process's mount
  namespace (`record.container_key`, computed here the same way with `-ef` on the
  ns/mnt links). The front runs as root (`/` is its own: not a user namespace) and trusts
  only root's entries, no symlink among them; it compares every line with its arguments.

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

import shlex

from nvhook.launch.hook_records import RECORD_DIR, RECORD_PARENT


def render(kind: str, python: str, code: str, module: str, *, marker: str, version: str) -> str:
    """The launcher text of `kind` ("cdihook" or "ctk") for `python` running `code` (the
    Python launcher, which reads the launcher's path from argv[1]), appended to the sh front
    as a here-document; `module` is a file of nvhook the front checks before starting
    Python."""
    q = shlex.quote
    noop = "[ $# -eq 1 ] && [ \"$1\" = noop ]" if kind == "cdihook" else \
        "[ $# -eq 2 ] && [ \"$1\" = hook ] && [ \"$2\" = noop ]"
    gone = (f"cannot run {python} -IS with nvhook ({module} is missing): the installation "
            "moved or is gone (re-run `nvhook install`, or reinstall the nvhook package)")
    if f"\n{_END}\n" in f"\n{code}\n":
        raise ValueError(f"the Python launcher holds the line {_END}")
    text = _SH
    for token, value in (("@MARKER@", marker), ("@KIND@", kind), ("@VERSION@", version),
                         ("@NOOP@", noop), ("@PARENT@", q(RECORD_PARENT)),
                         ("@DIR@", q(RECORD_DIR)), ("@PYTHON@", q(python)),
                         ("@MODULE@", q(module)), ("@GONE@", q(gone)), ("@LOADER@", q(_LOADER)),
                         ("@END@", _END)):
        text = text.replace(token, value)
    return text + code + ("" if code.endswith("\n") else "\n") + _END + "\n"


_END = "NVHOOK_PYTHON_LAUNCHER"
# runs the Python text after the here-document line of the launcher (argv[1]), as its own file
_LOADER = (f'import sys;p=sys.argv[1];c=open(p,"rb").read().split(b"<<\'{_END}\'\\n",1)[1]'
           f';exec(compile(c[:c.rindex(b"{_END}")],p,"exec"))')


_SH = r"""#!/bin/sh
@MARKER@ (@KIND@), written by `nvhook install` (nvhook @VERSION@); re-run it after moving nvhook.
# NVIDIA's hooks behind a POSIX sh front (nvhook/launch/cdihook_sh.py): `noop`, and a hook
# whose work the first hook of its group did (root's record of it), exit here; every other
# call runs the Python launcher below.
unset IFS  # the default field splitting, whatever the environment says

# nvhook_stat PID: nvhook_pp (its parent) and nvhook_st (its start time) from /proc/PID/stat
nvhook_stat() {
	IFS= read -r nvhook_l <"/proc/$1/stat" || return 1
	nvhook_l=${nvhook_l##*) }  # after the command name, which may hold anything
	set -- $nvhook_l
	[ $# -ge 20 ] || return 1
	nvhook_pp=$2 nvhook_st=${20}
}

# nvhook_key: PID-START of the topmost ancestor in this process's mount namespace
nvhook_key() {
	IFS= read -r nvhook_l </proc/self/stat || return 1
	nvhook_pid=${nvhook_l%% *}
	nvhook_n=0
	while [ $nvhook_n -lt 64 ]; do
		nvhook_stat "$nvhook_pid" || return 1
		case $nvhook_pp in '' | *[!0-9]* | 0) return 1 ;; esac
		if ! [ "/proc/$nvhook_pp/ns/mnt" -ef /proc/self/ns/mnt ]; then
			[ -e "/proc/$nvhook_pp/ns/mnt" ] || return 1  # unreadable: not known to differ
			nvhook_key=$nvhook_pid-$nvhook_st
			return 0
		fi
		nvhook_pid=$nvhook_pp
		nvhook_n=$((nvhook_n + 1))
	done
	return 1
}

# nvhook_same FILE PATH ARGS...: whether FILE lists exactly this call, one word per line
nvhook_same() {
	nvhook_file=$1
	shift
	nvhook_n=0
	while IFS= read -r nvhook_l; do
		nvhook_n=$((nvhook_n + 1))
		[ $nvhook_n -le $# ] || return 1
		eval "[ \"\$nvhook_l\" = \"\${$nvhook_n}\" ]" || return 1
	done <"$nvhook_file"
	[ $nvhook_n -eq $# ]
}

# nvhook_done ARGS...: this call needs no work (noop, or listed in its container's record)
nvhook_done() {
	if @NOOP@; then
		return 0
	fi
	[ -O / ] || return 1  # root, not a user namespace's
	for nvhook_d in @PARENT@ @DIR@; do
		[ -d "$nvhook_d" ] && [ ! -h "$nvhook_d" ] && [ -O "$nvhook_d" ] || return 1
	done
	nvhook_key || return 1
	for nvhook_f in @DIR@/"$nvhook_key".*; do
		if [ -f "$nvhook_f" ] && [ ! -h "$nvhook_f" ] && [ -O "$nvhook_f" ] &&
			[ -s "$nvhook_f" ] && nvhook_same "$nvhook_f" "$0" "$@"; then
			: >"$nvhook_f" || return 1
			return 0
		fi
	done
	return 1
}

if nvhook_done "$@"; then
	exit 0
fi
if [ ! -x @PYTHON@ ] || [ ! -f @MODULE@ ]; then
	printf '%s: %s\n' "$0" @GONE@ >&2
	exit 127
fi
exec @PYTHON@ -IS -c @LOADER@ "$0" "$@"
exit 127
# The Python launcher (nvhook.launch.write), run by the line above; the shell never gets here.
: <<'@END@'
"""
