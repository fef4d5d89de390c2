#!/bin/bash
# fuzz.sh - builds and runs every fuzz/fuzz_*.c target: with libFuzzer (clang) for a while,
# or as a plain replay of its committed corpus fuzz/corpus/<name without fuzz_>/ (gcc or clang).
#
# Usage: scripts/fuzz.sh run [SECONDS]   libFuzzer, each target SECONDS (default
#                                        $FUZZ_SECONDS or 60); new inputs go to
#                                        build/fuzz/corpus/<name>, crashes to
#                                        build/fuzz/crashes/
#        scripts/fuzz.sh replay          replay binaries (ASan+UBSan) over the corpus
#        scripts/fuzz.sh build           only build both kinds
# FUZZ_TARGETS="engine nbd" limits the targets (names without fuzz_).
#
# A target can name in its comments, on lines of their own:
#   fuzz-link: src/x/a.c src/b.c    more sources to link (the engine library always is)
#   fuzz-options: -max_len=8192     more libFuzzer options
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-run}
seconds=${2:-${FUZZ_SECONDS:-60}}
jobs=$(nproc 2>/dev/null || echo 2)
pkgs="liblz4 libzstd lzo2 libdeflate libxxhash gnutls"
dep_cflags=$(pkg-config --cflags $pkgs)
dep_libs="$(pkg-config --libs $pkgs) -lm"
common="-std=gnu11 -Wall -Wextra -Werror -pthread -D_GNU_SOURCE -DUZRAM_TEST_HOOKS -Iinclude -Ilib -Isrc $dep_cflags"

targets=()
for source in fuzz/fuzz_*.c; do
    [[ -f "$source" ]] || continue
    name=$(basename "$source" .c)
    name=${name#fuzz_}
    if [[ -n "${FUZZ_TARGETS:-}" && " $FUZZ_TARGETS " != *" $name "* ]]; then
        continue
    fi
    targets+=("$name")
done
if [[ ${#targets[@]} -eq 0 ]]; then
    echo "fuzz: no targets"
    exit 0
fi

# The `fuzz-link:` / `fuzz-options:` words of a target's comments.
directive() { # source, key
    sed -n "s/^.*$2:[[:space:]]*\(.*\)$/\1/p" "$1" | sed 's/\*\/.*$//' | tr '\n' ' '
}

build_replay() {
    # The engine as the ASan+UBSan unit tests have it (make check has built it by then).
    make -s -j"$jobs" asan-test-lib
    mkdir -p build/fuzz-replay
    for name in "${targets[@]}"; do
        local source=fuzz/fuzz_$name.c
        # shellcheck disable=SC2046
        ${REPLAY_CC:-gcc} $common -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
            -fno-sanitize-recover=all fuzz/replay.c "$source" $(directive "$source" fuzz-link) \
            build/asan/libuzram-test.a $dep_libs -o "build/fuzz-replay/fuzz_$name"
    done
}

build_fuzzers() {
    if ! command -v clang >/dev/null; then
        echo "fuzz: clang is needed for libFuzzer (apt-get install clang)" >&2
        exit 1
    fi
    make -s -j"$jobs" O=build/fuzz CC=clang SAN=address,undefined OPT=-O1 \
        EXTRA_CFLAGS=-fsanitize=fuzzer-no-link build/fuzz/libuzram-test.a
    for name in "${targets[@]}"; do
        local source=fuzz/fuzz_$name.c
        # shellcheck disable=SC2046
        clang $common -O1 -g -fsanitize=fuzzer,address,undefined -fno-omit-frame-pointer \
            -fno-sanitize-recover=all "$source" $(directive "$source" fuzz-link) \
            build/fuzz/libuzram-test.a $dep_libs -o "build/fuzz/fuzz_$name"
    done
}

case "$mode" in
build)
    build_replay
    build_fuzzers
    ;;
replay)
    build_replay
    failed=0
    for name in "${targets[@]}"; do
        corpus=fuzz/corpus/$name
        mkdir -p "$corpus"
        start=$(date +%s)
        if "build/fuzz-replay/fuzz_$name" "$corpus" >"build/fuzz-replay/$name.log" 2>&1; then
            echo "PASS replay $name: $(tail -n 1 "build/fuzz-replay/$name.log" | sed 's/^replay: //')" \
                "($(($(date +%s) - start)) s)"
        else
            failed=1
            echo "FAIL replay $name: last lines of build/fuzz-replay/$name.log:"
            tail -n 30 "build/fuzz-replay/$name.log" | sed 's/^/    /'
        fi
    done
    exit $failed
    ;;
run)
    build_fuzzers
    failed=0
    for name in "${targets[@]}"; do
        source=fuzz/fuzz_$name.c
        work=build/fuzz/corpus/$name
        mkdir -p "$work" build/fuzz/crashes "fuzz/corpus/$name"
        log=build/fuzz/$name.log
        # shellcheck disable=SC2046
        if "build/fuzz/fuzz_$name" -max_total_time="$seconds" -print_final_stats=1 \
            -artifact_prefix="build/fuzz/crashes/$name-" $(directive "$source" fuzz-options) \
            "$work" "fuzz/corpus/$name" >"$log" 2>&1; then
            runs=$(sed -n 's/^stat::number_of_executed_units:[[:space:]]*//p' "$log")
            speed=$(sed -n 's/^stat::average_exec_per_sec:[[:space:]]*//p' "$log")
            echo "PASS fuzz $name: ${runs:-?} executions in $seconds s (${speed:-?}/s)," \
                "$(ls "$work" | wc -l) inputs in $work"
        else
            failed=1
            echo "FAIL fuzz $name: crash inputs in build/fuzz/crashes/; last lines of $log:"
            tail -n 40 "$log" | sed 's/^/    /'
        fi
    done
    exit $failed
    ;;
*)
    echo "usage: $0 run [SECONDS] | replay | build" >&2
    exit 2
    ;;
esac
