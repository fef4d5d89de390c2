#!/bin/bash
# run.sh - the whole benchmark, as `make bench` runs it: engine throughput, dedup off/on, and
# kernel zram on the same data (when root and /dev/zram0 exist). Output is also saved to a log.
#
# Environment: UZRAM (default build/uzram), LOG (default build/bench-results.txt); SIZE,
# POOL_SIZE, DEDUP_TREES and friends are passed on to bench/zram-compare.sh.
set -u
cd "$(dirname "$0")/.." || exit 1

export UZRAM=${UZRAM:-build/uzram}
LOG=${LOG:-build/bench-results.txt}
if [ ! -x "$UZRAM" ]; then
    echo "bench/run.sh: no uzram binary at $UZRAM (run 'make programs' first)" >&2
    exit 1
fi
mkdir -p "$(dirname "$LOG")"

status=0
{
    echo "### uzram bench: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "### $(LC_ALL=C lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs, kernel $(uname -r)"
    echo
    echo "### \$ $UZRAM bench"
    "$UZRAM" bench || status=1
    echo
    echo "### \$ $UZRAM bench --dedup"
    "$UZRAM" bench --dedup || status=1
    echo
    echo "### \$ bench/zram-compare.sh"
    bench/zram-compare.sh || status=1
    exit $status
} 2>&1 | tee "$LOG"
status=${PIPESTATUS[0]}
echo "(saved to $LOG)"
exit "$status"
