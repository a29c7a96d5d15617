#!/usr/bin/env bash
# Set up a Debian/Ubuntu machine for nvhook's demo and tests: the system packages they need,
# then a virtual environment (.venv, on the system interpreter /usr/bin/python3) with nvhook
# and its test tools.
#
#   bash packaging/setup.sh [--clients] [--no-venv] [-- COMMAND [ARG...]]
#
#   --clients   also the container engines and clients of the e2e client tests (docker.io,
#               containerd, podman, netavark, crun, uidmap) and mmdebstrap (the package
#               tests' Debian roots); .ci/run uses it. Without them those tests skip.
#   --no-venv   system packages only.
#   -- COMMAND  then run COMMAND from the checkout, as root (README: `-- .venv/bin/nvhook demo`).
#
# It elevates itself with sudo only when not run as root. It changes nothing it did not add,
# so it is safe on a production GPU node:
#   - it installs only missing packages (`--no-install-recommends`, existing config files kept);
#   - with --clients it refuses, naming the package, when a container engine from another
#     origin is installed (Docker CE's docker-ce/containerd.io, Moby's moby-*, or a docker,
#     containerd, podman, runc or crun newer than any Debian/Ubuntu build), before installing
#     anything: Debian's engines would replace it;
#   - a package provided by an installed one (runc by containerd.io) counts as installed;
#   - it simulates the install first (`apt-get -s`) and refuses, naming what apt would remove
#     and why, when anything would be removed; the install itself runs with `--no-remove`;
#     upgrades of installed packages that the new ones need are listed before they happen;
#   - apt's output goes to a log, printed when apt fails.
# Idempotent: a second run installs nothing and, with an unchanged pyproject.toml, skips pip.
set -euo pipefail

BASE=(runc gcc libc6-dev busybox-static libcap-dev python3-venv python3-dev bpftool shellcheck)
CLIENTS=(docker.io containerd podman netavark crun uidmap mmdebstrap)
# engines that Debian's docker.io/containerd/runc conflict with (Docker CE, Docker EE, Moby)
ENGINES=(docker-ce docker-ce-cli docker-ee docker-ee-cli docker-engine containerd.io
         moby-engine moby-cli moby-containerd moby-runc)
# installed already, these must be Debian's or Ubuntu's own builds
ORIGIN_CHECKED=(docker.io containerd podman runc crun)

say() { echo "setup: $*" >&2; }
die() { say "$*"; exit 1; }

args=("$@") clients=0 venv=1 command=()
while [ $# -gt 0 ]; do
    case "$1" in
        --clients) clients=1;;
        --no-venv) venv=0;;
        --) shift; command=("$@"); break;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0;;
        *) die "unknown argument $1 (usage: setup.sh [--clients] [--no-venv] [-- COMMAND...])";;
    esac
    shift
done

if [ "$(id -u)" -ne 0 ]; then
    self=$(readlink -f "$0")
    command -v sudo >/dev/null 2>&1 || die "needs root: run it as root (sudo is not installed)"
    exec sudo -- bash "$self" ${args[@]+"${args[@]}"}
fi
cd "$(dirname "$(readlink -f "$0")")/.."
export DEBIAN_FRONTEND=noninteractive
[ "$(dpkg --print-architecture)" = amd64 ] && BASE+=(gcc-multilib)  # the sim's 32-bit libs
LOG=$(mktemp /tmp/nvhook-setup.XXXXXX.log)
trap 'rm -f "$LOG"' EXIT

installed() {
    case "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null)" in ii*) return 0;; esac
    return 1
}

provider() {  # the installed package that provides $1, if any (awk reads all: no SIGPIPE)
    dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Provides}\n' 2>/dev/null |
        awk -v want="$1" '$1 == "ii" && by == "" { for (i = 3; i <= NF; i++) { p = $i
            sub(/,$/, "", p); if (p == want) by = $2 } } END { if (by != "") print by }'
}

apt_logged() {  # apt-get "$@" with its output in $LOG; on failure: the log, and exit
    if ! LC_ALL=C apt-get "$@" >"$LOG" 2>&1; then
        cat "$LOG" >&2
        die "apt-get $* failed (its output is above)"
    fi
}

lists_ready=0
ensure_lists() {  # apt-get update, once
    [ $lists_ready = 1 ] && return
    say "apt-get update"
    apt_logged update
    grep -E '^(Err|W|E):' "$LOG" >&2 || true  # a source that failed: apt warns, exits 0
    lists_ready=1
}

have_lists() {  # package lists to compare versions with (a fresh image may have none)
    compgen -G "/var/lib/apt/lists/*_Packages*" >/dev/null || ensure_lists
}

