#!/bin/bash
# run-tests.sh - runs the unit test binaries of one build folder.
# Usage: run-tests.sh BUILD_DIR [all|concurrent|valgrind]; prints one line per binary.
set -uo pipefail
dir=${1:?build folder}
mode=${2:-all}
passed=0 failed=0
for test in "$dir"/tests/test_*; do
    [[ -x "$test" && ! -d "$test" ]] || continue
    name=$(basename "$test")
    log="$dir/tests/$name.log"
    case "$mode" in
    concurrent) cmd=(env UZRAM_TEST_FILTER='*concurrent*' "$test") ;;
    valgrind) cmd=(valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite "$test") ;;
    *) cmd=("$test") ;;
    esac
    start=$(date +%s)
    if "${cmd[@]}" >"$log" 2>&1; then
        passed=$((passed + 1))
        echo "PASS $dir $name ($(($(date +%s) - start)) s)"
    else
        failed=$((failed + 1))
        echo "FAIL $dir $name: last lines of $log:"
        tail -n 30 "$log" | sed 's/^/    /'
    fi
done
echo "$passed passed, $failed failed" >"$dir/tests/summary"
[[ $failed -eq 0 ]]
