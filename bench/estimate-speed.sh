#!/usr/bin/env bash
# estimate-speed.sh - how fast `uzram estimate` goes through an input in the page cache: the
# first SIZE of `tar cf - /usr`, with lz4 and with no algorithm (classes and dedup only), at 1
# and 2 threads; best of REPEAT wall times. The table of docs/BENCHMARKS.md's
# "uzram estimate throughput" part.
#
# Usage: bench/estimate-speed.sh [--doc docs/BENCHMARKS.md] [UZRAM]
#   --doc FILE  replace the ESTIMATE SPEED part of FILE with the result
# Environment: SIZE (default 1024, MiB), REPEAT (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/doc.bash
doc_parse "$@"
set -- "${ARGS[@]}"
UZRAM=$(realpath "${1:-build/uzram}")
SIZE=${SIZE:-1024}
REPEAT=${REPEAT:-3}
PY=/usr/bin/python3
[[ -x $UZRAM ]] || { echo "estimate-speed.sh: no uzram at $UZRAM" >&2; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/uzram-estimate-speed.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

tar cf - /usr 2>/dev/null | head -c "${SIZE}M" >"$WORK/input.tar" || true
bytes=$(stat -c %s "$WORK/input.tar")
cat "$WORK/input.tar" >/dev/null # into the page cache
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
WHEN=$(date -u '+%Y-%m-%d %H:%M UTC')
: >"$WORK/times"
for algorithms in lz4 none; do
    for jobs in 1 2; do
        best=
        for _ in $(seq "$REPEAT"); do
            start=$(date +%s.%N)
            "$UZRAM" estimate -q -j "$jobs" -a "$algorithms" --json "$WORK/input.tar" >"$WORK/out.json"
            end=$(date +%s.%N)
            t=$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.3f", b - a}')
            if [[ -z $best ]] || awk -v t="$t" -v b="$best" 'BEGIN {exit !(t < b)}'; then best=$t; fi
        done
        echo "$algorithms $jobs $best" >>"$WORK/times"
        echo "-a $algorithms -j $jobs: best $best s" >&2
    done
done
GIT=$(bench_git)
$PY - "$WORK/times" "$bytes" "$REPEAT" "$GIT" "$WHEN" "$LOAD" "$(nproc)" >"$WORK/text" <<'EOF'
import sys
times, size, repeat, git, when, load, cpus = sys.argv[1:]
pages = int(size) // 4096
print("Command: `bench/estimate-speed.sh`, uzram git %s, %s, load average %s at the start, %s CPUs: "
      "`uzram estimate -q -j N -a ALGO --json FILE` on the first %d MiB of `tar cf - /usr` "
      "(%d pages, in the page cache), best of %s runs." % (git, when, load, cpus, int(size) >> 20, pages, repeat))
print()
print("| algorithms | -j | wall time | pages/s |")
print("| --- | ---: | ---: | ---: |")
for line in open(times):
    algorithms, jobs, seconds = line.split()
    name = "none (classes and dedup only)" if algorithms == "none" else algorithms
    print("| %s | %s | %.2f s | %s |" % (name, jobs, float(seconds), format(int(pages / float(seconds)), ",")))
EOF
cat "$WORK/text"
if [[ -n $DOC ]]; then
    doc_block "$DOC" "<!-- BEGIN ESTIMATE SPEED (bench/estimate-speed.sh --doc; do not edit by hand) -->" \
        "<!-- END ESTIMATE SPEED -->" "$WORK/text"
    echo "($DOC updated)" >&2
fi
