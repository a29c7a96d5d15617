#!/bin/sh
# BEGIN header: `nvhook install` replaces these lines by its marker line and the same
# variables with the installation's values (nvhook.launch.shfile.render, .runtime_sh.values).
nvhook_python='/usr/bin/python3'
nvhook_module='/usr/lib/python3/dist-packages/nvhook/runtime/wrapper.py'
nvhook_config=''
nvhook_facts='/run/nvhook/runtime-00000000'
nvhook_version='0'
nvhook_format='nvhook-runtime-facts 2'
nvhook_stat='/usr/bin/stat'
nvhook_stat_format='%d:%i:%s:%.9Y:%.9Z'
nvhook_code='raise SystemExit(127)'
nvhook_gone='cannot run the runtime wrapper'
nvhook_gone_json='cannot run the runtime wrapper'
nvhook_runtimes='runc'
nvhook_grep='/bin/grep'
nvhook_needles='NVIDIA_'
nvhook_global_values=' root log '
nvhook_global_bools=' debug help h version v '
nvhook_bundle_names=' bundle b '
nvhook_create_values=' bundle b pid-file '
nvhook_create_bools=' no-pivot '
nvhook_run_values=' bundle b pid-file '
nvhook_run_bools=' no-pivot detach d '
nvhook_default_config='/etc/nvidia-container-runtime/config.toml'
nvhook_xdg_relative='nvidia-container-runtime/config.toml'
# END header
# The runtime wrapper behind a POSIX sh front (nvhook/launch/runtime.sh): a call that cannot
# concern a container's GPUs - every command but create and run, and a create or run whose
# config.json names no NVIDIA variable - execs the low-level runtime without starting Python.
# nvhook_runtimes and nvhook_needles hold one entry per line; the flag lists (made from
# nvhook/launch/runtime_flags.py) one name per word, with a space before and after each.
set -f
nvhook_nl='
'
nvhook_log='' nvhook_fmt=text nvhook_cmd='' nvhook_bundle='' nvhook_slow='' nvhook_rt=''
nvhook_ident=''
nvhook_help='' nvhook_h='' nvhook_version_flag='' nvhook_v_flag=''

# the Python wrapper (nvhook.runtime.wrapper.launched) with the whole command line
nvhook_wrapper() {
	if [ ! -x "$nvhook_python" ] || [ ! -f "$nvhook_module" ]; then
		printf 'nvhook-runtime: %s\n' "$nvhook_gone" >&2
		if [ -n "$nvhook_log" ] && [ "$nvhook_log" != /dev/null ]; then
			nvhook_now=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ 2>/dev/null)
			if [ "$nvhook_fmt" = json ]; then
				printf '{"level":"error","msg":"%s","time":"%s"}\n' "$nvhook_gone_json" \
					"$nvhook_now" >>"$nvhook_log"
			else
				printf 'time="%s" level=error msg="%s"\n' "$nvhook_now" "$nvhook_gone_json" \
					>>"$nvhook_log"
			fi
		fi
		exit 127
	fi
	exec "$nvhook_python" -IS -c "$nvhook_code" "$0" "$nvhook_config" "$nvhook_facts" "$@"
}

