#!/bin/bash
# parts.sh - the benchmarks bench/run.sh does not run, in one list, run two ways:
#
#   bench/parts.sh --smoke     (make bench-check, a stage of make check) each cheap one on tiny
#                              data, its output checked for the table or line it is there to
#                              give; the VM benches only through --help and refused arguments
#                              (a VM run takes minutes to hours: make vm-bench, vm-docs,
#                              vm-swap-bench). Under 30 s.
#   bench/parts.sh [NAME]...   (make bench-parts, which make bench runs after bench/run.sh) each
#                              one, or those NAMEd, at full size: those that write a block of a
#                              doc rewrite it (--doc). Minutes each; tls and server-profile need
#                              root, server-profile perf, server-ab BASE=PATH (the build to
#                              compare build/uzram with).
#   bench/parts.sh --list      the names
#
# Environment: UZRAM (default build/uzram), BASE (server-ab's other build), IMAGE (the image
# recompress_gap stores; default: 256 MiB of /usr/include's tar stream, made in build/).
# Exit status 0 when every run passed, 1 when one failed, 2 on a bad command line. A part that
# cannot run here is named on a "SKIPPED CHECK:" line and not counted as passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
source bench/args.bash
bench_help "$@"
UZRAM=${UZRAM:-build/uzram}
export UZRAM
NAMES=(estimate-speed state-ab server-ab tls-memory scale-out pool-vs-zram bundle bundle-shapes
    fio-nbd tls server-limits server-profile recompress_gap)
LOG=build/bench-parts
mkdir -p "$LOG"
passed=0 failed=0 skipped=0

# run NAME PATTERN [--targets] COMMAND...: COMMAND's output in $LOG/NAME.log; it passes when
# it exits 0 and its output has a line matching PATTERN (an extended regular expression).
# --targets: COMMAND exits 1 when a speed target it judges is not met, which passes the smoke
# run too: tiny data on a shared machine measures that the bench works, not how fast uzram is
# (speed is judged by full runs, never by a test).
run() {
    local name=$1 pattern=$2 start status want=0
    shift 2
    [[ $1 != --targets ]] || { want=1 && shift; }
    start=$(date +%s)
    "$@" >"$LOG/$name.log" 2>&1
    status=$?
    if ((status == 0 || (status == 1 && want == 1))) && grep -Eq -- "$pattern" "$LOG/$name.log"; then
        passed=$((passed + 1))
        echo "PASS bench $name ($(($(date +%s) - start)) s)"
    else
        failed=$((failed + 1))
        echo "FAIL bench $name (status $status, want 0$( ((want)) && echo ' or 1'); and a line /$pattern/):" \
            "last lines of $LOG/$name.log:"
        tail -n 8 "$LOG/$name.log" | sed 's/^/    /'
    fi
}

skip() { # NAME REASON
    skipped=$((skipped + 1))
    echo "SKIPPED CHECK: bench $1: $2"
}

# expect NAME STATUS PATTERN COMMAND...: COMMAND exits with STATUS and prints PATTERN (a VM
# bench's --help, or its refusal of a bad argument before anything starts).
expect() {
    local name=$1 want=$2 pattern=$3 status
    shift 3
    "$@" >"$LOG/$name.log" 2>&1 </dev/null
    status=$?
    if [[ $status -eq $want ]] && grep -Eq -- "$pattern" "$LOG/$name.log"; then
        passed=$((passed + 1))
        echo "PASS bench $name"
    else
        failed=$((failed + 1))
        echo "FAIL bench $name: status $status (want $want), output:"
        head -n 5 "$LOG/$name.log" | sed 's/^/    /'
    fi
}

is_root() { [[ $(id -u) == 0 ]]; }

