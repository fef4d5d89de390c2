#!/bin/bash
# run-tests.sh - runs the unit test binaries of one build folder and says of each whether it
# passed, failed or was skipped, reading cmocka's own count of the cases it ran.
#
# Usage: run-tests.sh BUILD_DIR [all|concurrent|valgrind] [NAME...]
#        run-tests.sh --concurrent-binaries BUILD_DIR
# NAME...: only these binaries (default: one per tests/test_*.c). concurrent: only the binaries
# whose source registers a case with "concurrent" in its name, and only those cases (the TSan
# stage); the others are named on one line and not run. --concurrent-binaries prints the paths
# of those binaries, for make.
#
# A binary counts as passed only when it exits 0 and cmocka reports at least one passed case.
# It is SKIP, with the reason, when it exits 77, when no case ran (a filter matched none), or
# when every case skipped (the reason is its "SKIP: ..." line if it printed one). Cases that
# skipped inside a passing binary are named too. Writes BUILD_DIR/tests/summary
# ("P passed F failed S skipped", binaries) and BUILD_DIR/tests/skipped (one line per skip);
# with RUN_TESTS_SET=NAME, tests/NAME.summary and tests/NAME.skipped instead, so that two sets
# of one build's binaries can run side by side (make check's ASan tests and fault sweeps).
# Exit status: 1 if a binary failed, else 77 if none passed and one skipped, else 0.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# Does tests/NAME.c register a cmocka case whose name contains "concurrent"?
has_concurrent_cases() {
    tr '\n' ' ' <"$root/tests/$1.c" |
        grep -Eq 'cmocka_unit_test[a-z_]*\( *[A-Za-z0-9_]*concurrent'
}

all_names() {
    local source name
    for source in "$root"/tests/test_*.c; do
        name=$(basename "$source" .c)
        [[ $name == test_util ]] || echo "$name"
    done
}

if [[ ${1:-} == --concurrent-binaries ]]; then
    dir=${2:?build folder}
    for name in $(all_names); do
        has_concurrent_cases "$name" && echo "$dir/tests/$name"
    done
    exit 0
fi

dir=${1:?build folder}
mode=${2:-all}
shift $(($# < 2 ? $# : 2))
names=("$@")
[[ ${#names[@]} -gt 0 ]] || mapfile -t names < <(all_names)
mkdir -p "$dir/tests"
results=$dir/tests/${RUN_TESTS_SET:+$RUN_TESTS_SET.}
: >"${results}skipped"

if [[ $mode == concurrent ]]; then
    selected=() left_out=()
    for name in "${names[@]}"; do
        if has_concurrent_cases "$name"; then selected+=("$name"); else left_out+=("$name"); fi
    done
    names=("${selected[@]}")
    [[ ${#left_out[@]} -eq 0 ]] ||
        echo "not run in $dir (no concurrent cases): ${left_out[*]}"
fi

# The sum of the numbers cmocka prints on lines of the form PREFIX N test(s).
cmocka_count() { # log, prefix
    sed -n "s/^\[$2\] \([0-9][0-9]*\) test(s).*/\1/p" "$1" | awk '{n += $1} END {print n + 0}'
}

filter=${UZRAM_TEST_FILTER:-}
[[ $mode == concurrent ]] && filter='*concurrent*'
passed=0 failed=0 skipped=0
note_skip() { # name, reason
    skipped=$((skipped + 1))
    echo "SKIP $dir $1: $2"
    echo "$dir $1: $2" >>"${results}skipped"
}
for name in "${names[@]}"; do
    test=$dir/tests/$name
    log=$dir/tests/$name.log
    if [[ ! -x $test ]]; then
        failed=$((failed + 1))
        echo "FAIL $dir $name: not built ($test is missing)"
        continue
    fi
    case "$mode" in
    concurrent) cmd=(env UZRAM_TEST_FILTER='*concurrent*' "$test") ;;
    valgrind) cmd=(valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite "$test") ;;
    *) cmd=("$test") ;;
    esac
    start=$(date +%s)
    "${cmd[@]}" >"$log" 2>&1
    status=$?
    took="$(($(date +%s) - start)) s"
    ran=$(cmocka_count "$log" '==========')
    ok=$(cmocka_count "$log" '  PASSED  ')
    skips=$(cmocka_count "$log" '  SKIPPED ')
    reason=$(sed -n 's/^SKIP: //p' "$log" | tail -n 1)
    if [[ $status -eq 77 ]]; then
        note_skip "$name" "${reason:-exit status 77}"
    elif [[ $status -ne 0 ]]; then
        failed=$((failed + 1))
        echo "FAIL $dir $name (status $status): last lines of $log:"
        tail -n 30 "$log" | sed 's/^/    /'
    elif ! grep -q '^\[==========\] [0-9]* test(s) run' "$log"; then
        failed=$((failed + 1))
        echo "FAIL $dir $name: exit 0 but no cmocka summary in $log, so nothing shows it ran"
    elif [[ $ran -eq 0 ]]; then
        note_skip "$name" "no case ran${filter:+ (filter $filter)}"
    elif [[ $ok -eq 0 ]]; then
        note_skip "$name" "all $ran cases skipped${reason:+: $reason}"
    else
        passed=$((passed + 1))
        if [[ $skips -gt 0 ]]; then
            echo "PASS $dir $name ($took; $ok passed, $skips of $ran cases skipped)"
            echo "$dir $name: $skips of $ran cases skipped${reason:+: $reason}" >>"${results}skipped"
        else
            echo "PASS $dir $name ($took; $ok cases)"
        fi
    fi
done
echo "$passed passed $failed failed $skipped skipped" >"${results}summary"
[[ $failed -eq 0 ]] || exit 1
[[ $passed -eq 0 && $skipped -gt 0 ]] && exit 77
exit 0