# BEGIN nvhook_parse: runc's global flags as Go's flag package parses them; the command word;
# the bundle of a create or run that runc and crun read alike (nvhook_create_flags).
# nvhook_slow: the wrapper must decide.
nvhook_parse() {
	while [ $# -gt 0 ]; do
		case $1 in
		--) shift; break ;;
		-?*) ;;
		*) break ;;
		esac
		case $1 in
		--*) nvhook_f=${1#--} ;;
		*) nvhook_f=${1#-} ;;
		esac
		case $nvhook_f in
		'' | -* | =*) nvhook_slow=1; return ;;
		*=*) nvhook_n=${nvhook_f%%=*} nvhook_v=${nvhook_f#*=} nvhook_has=1 ;;
		*) nvhook_n=$nvhook_f nvhook_v='' nvhook_has='' ;;
		esac
		case $nvhook_n in *[!a-z0-9-]*) nvhook_slow=1; return ;; esac
		case $nvhook_global_values in
		*" $nvhook_n "*)
			if [ -z "$nvhook_has" ]; then
				[ $# -ge 2 ] || { nvhook_slow=1; return; }
				shift
				nvhook_v=$1
			fi
			case $nvhook_n in
			log) nvhook_log=$nvhook_v ;;
			log-format) nvhook_fmt=$nvhook_v ;;
			esac ;;
		*)
			case $nvhook_global_bools in *" $nvhook_n "*) ;; *) nvhook_slow=1; return ;; esac
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
		esac
		shift
	done
	case $nvhook_help$nvhook_h$nvhook_version_flag$nvhook_v_flag in
	?*) nvhook_slow=1; return ;;  # help or version: the wrapper prints them
	esac
	nvhook_cmd=${1-}
	case $nvhook_cmd in
	create) nvhook_values=$nvhook_create_values nvhook_bools=$nvhook_create_bools ;;
	run) nvhook_values=$nvhook_run_values nvhook_bools=$nvhook_run_bools ;;
	*) return ;;
	esac
	shift
	nvhook_create_flags "$@" || nvhook_slow=1
}

# nvhook_create_flags ARGS...: the bundle of a create or run when runc and crun both read it
# so (`--name`, `--name=value`, `-x`; the flags of the lists; a value not starting with -;
# the container id last); false: the wrapper must read the line (nvhook.launch.command_line)
nvhook_create_flags() {
	nvhook_id=''
	while [ $# -gt 0 ]; do
		[ -z "$nvhook_id" ] || return 1
		case $1 in
		-- | --? | --?=*) return 1 ;;
		--?*) nvhook_f=${1#--} ;;
		-?) nvhook_f=${1#-} ;;
		-*) return 1 ;;
		*) nvhook_id=$1; shift; continue ;;
		esac
		case $nvhook_f in
		?*=?*) nvhook_n=${nvhook_f%%=*} nvhook_v=${nvhook_f#*=} ;;
		*=*) return 1 ;;
		*) nvhook_n=$nvhook_f nvhook_v='' ;;
		esac
		case $nvhook_n in *[!a-z0-9-]*) return 1 ;; esac
		case $nvhook_values in
		*" $nvhook_n "*)
			if [ "$nvhook_f" = "$nvhook_n" ]; then
				[ $# -ge 2 ] || return 1
				case $2 in -*) return 1 ;; esac
				shift
				nvhook_v=$1
			fi
			case $nvhook_bundle_names in *" $nvhook_n "*) nvhook_bundle=$nvhook_v ;; esac ;;
		*)
			case $nvhook_bools in *" $nvhook_n "*) ;; *) return 1 ;; esac
			[ "$nvhook_f" = "$nvhook_n" ] || return 1 ;;
		esac
		shift
	done
	[ -n "$nvhook_id" ]
}
# END nvhook_parse

# nvhook_cfg: the config file the wrapper reads ('' for the built-in defaults), in the order
# of nvhook.config.basics.candidates (the variable names: a test checks them)
nvhook_config_file() {
	if [ -n "${NVIDIA_CTK_CONFIG_FILE_PATH-}" ]; then
		nvhook_cfg=$NVIDIA_CTK_CONFIG_FILE_PATH
	elif [ -n "$nvhook_config" ]; then
		nvhook_cfg=$nvhook_config
	elif [ -n "${XDG_CONFIG_HOME-}" ] &&
		[ -e "$XDG_CONFIG_HOME/$nvhook_xdg_relative" ]; then
		nvhook_cfg=$XDG_CONFIG_HOME/$nvhook_xdg_relative
	elif [ -e "$nvhook_default_config" ]; then
		nvhook_cfg=$nvhook_default_config
	else
		nvhook_cfg=''
	fi
}

