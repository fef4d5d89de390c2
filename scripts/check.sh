#!/bin/bash
# check.sh - everything `make check` runs: plain and ASan+UBSan builds, unit and
# model tests in both, then integration tests with real NBD clients.
set -uo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
passed=0 failed=0 skipped=0
failures=()

count() { # name, status
    case "$2" in
    0) passed=$((passed + 1)) ;;
    77) skipped=$((skipped + 1)) ;;
    *) failed=$((failed + 1)); failures+=("$1") ;;
    esac
}

echo "== build (plain, and ASan+UBSan)"
make -s -j"$jobs" all || { echo "check: 0 passed, 1 failed"; exit 1; }
make -s -j"$jobs" asan || { echo "check: 0 passed, 1 failed"; exit 1; }

for dir in build build/asan; do
    echo "== unit and model tests: $dir"
    ./scripts/run-tests.sh "$dir"
    read -r p _ f _ <"$dir/tests/summary"
    passed=$((passed + p)); failed=$((failed + f))
    [[ $f -eq 0 ]] || failures+=("unit tests in $dir")
done

echo "== ThreadSanitizer: concurrent tests"
if make -s -j"$jobs" O=build/tsan SAN=thread CC=clang OPT=-O1 tests; then
    ./scripts/run-tests.sh build/tsan concurrent
    read -r p _ f _ <build/tsan/tests/summary
    passed=$((passed + p)); failed=$((failed + f))
    [[ $f -eq 0 ]] || failures+=("concurrent tests under TSan")
else
    failed=$((failed + 1)); failures+=("TSan build")
fi

# Fault injection sweeps every allocation and compression site; the fuzz
# corpus replays as a regression test, then each target fuzzes briefly.
for target in fault-check fuzz-check; do
    echo "== $target"
    log="build/$target.log"
    make -s "$target" FUZZ_CHECK_SECONDS=20 >"$log" 2>&1
    status=$?
    count "$target" "$status"
    if [[ $status -eq 0 ]]; then
        echo "PASS $target"
    else
        echo "FAIL $target: last lines of $log:"
        tail -n 30 "$log" | sed 's/^/    /'
    fi
done

echo "== integration tests"
for test in tests/integration/*.sh; do
    [[ -f "$test" ]] || continue
    name=$(basename "$test" .sh)
    log="build/integration-$name.log"
    start=$(date +%s)
    UZRAM=$PWD/build/uzram timeout 600 bash "$test" >"$log" 2>&1
    status=$?
    count "integration $name" "$status"
    case $status in
    0) echo "PASS integration $name ($(($(date +%s) - start)) s)" ;;
    77) echo "SKIP integration $name: $(tail -n 1 "$log")" ;;
    *) echo "FAIL integration $name (status $status): last lines of $log:"
       tail -n 40 "$log" | sed 's/^/    /' ;;
    esac
done

[[ ${#failures[@]} -eq 0 ]] || printf 'failed: %s\n' "${failures[@]}"
echo "check: $passed passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 ]]