smoke() {
    run estimate-speed '^\| lz4 \| 2 \|' env SIZE=16 REPEAT=1 bench/estimate-speed.sh "$UZRAM"
    run state-ab 'uzram_adopt\(\) of that state' bench/state-ab.sh 16 8 1
    run server-ab '^write +B ' env REGION_MIB=16 bench/server-ab.sh nbd "$UZRAM" "$UZRAM" 1 2000
    run tls-memory '^Measured by .* 4 idle connections' \
        env CONNECTIONS=4 ROUNDS=1 bench/tls-memory.sh "$UZRAM"
    run scale-out 'the client goes on with the other copy' \
        env DATA_MIB=8 ROUNDS=1 bench/scale-out.sh "$UZRAM"
    # ZRAM names no device: the kernel side is left out (a test never touches the machine's zram)
    run pool-vs-zram '^uzram / zsmalloc: ' \
        env ZRAM=none-in-bench-check SIZE=16M SETS='text:/usr/include' bench/pool-vs-zram.sh
    run bundle '^\| zstd-7 \+ dict, bundles of 16 \|' env REQUESTS=2000 ROUNDS=1 bench/bundle.sh 8
    run bundle-shapes "^\| bundles of 16 \| 4 \(the engine's\) \|" env ROUNDS=1 bench/bundle-shapes.sh 8
    run fio-nbd '^\| randread \| 1 \| [0-9.]+k? \|' --targets \
        env ROUNDS=1 RUNTIME=1 REGION=16M JOBS=1 SERVERS=uzram bench/fio-nbd.sh "$UZRAM"
    local vm
    for vm in vm-block vm-docs vm-swap-programs; do
        expect "$vm-help" 0 "^$vm\.sh - .*make vm-" "bench/$vm.sh" --help
    done
    expect vm-block-args 2 'ROUNDS must be a whole number' bench/vm-block.sh 0
    expect vm-docs-args 2 'at most ROUNDS' bench/vm-docs.sh 1 2
    expect vm-swap-programs-args 2 'no backend zram-lzma' bench/vm-swap-programs.sh --backends zram-lzma
    expect vm-swap-programs-size 2 '--disksize must be a size' bench/vm-swap-programs.sh --disksize x
    echo "(not in the smoke run: tls, 6 fio runs of 1 s at least; server-limits, whose waits are" \
        "what it measures (about 40 s); server-profile, perf and a loop device; recompress_gap," \
        "runs until memory settles (about 15 s): make bench-parts runs them)"
}

full() { # NAME
    case $1 in
    estimate-speed) run "$1" '^\| lz4 \| 2 \|' bench/estimate-speed.sh --doc docs/BENCHMARKS.md "$UZRAM" ;;
    state-ab) run "$1" 'uzram_adopt\(\)' bench/state-ab.sh --doc docs/BENCHMARKS.md 4096 1024 5 ;;
    server-ab)
        if [[ -z ${BASE:-} ]]; then skip "$1" "give BASE=PATH, the uzram build to compare with"; return; fi
        run "$1" '^write +B ' bench/server-ab.sh nbd "$BASE" "$UZRAM"
        ;;
    tls-memory) run "$1" '^Measured by' bench/tls-memory.sh --doc docs/SECURITY.md "$UZRAM" ;;
    scale-out) run "$1" 'When a server dies' bench/scale-out.sh --doc docs/BENCHMARKS.md "$UZRAM" ;;
    pool-vs-zram) run "$1" '^uzram / zsmalloc: ' bench/pool-vs-zram.sh --doc docs/BENCHMARKS.md ;;
    bundle) run "$1" 'bundles of 16' bench/bundle.sh --doc 256 ;;
    bundle-shapes) run "$1" 'bundles of 16' bench/bundle-shapes.sh --doc 256 ;;
    fio-nbd) run "$1" '^\| randread \|' bench/fio-nbd.sh --doc "$UZRAM" ;;
    tls)
        if ! is_root; then skip "$1" "needs root (fio runs as nobody)"; return; fi
        run "$1" '^\| randread 4k \|' bench/tls.sh --doc docs/BENCHMARKS.md "$UZRAM"
        ;;
    server-limits) run "$1" 'dropped after' bench/server-limits.sh "$UZRAM" ;;
    server-profile)
        if ! is_root || ! command -v perf >/dev/null; then
            skip "$1" "needs root and perf (linux-perf)"
            return
        fi
        run "$1" '^nbd-write [0-9.]+ ' bench/server-profile.sh --doc 300000
        ;;
    recompress_gap)
        local image=${IMAGE:-$LOG/usr-include.img}
        if [[ ! -s $image ]]; then
            tar cf - -C / usr/include 2>/dev/null | head -c $((256 << 20)) >"$image"
        fi
        run "$1" '^hand +settled' env IMAGE="$image" bench/recompress_gap.sh --out "$LOG"
        ;;
    *)
        echo "parts.sh: no benchmark '$1' (bench/parts.sh --list)" >&2
        exit 2
        ;;
    esac
}

case ${1:-} in
--list) printf '%s\n' "${NAMES[@]}"; exit 0 ;;
--smoke) smoke ;;
-*) echo "parts.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
*)
    [[ $# -gt 0 ]] || set -- "${NAMES[@]}"
    for name in "$@"; do full "$name"; done
    ;;
esac
echo "bench-parts: $passed passed, $failed failed, $skipped skipped (logs: $LOG/)"
[[ $failed -eq 0 ]]
