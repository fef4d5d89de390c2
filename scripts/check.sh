#!/bin/bash
# check.sh - `make check`: runs make check's stages, side by side where they can be, and ends
# with one summary: a line per stage (its make target, result, time and counts), every skip
# and every failure named. Each stage is a target of the Makefile ("make check's stages"), the
# one place that says what it runs; this script says only when each runs and how it counts.
set -uo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
check_start=$(date +%s)
passed=0 failed=0
failures=() skips=() # the summary's count of skips is the number of these lines
mkdir -p build/check
STAGES=build/check/stages # one line per stage that ended: "NAME TARGET STATUS SECONDS COUNTS"
: >"$STAGES"

count() { # name, status, skip reason
    case "$2" in
    0) passed=$((passed + 1)) ;;
    77) skips+=("$1: $3") ;;
    *) failed=$((failed + 1)); failures+=("$1") ;;
    esac
}

# stage NAME TARGET LOG [MAKE ARGUMENT]...: `make -s TARGET` with its output in LOG; records
# the stage's status and time in $STAGES (background lanes call it too: one short append).
stage() {
    local name=$1 target=$2 log=$3 start status
    shift 3
    start=$(date +%s)
    make -s "$target" "$@" >"$log" 2>&1
    status=$?
    echo "$name $target $status $(($(date +%s) - start))" >>"$STAGES"
    return $status
}

# What scripts/run-tests.sh found in one build folder (or one set of its binaries: its
# RUN_TESTS_SET): its skips (binaries, and cases skipped inside passing binaries) are its
# lines of tests/[SET.]skipped.
collect_unit() { # build folder, what it was[, set]
    local p f line results=$1/tests/${3:+$3.}
    if [[ ! -s ${results}summary ]]; then
        failed=$((failed + 1)); failures+=("$2 (no summary: see its log)")
        return
    fi
    read -r p _ f _ <"${results}summary"
    passed=$((passed + p)); failed=$((failed + f))
    [[ $f -eq 0 ]] || failures+=("$2")
    while IFS= read -r line; do skips+=("$line"); done <"${results}skipped"
}

echo "== format (make format-check)"
if stage format format-check build/format.log; then
    count format 0
    echo "PASS format"
else
    count format 1
    echo "FAIL format: files not in the style of .clang-format (make format fixes them):"
    grep -o '^[^:]*\.[ch]:' build/format.log | sort -u | sed 's/^/    /'
fi

echo "== build (plain, and ASan+UBSan)"
build_start=$(date +%s)
# What the VM needs first (the program and the guest's tools), so that its boot, the longest
# stage, starts before the test binaries are compiled.
make -s -j"$jobs" programs vm-tools || { echo "check: 0 passed, 1 failed (the build)"; exit 1; }

# The VM lane: the kernel's own clients (nbd, ublk, md, swap, zram) in a VM (tests/vm/vm.sh
# --check, one boot). It starts as soon as the plain build is there and runs beside
# everything after it: the guest is emulated and takes minutes whatever runs beside it. vm.sh
# bounds each of its waits itself (the kernel's download, the boot, each scenario) and says
# how far it got: an outer bound shorter than its own once killed it before it could say.
vm_log=build/vm-check.log
setsid bash -c "$(declare -f stage); STAGES=$STAGES; stage vm vm-check $vm_log" &
vm_pid=$!
# A stage that ends the check early (a failed build) takes the boot with it: its own process
# group, QEMU included.
trap '[[ -n ${vm_pid:-} ]] && kill -- "-$vm_pid" 2>/dev/null' EXIT

make -s -j"$jobs" all asan-tests || { echo "check: 0 passed, 1 failed (the build)"; exit 1; }
echo "build - 0 $(($(date +%s) - build_start))" >>"$STAGES"

echo "== exports of libuzram.so (make check-exports)"
if stage exports check-exports build/check-exports.log; then
    count exports 0
    echo "PASS exports: $(sed -n 's/^check-exports: //p' build/check-exports.log)"
else
    count exports 1
    echo "FAIL exports:"
    sed 's/^/    /' build/check-exports.log
fi

