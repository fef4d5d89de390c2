#!/bin/bash
# integration.sh - runs the integration tests (tests/integration/*.sh: real `uzram serve`
# processes and real clients) against one uzram binary, one after the other, each bounded,
# and says of each whether it passed, failed or skipped (`make integration-check`).
#
# Usage: scripts/integration.sh [NAME...]    (default: every test but deb.sh)
# Environment: UZRAM (default build/uzram), OUT (default build/integration).
# Writes OUT/NAME.log, and OUT/results: one line per test "NAME STATUS SECONDS REASON" (STATUS
# 0 pass, 77 skip, else fail) and one per check a passing test skipped, "NAME/check 77 0
# REASON" (tests/integration/lib.bash, skip_check). Exit status 1 if one failed, else 0.
set -uo pipefail
cd "$(dirname "$0")/.."
UZRAM=$(realpath -m "${UZRAM:-build/uzram}")
OUT=${OUT:-build/integration}
mkdir -p "$OUT"
: >"$OUT/results"

names=("$@")
if [[ ${#names[@]} -eq 0 ]]; then
    for test in tests/integration/*.sh; do
        # The Debian packages' test compiles the whole tree again and runs lintian: CI runs
        # it after make check (.ci/run: make deb-check), to keep make check within its time.
        [[ $(basename "$test") == deb.sh ]] || names+=("$(basename "$test" .sh)")
    done
fi

failed=0
for name in "${names[@]}"; do
    log=$OUT/$name.log
    start=$(date +%s)
    UZRAM=$UZRAM timeout 600 bash "tests/integration/$name.sh" >"$log" 2>&1
    status=$?
    took=$(($(date +%s) - start))
    reason=$(sed -n 's/^SKIP: //p' "$log" | tail -n 1)
    mapfile -t parts < <(sed -n 's/^SKIPPED CHECK: //p' "$log")
    echo "$name $status $took ${reason:-}" >>"$OUT/results"
    case $status in
    0) echo "PASS integration $name ($took s${parts[0]:+; ${#parts[@]} check(s) skipped, listed below})"
       for part in "${parts[@]}"; do echo "$name/check 77 0 $part" >>"$OUT/results"; done ;;
    77) echo "SKIP integration $name: $reason" ;;
    *) failed=1
       echo "FAIL integration $name (status $status): last lines of $log:"
       tail -n 40 "$log" | sed 's/^/    /' ;;
    esac
done
exit $failed
