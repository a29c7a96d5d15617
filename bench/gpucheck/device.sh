#!/bin/sh
# The one command for a lent GPU machine (no network there): validate nvhook from this
# checkout with the kit carried beside it (bench/gpucheck/kit.py builds .gpukit here), results
# under $OUT (summary.md, results.json, host.txt, log.txt). Through the device tool:
#   run(command="sh bench/gpucheck/device.sh", carry=[".gpukit"], timeout_s=480)
# GPUCHECK_RUNS (default 10) sets the timed rounds; arguments go to validate.py (e.g. --sim).
set -eu
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/gpucheck}
python=$(command -v python3)
[ -d .gpukit/site ] || { echo "gpucheck: no .gpukit (build it here: sudo .venv/bin/python bench/gpucheck/kit.py, then carry it)" >&2; exit 2; }
# nvhook install refuses code a user could change: on the lent machine ($OUT set, a copy of
# the tree) make the copy root's and writable by no one else; never here
if [ -n "${OUT:-}" ] && [ "$(stat -c %u .)" != 0 ]; then chown -R 0:0 .; fi
if [ -n "${OUT:-}" ]; then chmod -R go-w .; fi
PYTHONPATH="$PWD:$PWD/.gpukit/site" PYTHONUNBUFFERED=1 \
    exec "$python" bench/gpucheck/validate.py --out "$out" --kit .gpukit \
    --runs "${GPUCHECK_RUNS:-10}" "$@"