# The engine's files, and the program's, stand in layers: none includes (so none calls) one
# that includes it back; so do the engine's folders, each as its README.md says.
echo "== layers of lib/ and src/ (make layers-check)"
if stage layers layers-check build/check-layers.log; then
    count layers 0
    # each run's last line: "check-layers: lib: 13 file layers, 8 folder layers, no circle"
    echo "PASS layers: $(sed -n 's/^check-layers: //p' build/check-layers.log | paste -sd ';' |
        sed 's/;/; /')"
else
    count layers 1
    echo "FAIL layers of lib/ or src/:"
    sed 's/^/    /' build/check-layers.log
fi

# The unit lane (plain, then the concurrent ones under TSan), the ASan+UBSan unit tests, the
# fault sweeps (in the same build) and the benchmarks' smoke runs, and the fuzzers are CPU work
# that may wait, each a lane of its own: they run beside the integration tests, which mostly
# wait on servers, clients and the kernel, at the lowest priority (nice 19), in what the VM
# and the integration tests, whose deadlines are in wall-clock time, leave (with nice 5, at
# 8cff2a1, the VM's swap scenario took 208 s, against 109 s at 5b0f427 when the unit tests
# ran before the integration tests). Their lines come after the integration tests'. The CPU
# work is split in lanes of about equal length, so that no lane is left running alone on one
# CPU at the end while the other CPU idles.
unit_log=build/unit-lane.log
rm -f build/tests/summary build/asan/tests/summary build/asan/tests/fault.summary \
    build/tsan/tests/summary
(
    renice -n 19 -p "$BASHPID" >/dev/null 2>&1
    # TSan's build starts at once, beside the plain run: built after it, it left the lane
    # alone at the end with a compile, once the integration tests were done.
    stage tsan-build tsan-build build/tsan-build.log &
    tsan_build=$!
    stage unit unit-check build/unit-plain.log
    wait "$tsan_build" && stage tsan tsan build/unit-tsan.log
    cat build/unit-plain.log build/tsan-build.log build/unit-tsan.log 2>/dev/null
) >"$unit_log" 2>&1 &
unit_pid=$!
(
    renice -n 19 -p "$BASHPID" >/dev/null 2>&1
    stage asan-unit asan-unit-check build/unit-asan.log
) &
asan_pid=$!
(
    renice -n 19 -p "$BASHPID" >/dev/null 2>&1
    # The sweeps run in build/asan, whose test archive has the fault points in (the
    # Makefile's FAULT_INJECTION): a build of their own compiled the engine under ASan twice.
    stage fault fault-check build/fault-check.log
    # The benchmarks' smoke runs (seconds, mostly waiting on their servers) after them.
    stage bench bench-check build/bench-check.log
) &
fault_pid=$!
fuzz_log=build/fuzz-check.log
(
    renice -n 19 -p "$BASHPID" >/dev/null 2>&1
    stage fuzz fuzz-check "$fuzz_log" FUZZ_CHECK_SECONDS=10
) &
fuzz_pid=$!
trap '[[ -n ${vm_pid:-} ]] && kill -- "-$vm_pid" 2>/dev/null; for p in ${unit_pid:-} ${fuzz_pid:-} ${asan_pid:-} ${fault_pid:-}; do pkill -P "$p" 2>/dev/null; kill "$p" 2>/dev/null; done' EXIT

# A script exits 77 to skip as a whole; a check inside it that cannot run prints
# "SKIPPED CHECK: reason" (tests/integration/lib.bash, skip_check) and is listed below.
echo "== integration tests (make integration-check)"
start=$(date +%s)
make -s integration-check 2>&1 | tee build/integration-check.log | grep -E '^(PASS|FAIL|SKIP|    )'
echo "integration integration-check ${PIPESTATUS[0]} $(($(date +%s) - start))" >>"$STAGES"
while read -r name status _ reason; do
    count "integration $name" "$status" "$reason"
done <build/integration/results

wait "$unit_pid"
unit_pid=
echo "== unit and model tests (make unit-check, tsan)"
cat "$unit_log"
collect_unit build "unit tests in build"
if grep -q '^tsan-build tsan-build 0 ' "$STAGES"; then
    collect_unit build/tsan "concurrent tests under TSan"
