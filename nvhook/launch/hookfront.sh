#!/bin/sh
# BEGIN header: `nvhook install` replaces these lines by its marker line and the same
# variables with the installation's values (nvhook.launch.shfile.render, .cdihook_sh.values).
nvhook_kind='cdihook'
nvhook_parent='/run/nvhook'
nvhook_dir='/run/nvhook/cdi-hooks'
nvhook_python='/usr/bin/python3'
nvhook_module='/usr/lib/python3/dist-packages/nvhook/__init__.py'
nvhook_gone='cannot run Python with nvhook'
nvhook_loader='raise SystemExit(127)'
# END header
# NVIDIA's hooks behind a POSIX sh front (nvhook/launch/hookfront.sh): `noop`, and a hook
# whose work the first hook of its group did (root's record of it), exit here; every other
# call runs the Python launcher below.
unset IFS  # the default field splitting, whatever the environment says

# nvhook_stat PID: nvhook_pp (its parent) and nvhook_st (its start time) from /proc/PID/stat
nvhook_stat() {
	IFS= read -r nvhook_l <"/proc/$1/stat" || return 1
	nvhook_l=${nvhook_l##*) }  # after the command name, which may hold anything
	# shellcheck disable=SC2086 # split into the fields of /proc/PID/stat
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
		# shellcheck disable=SC3013 # -ef: dash, bash and busybox sh have it
		if ! [ "/proc/$nvhook_pp/ns/mnt" -ef /proc/self/ns/mnt ]; then
			[ -e "/proc/$nvhook_pp/ns/mnt" ] || return 1  # unreadable: not known to differ
			# the host's view only: "/" is the root of the runtime that made the container
			# (createContainer, before pivot_root); after pivot_root it is the image's
			[ / -ef "/proc/$nvhook_pp/root" ] || return 1
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
	while IFS= read -r nvhook_l; do
		[ $# -gt 0 ] && [ "$nvhook_l" = "$1" ] || return 1
		shift
	done <"$nvhook_file"
	[ $# -eq 0 ]
}

# nvhook_done ARGS...: this call needs no work (noop, or listed in its container's record)
nvhook_done() {
	case $nvhook_kind in
	cdihook) [ $# -eq 1 ] && [ "$1" = noop ] && return 0 ;;
	*) [ $# -eq 2 ] && [ "$1" = hook ] && [ "$2" = noop ] && return 0 ;;
	esac
	[ -O / ] || return 1  # root, not a user namespace's
	nvhook_key || return 1  # the container, and "/" the host's: before any record path
	for nvhook_d in "$nvhook_parent" "$nvhook_dir"; do
		[ -d "$nvhook_d" ] && [ ! -h "$nvhook_d" ] && [ -O "$nvhook_d" ] || return 1
	done
	for nvhook_f in "$nvhook_dir/$nvhook_key".*; do
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
if [ ! -x "$nvhook_python" ] || [ ! -f "$nvhook_module" ]; then
	printf '%s: %s\n' "$0" "$nvhook_gone" >&2
	exit 127
fi
# shellcheck disable=SC2093 # a failed exec exits (127); the here-document below is data
exec "$nvhook_python" -IS -c "$nvhook_loader" "$0" "$@"
# The Python launcher (nvhook.launch.write), run by the line above; the shell never gets here.
# shellcheck disable=SC2317 # never run: the here-document holds the Python text
: <<'NVHOOK_PYTHON_LAUNCHER'
NVHOOK_PYTHON_LAUNCHER
