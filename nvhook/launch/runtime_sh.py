"""The runtime wrapper's launcher: a POSIX sh front that starts Python only when it must. Pure.

`nvhook install` writes this for the `runtime` kind (`nvidia-container-runtime`,
`nvhook-runtime`). containerd's shim calls the runtime four times per container (create, start,
delete, delete --force), and with `nvidia` as the default runtime every container on the node
pays for each call. The launcher decides from its argv and two file tests, with no process but
`/bin/grep` on a create, whether the call can go straight to the low-level runtime:

1. runc's global flags are parsed as runc parses them (Go's `flag` grammar, `nvhook.launch.argv`;
   a property test runs runc itself against both parsers); anything the grammar refuses,
   `--help`/`--version`, crun's extra flags or an unknown flag goes to the wrapper;
2. the config file is found as the wrapper finds it (NVIDIA_CTK_CONFIG_FILE_PATH, the recorded
   `nvhook install --config`, $XDG_CONFIG_HOME, /etc); with none, the built-in defaults;
3. with a config file, the facts the wrapper derived from it (`nvhook.launch.facts`: the
   runtime candidates of `nvidia-container-runtime.runtimes` and the strings whose absence
   proves a config.json wants no GPU) are read from a root-owned file in /run/nvhook that must
   be newer than the config file and name it; otherwise the call goes to the wrapper, which
   rewrites the facts, so the next call is fast again;
4. a `create` or `run` whose bundle's config.json (a regular file, no symlink) contains none of
   those strings (`grep -F`, the wrapper's own `may_want_gpus` test) is not a GPU container:
   it goes to the runtime untouched; any other create goes to the wrapper;
5. the runtime is looked up as the wrapper looks it up (a path with a `/` as is, a name on
   PATH then the default directories, an executable regular file, never the launcher itself)
   and exec'd with the same arguments and environment; not found: the wrapper reports it.

The wrapper is `python3 -IS -c ...` (isolated, no site) with the launcher's path, the recorded
config and the facts path as its first arguments (`nvhook.runtime.wrapper.launched`). When the
interpreter or nvhook is gone, the launcher says so in one line on stderr and in runc's `--log`
file (JSON with `--log-format json`, where Docker and containerd read the error) and exits 127.
The environment is the daemon's, passed on unchanged (the launcher sets no variable; the shell
itself exports PWD, the working directory the runtime runs in anyway).
"""

from __future__ import annotations

import json
import shlex

from nvhook.launch.facts import FACTS_DIR, FACTS_FORMAT, facts_path
from nvhook.runtime.settings import DEFAULT_RUNTIMES, Settings

GREP = "/bin/grep"


def render(python: str, paths: list[str], *, version: str, marker: str,
           config: str | None = None, facts_dir: str = FACTS_DIR) -> str:
    """The launcher text for `python` importing nvhook from `paths` (the first holds it)."""
    q = shlex.quote
    code = _PYTHON.format(paths=json.dumps(paths), shown=json.dumps(", ".join(paths)))
    module = f"{paths[0]}/nvhook/runtime/wrapper.py"
    gone = (f"cannot run the runtime wrapper: {python} or {module} is missing: the "
            "installation moved or is gone (re-run `nvhook install`, or reinstall the nvhook "
            "package)")
    defaults = Settings()
    return _SH.format(
        marker=marker, version=version, python=q(python), module=q(module),
        config=q(config or ""), facts=q(facts_path(config, facts_dir)),
        ver=q(version), code=q(code), gone=q(gone), gone_json=q(json.dumps(gone)[1:-1]),
        runtimes=" ".join(q(r) for r in DEFAULT_RUNTIMES), format=q(FACTS_FORMAT), grep=GREP,
        needles=" ".join(f"-e {q(n)}" for n in defaults.needles()))


_PYTHON = """import gc
import sys
gc.disable()  # a short-lived process: no collection passes (the hook's launcher does the same)
sys.path.extend({paths})
try:
    from nvhook.runtime.wrapper import launched
except ImportError as err:
    sys.stderr.write("%s: cannot import nvhook (%s) from %s: the installation moved or is gone "
                     "(re-run `nvhook install`, or reinstall the nvhook package)\\n"
                     % (sys.argv[1], err, {shown}))
    raise SystemExit(127)
launched(sys.argv[1:])
"""