else
    failed=$((failed + 1)); failures+=("TSan build (build/tsan-build.log)")
fi

echo "== unit tests under ASan+UBSan (make asan-unit-check)"
wait "$asan_pid"
asan_pid=
cat build/unit-asan.log
collect_unit build/asan "unit tests in build/asan"

echo "== fault injection sweeps (make fault-check)"
wait "$fault_pid"
fault_pid=
sed -n '/^\(PASS\|FAIL\|SKIP\) /p; /^    /p; /fault points swept in total/s/^/    /p' build/fault-check.log
if [[ -s build/asan/tests/fault.summary ]]; then
    collect_unit build/asan "fault injection sweeps" fault
else
    count fault-check 1
    echo "FAIL fault-check: last lines of build/fault-check.log:"
    tail -n 30 build/fault-check.log | sed 's/^/    /'
fi

echo "== benchmarks on tiny data (make bench-check)"
status=$(awk '$1 == "bench" {print $3}' "$STAGES")
sed -n '/^\(PASS\|FAIL\) bench /p; /^    /p; /^SKIPPED CHECK: /p' build/bench-check.log
while IFS= read -r line; do skips+=("$line"); done \
    < <(sed -n 's/^SKIPPED CHECK: //p' build/bench-check.log)
count bench-check "${status:-1}"
[[ ${status:-1} == 0 ]] || { echo "FAIL bench-check: last lines of build/bench-check.log:"; tail -n 20 build/bench-check.log | sed 's/^/    /'; }

echo "== fuzz corpus and a short run (make fuzz-check)"
wait "$fuzz_pid"
status=$?
fuzz_pid=
count fuzz-check "$status"
if [[ $status -eq 0 ]]; then
    echo "PASS fuzz-check"
else
    echo "FAIL fuzz-check: last lines of $fuzz_log:"
    tail -n 30 "$fuzz_log" | sed 's/^/    /'
fi

echo "== VM tests: a real kernel under QEMU (make vm-check)"
wait "$vm_pid"
vm_pid=
status=$(awk '$1 == "vm" {print $3}' "$STAGES")
# vm.sh's own lines (the download, the accelerator, each scenario's begin and end with the
# time, the boot's end) and the scenarios' results.
sed -n '/^vm\.sh: /p; /^\(PASS\|FAIL\|SKIP\) vm /p; /^    /p' "$vm_log"
if [[ $status == 77 ]]; then
    count vm 77 "$(sed -n 's/^SKIP: //p' "$vm_log" | tail -n 1)"
elif [[ -s build/vm/run/results ]]; then
    while read -r name result reason; do
        count "vm $name" "$result" "$reason"
    done <build/vm/run/results
    [[ $status == 0 ]] || grep -q ' 1 ' build/vm/run/results || count "vm runner" "$status"
else
    count "vm runner" 1
    echo "FAIL vm runner (status ${status:-none}): last lines of $vm_log:"
    tail -n 20 "$vm_log" | sed 's/^/    /'
fi

echo "== summary: stage, make target, status, seconds (lanes run side by side)"
while read -r name target status seconds; do
    case $status in 0) word=pass ;; 77) word=skip ;; *) word="FAIL ($status)" ;; esac
    printf '    %-12s %-18s %-10s %5s s\n' "$name" "$target" "$word" "$seconds"
done <"$STAGES"
[[ ${#skips[@]} -eq 0 ]] || printf 'skipped: %s\n' "${skips[@]}"
[[ ${#failures[@]} -eq 0 ]] || printf 'failed: %s\n' "${failures[@]}"
cpu=$(awk '{print int($14 + $15 + $16 + $17)}' /proc/$$/stat 2>/dev/null)
echo "check: $passed passed, $failed failed, ${#skips[@]} skipped in $(($(date +%s) - check_start)) s" \
    "(CPU of its processes: $((${cpu:-0} / $(getconf CLK_TCK))) s; $jobs CPUs)"
[[ $failed -eq 0 ]]