# nvhook_ident: the config file's identity as the facts record it (nvhook.launch.facts:
# device, inode, size, mtime, ctime - what no copy tool sets), read once per call
nvhook_identify() {
	[ -z "$nvhook_ident" ] || return 0
	[ -x "$nvhook_stat" ] || return 1
	nvhook_ident=$(LC_ALL=C "$nvhook_stat" -L -c "$nvhook_stat_format" -- "$nvhook_cfg" \
		2>/dev/null) && [ -n "$nvhook_ident" ]
}

# a facts file the wrapper wrote (root's, no symlink), and the config file's identity
nvhook_fresh() {
	[ -O "$1" ] && [ ! -h "$1" ] && nvhook_identify
}

# nvhook_rt: an executable regular file, not this launcher
nvhook_exe() {
	# shellcheck disable=SC3013 # -ef: dash, bash and busybox sh have it
	[ -f "$1" ] && [ -x "$1" ] && ! [ "$1" -ef "$0" ] && nvhook_rt=$1
}

# nvhook_find NAME: a path with a / as is, else on PATH, then the default directories
nvhook_find() {
	case $1 in */*) nvhook_exe "$1"; return ;; esac
	nvhook_ifs=$IFS
	IFS=:
	for nvhook_d in ${PATH-}; do
		IFS=$nvhook_ifs
		[ -n "$nvhook_d" ] && nvhook_exe "$nvhook_d/$1" && return 0
	done
	IFS=$nvhook_ifs
	for nvhook_d in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
		case :${PATH-}: in *:"$nvhook_d":*) continue ;; esac
		nvhook_exe "$nvhook_d/$1" && return 0
	done
	return 1
}

# the first runtime candidate found (nvidia-container-runtime.runtimes)
nvhook_pick() {
	if [ -z "$nvhook_cfg" ]; then
		nvhook_ifs0=$IFS
		IFS=$nvhook_nl
		for nvhook_c in $nvhook_runtimes; do
			IFS=$nvhook_ifs0
			nvhook_find "$nvhook_c" && return 0
		done
		IFS=$nvhook_ifs0
		return 1
	fi
	nvhook_fresh "$nvhook_facts" || return 1
	{
		IFS= read -r nvhook_l1 && IFS= read -r nvhook_l2 && IFS= read -r nvhook_l3 &&
			IFS= read -r nvhook_l4 && [ "$nvhook_l1" = "$nvhook_format" ] &&
			[ "$nvhook_l2" = "$nvhook_version" ] && [ "$nvhook_l3" = "$nvhook_cfg" ] &&
			[ "$nvhook_l4" = "$nvhook_ident" ] || return 1
		while IFS= read -r nvhook_c && [ -n "$nvhook_c" ]; do
			nvhook_find "$nvhook_c" && return 0
		done
	} <"$nvhook_facts"
	return 1
}

# true when the bundle's config.json names none of the strings a GPU container needs
nvhook_screen() {
	nvhook_json=${nvhook_bundle:-.}/config.json
	[ -f "$nvhook_json" ] && [ ! -h "$nvhook_json" ] && [ -x "$nvhook_grep" ] || return 1
	if [ -z "$nvhook_cfg" ]; then
		LC_ALL=C "$nvhook_grep" -q -F -e "$nvhook_needles" -- "$nvhook_json"
	else
		nvhook_fresh "$nvhook_facts.needles" &&
			IFS= read -r nvhook_l1 <"$nvhook_facts.needles" &&
			[ "$nvhook_l1" = "$nvhook_format $nvhook_version $nvhook_cfg $nvhook_ident" ] ||
			return 1
		LC_ALL=C "$nvhook_grep" -q -F -f "$nvhook_facts.needles" -- "$nvhook_json"
	fi
	[ $? -eq 1 ]
}

nvhook_parse "$@"
[ -z "$nvhook_slow" ] || nvhook_wrapper "$@"
nvhook_config_file
case $nvhook_cmd in
create | run) nvhook_screen || nvhook_wrapper "$@" ;;
esac
nvhook_pick || nvhook_wrapper "$@"
exec "$nvhook_rt" "$@"