archive_versions() {  # "package version" of each of "$@" that Debian's or Ubuntu's archives
    local archives      # in the apt sources offer (one apt-cache run: each costs a second)
    archives=$(LC_ALL=C apt-cache policy | awk '
        /^ *-?[0-9]+ / { src = $0; sub(/^ *-?[0-9]+ /, "", src); next }
        /^ +release / && src != "" { if ($0 ~ /o=(Debian|Ubuntu)/) print src; src = "" }')
    LC_ALL=C apt-cache policy "$@" | awk -v archives="$archives" '
        BEGIN { n = split(archives, a, "\n"); for (i = 1; i <= n; i++) ok[a[i]] = 1 }
        /^[^ ].*:$/ { package = substr($0, 1, length($0) - 1); next }
        /^ \*\*\* / { version = $2; next }
        /^     [^ ]/ { version = $1; next }
        /^        *-?[0-9]+ / { src = $0; sub(/^ *-?[0-9]+ /, "", src)
                               if (src in ok) print package, version }'
}

foreign() {  # $1 (installed) is from another origin: newer than every Debian/Ubuntu version;
    local have v        # $2: the output of archive_versions
    have=$(dpkg-query -W -f='${Version}' "$1")
    while read -r v; do
        dpkg --compare-versions "$v" ge "$have" && return 1
    done < <(awk -v p="$1" '$1 == p { print $2 }' <<<"$2")
    return 0
}

refusals=()
want=()
plan() {  # $1: step name; then packages: adds the missing ones to want
    local step=$1 p by
    shift
    for p in "$@"; do
        if installed "$p"; then continue; fi
        by=$(provider "$p")
        if [ -n "$by" ]; then
            say "$step: $p is provided by $by (installed): keeping $by"
        else
            want+=("$p")
        fi
    done
}

check_clients() {  # refusals for --clients, before anything is installed
    local p present=() versions
    for p in "${ENGINES[@]}"; do
        installed "$p" || continue
        refusals+=("$p is installed, a container engine from another origin: Debian's docker.io, containerd and runc would replace it")
    done
    for p in "${ORIGIN_CHECKED[@]}"; do installed "$p" && present+=("$p"); done
    [ ${#present[@]} -gt 0 ] || return 0
    have_lists
    versions=$(archive_versions "${present[@]}")
    for p in "${present[@]}"; do
        foreign "$p" "$versions" || continue
        refusals+=("$p $(dpkg-query -W -f='${Version}' "$p") is installed from another origin (newer than any Debian/Ubuntu build in the apt sources): the client tests use Debian's")
    done
}

refuse() {
    local r
    for r in "${refusals[@]}"; do say "refusing: ${r}"; done
    die "nothing was installed or removed; $1"
}

simulate() {  # apt-get -s of the wanted packages: refuse removals, list upgrades
    local removed culprits=() p
    apt_logged -s install --no-install-recommends "${want[@]}"
    removed=$(awk '/^Remv / { printf "%s%s", sep, $2; sep = ", " }' "$LOG")
    if [ -n "$removed" ]; then
        for p in "${want[@]}"; do
            if LC_ALL=C apt-get -s install --no-install-recommends "$p" 2>/dev/null | grep '^Remv ' >/dev/null
            then culprits+=("$p"); fi
        done
        [ ${#culprits[@]} -gt 0 ] || culprits=("${want[@]}")
        refusals+=("installing ${culprits[*]} would make apt remove ${removed} (installed)")
        refuse "install those packages yourself if replacing what they conflict with is what you want"
    fi
    awk '/^Inst [^ ]+ \[/ { sub(/^\[/, "", $3); sub(/\]$/, "", $3)
        printf "setup: apt upgrades %s %s (needed by the new packages)\n", $2, $3 }' "$LOG" >&2
}

plan base "${BASE[@]}"
if [ $clients = 1 ]; then
    check_clients
    [ ${#refusals[@]} -eq 0 ] || refuse "the client tests will skip (fail in CI); run them on a machine without that engine"
    plan clients "${CLIENTS[@]}"
fi
if [ ${#want[@]} -gt 0 ]; then
    ensure_lists
    simulate
    say "installing ${want[*]}"
    apt_logged install -y --no-install-recommends --no-remove \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${want[@]}"
fi

if [ $venv = 1 ]; then
    [ -x .venv/bin/python ] || /usr/bin/python3 -m venv .venv
    stamp=$(sha256sum pyproject.toml | cut -d' ' -f1)
    if [ "$(cat .venv/.nvhook-setup 2>/dev/null)" != "$stamp" ] || [ ! -x .venv/bin/nvhook ]; then
        .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
        echo "$stamp" > .venv/.nvhook-setup
    fi
    say "ready (.venv/bin/nvhook)"
fi
[ ${#command[@]} -eq 0 ] || exec "${command[@]}"