_SH = r"""#!/bin/sh
{marker} (runtime), written by `nvhook install` (nvhook {version}); re-run it after moving nvhook.
# The runtime wrapper behind a POSIX sh front (nvhook/launch/runtime_sh.py): a call that cannot
# concern a container's GPUs - every command but create and run, and a create or run whose
# config.json names no NVIDIA variable - execs the low-level runtime without starting Python.
set -f
nvhook_python={python}
nvhook_module={module}
nvhook_config={config}
nvhook_facts={facts}
nvhook_version={ver}
nvhook_log='' nvhook_fmt=text nvhook_cmd='' nvhook_bundle='' nvhook_slow='' nvhook_rt=''
nvhook_help='' nvhook_h='' nvhook_version_flag='' nvhook_v_flag=''

# the Python wrapper (nvhook.runtime.wrapper.launched) with the whole command line
nvhook_wrapper() {{
	if [ ! -x "$nvhook_python" ] || [ ! -f "$nvhook_module" ]; then
		printf 'nvhook-runtime: %s\n' {gone} >&2
		if [ -n "$nvhook_log" ] && [ "$nvhook_log" != /dev/null ]; then
			nvhook_now=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ 2>/dev/null)
			if [ "$nvhook_fmt" = json ]; then
				printf '{{"level":"error","msg":"%s","time":"%s"}}\n' {gone_json} \
					"$nvhook_now" >>"$nvhook_log"
			else
				printf 'time="%s" level=error msg="%s"\n' "$nvhook_now" {gone_json} \
					>>"$nvhook_log"
			fi
		fi
		exit 127
	fi
	exec "$nvhook_python" -IS -c {code} "$0" "$nvhook_config" "$nvhook_facts" "$@"
}}

# BEGIN nvhook_parse: runc's global flags as Go's flag package parses them; the command word;
# the last -b/--bundle value of a create or run. nvhook_slow: the wrapper must decide.
nvhook_parse() {{
	while [ $# -gt 0 ]; do
		case $1 in
		--) shift; break ;;
		-?*) ;;
		*) break ;;
		esac
		case $1 in
		--*) nvhook_f=${{1#--}} ;;
		*) nvhook_f=${{1#-}} ;;
		esac
		case $nvhook_f in
		'' | -* | =*) nvhook_slow=1; return ;;
		*=*) nvhook_n=${{nvhook_f%%=*}} nvhook_v=${{nvhook_f#*=}} nvhook_has=1 ;;
		*) nvhook_n=$nvhook_f nvhook_v='' nvhook_has='' ;;
		esac
		case $nvhook_n in
		root | log | log-format | criu | rootless)
			if [ -z "$nvhook_has" ]; then
				[ $# -ge 2 ] || {{ nvhook_slow=1; return; }}
				shift
				nvhook_v=$1
			fi
			case $nvhook_n in
			log) nvhook_log=$nvhook_v ;;
			log-format) nvhook_fmt=$nvhook_v ;;
			esac ;;
		debug | systemd-cgroup | help | h | version | v)
			case $nvhook_has$nvhook_v in
			'' | 11 | 1t | 1T | 1TRUE | 1true | 1True) nvhook_on=1 ;;
			10 | 1f | 1F | 1FALSE | 1false | 1False) nvhook_on='' ;;
			*) nvhook_slow=1; return ;;
			esac
			case $nvhook_n in  # each its own flag, the last value wins
			help) nvhook_help=$nvhook_on ;;
			h) nvhook_h=$nvhook_on ;;
			version) nvhook_version_flag=$nvhook_on ;;
			v) nvhook_v_flag=$nvhook_on ;;
			esac ;;
		*) nvhook_slow=1; return ;;
		esac
		shift
	done
	case $nvhook_help$nvhook_h$nvhook_version_flag$nvhook_v_flag in
	?*) nvhook_slow=1; return ;;  # help or version: the wrapper prints them
	esac
	nvhook_cmd=${{1-}}
	case $nvhook_cmd in
	create | run) shift ;;
	*) return ;;
	esac
	while [ $# -gt 0 ]; do
		case $1 in
		--) return ;;
		-*)
			nvhook_f=$1
			while [ "${{nvhook_f#-}}" != "$nvhook_f" ]; do nvhook_f=${{nvhook_f#-}}; done
			case $nvhook_f in
			b=* | bundle=*) nvhook_bundle=${{nvhook_f#*=}} ;;
			b | bundle)
				[ $# -ge 2 ] || {{ nvhook_slow=1; return; }}
				shift
				nvhook_bundle=$1 ;;
			esac ;;
		esac
		shift
	done
}}
# END nvhook_parse

# nvhook_cfg: the config file the wrapper reads ('' for the built-in defaults)
nvhook_config_file() {{
	if [ -n "${{NVIDIA_CTK_CONFIG_FILE_PATH-}}" ]; then
		nvhook_cfg=$NVIDIA_CTK_CONFIG_FILE_PATH
	elif [ -n "$nvhook_config" ]; then
		nvhook_cfg=$nvhook_config
	elif [ -n "${{XDG_CONFIG_HOME-}}" ] &&
		[ -e "$XDG_CONFIG_HOME/nvidia-container-runtime/config.toml" ]; then
		nvhook_cfg=$XDG_CONFIG_HOME/nvidia-container-runtime/config.toml
	elif [ -e /etc/nvidia-container-runtime/config.toml ]; then
		nvhook_cfg=/etc/nvidia-container-runtime/config.toml
	else
		nvhook_cfg=''
	fi
}}

# a facts file the wrapper wrote (root's, no symlink) that is newer than the config file
nvhook_fresh() {{
	[ -O "$1" ] && [ ! -h "$1" ] && [ -e "$nvhook_cfg" ] && [ "$1" -nt "$nvhook_cfg" ]
}}

# nvhook_rt: an executable regular file, not this launcher
nvhook_exe() {{
	[ -f "$1" ] && [ -x "$1" ] && ! [ "$1" -ef "$0" ] && nvhook_rt=$1
}}

# nvhook_find NAME: a path with a / as is, else on PATH, then the default directories
nvhook_find() {{
	case $1 in */*) nvhook_exe "$1"; return ;; esac
	nvhook_ifs=$IFS
	IFS=:
	for nvhook_d in ${{PATH-}}; do
		IFS=$nvhook_ifs
		[ -n "$nvhook_d" ] && nvhook_exe "$nvhook_d/$1" && return 0
	done
	IFS=$nvhook_ifs
	for nvhook_d in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
		case :${{PATH-}}: in *:"$nvhook_d":*) continue ;; esac
		nvhook_exe "$nvhook_d/$1" && return 0
	done
	return 1
}}

# the first runtime candidate found (nvidia-container-runtime.runtimes)
nvhook_pick() {{
	if [ -z "$nvhook_cfg" ]; then
		for nvhook_c in {runtimes}; do nvhook_find "$nvhook_c" && return 0; done
		return 1
	fi
	nvhook_fresh "$nvhook_facts" || return 1
	{{
		IFS= read -r nvhook_l1 && IFS= read -r nvhook_l2 && IFS= read -r nvhook_l3 &&
			[ "$nvhook_l1" = {format} ] && [ "$nvhook_l2" = "$nvhook_version" ] &&
			[ "$nvhook_l3" = "$nvhook_cfg" ] || return 1
		while IFS= read -r nvhook_c && [ -n "$nvhook_c" ]; do
			nvhook_find "$nvhook_c" && return 0
		done
	}} <"$nvhook_facts"
	return 1
}}

# true when the bundle's config.json names none of the strings a GPU container needs
nvhook_screen() {{
	nvhook_json=${{nvhook_bundle:-.}}/config.json
	[ -f "$nvhook_json" ] && [ ! -h "$nvhook_json" ] && [ -x {grep} ] || return 1
	if [ -z "$nvhook_cfg" ]; then
		LC_ALL=C {grep} -q -F {needles} -- "$nvhook_json"
	else
		nvhook_fresh "$nvhook_facts.needles" &&
			IFS= read -r nvhook_l1 <"$nvhook_facts.needles" &&
			[ "$nvhook_l1" = {format}" $nvhook_version $nvhook_cfg" ] || return 1
		LC_ALL=C {grep} -q -F -f "$nvhook_facts.needles" -- "$nvhook_json"
	fi
	[ $? -eq 1 ]
}}

nvhook_parse "$@"
[ -z "$nvhook_slow" ] || nvhook_wrapper "$@"
nvhook_config_file
case $nvhook_cmd in
create | run) nvhook_screen || nvhook_wrapper "$@" ;;
esac
nvhook_pick || nvhook_wrapper "$@"
exec "$nvhook_rt" "$@"
"""
