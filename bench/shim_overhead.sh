#!/usr/bin/env bash
# Cost of sqlwa's counting VFS shim: commits/s of mobibench-insert with synchronous=OFF on
# tmpfs, with and without the shim (target: at most 5%).
# Usage: bench/shim_overhead.sh [TXNS] [REPS]
set -euo pipefail
cd "$(dirname "$0")/.."

# A tmpfs directory, so storage does not mask the shim's CPU cost.
if [ -d /dev/shm ] && [ -w /dev/shm ] && [ "$(stat -f -c %T /dev/shm)" = tmpfs ]; then
    base=$(mktemp -d /dev/shm/sqlwa-shim-bench.XXXXXX)
elif [ "$(stat -f -c %T "${TMPDIR:-/tmp}")" = tmpfs ]; then
    base=$(mktemp -d "${TMPDIR:-/tmp}/sqlwa-shim-bench.XXXXXX")
else
    echo "shim_overhead: no writable tmpfs (/dev/shm or \$TMPDIR); mount one and set TMPDIR" >&2
    exit 2
fi
trap 'rm -rf "$base"' EXIT

cargo run --quiet --release -p sqlwa-workloads --example shim_overhead -- "$base" "${1:-20000}" "${2:-7}"
