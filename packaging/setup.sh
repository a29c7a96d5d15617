#!/usr/bin/env bash
# Set up a fresh Debian/Ubuntu machine for nvhook: system packages, then a virtual environment
# (.venv, built on the system interpreter /usr/bin/python3) with nvhook and its test tools.
# Idempotent: re-running installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# The last line: real container clients for tests/e2e/test_clients.py (tests/fixtures/clients.py);
# netavark is named because setup.sh skips recommends and podman's network stack is virtual.
APT_PACKAGES=(runc gcc libc6-dev gcc-multilib busybox-static libcap-dev python3-venv python3-dev
              python3-pip bpftool
              docker.io containerd podman netavark crun uidmap mmdebstrap)

missing=()
for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
    /usr/bin/python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
echo "setup: ready (.venv/bin/nvhook)" >&2
