#!/usr/bin/env bash
# bundle-shapes.sh - what the shape of a bundle's frame costs (issue 27): for bundles of 4, 8
# and 16 pages, frames cut into blocks of 1, 2, 4 pages or not at all (the engine's cut,
# lib/codec/comp.c comp_span_block, marked), memory against the pages a random read of a bundled
# page decodes and the CPU time it takes, from bench/bundle_shapes.c (the engine's own
# compression, pool costs and span decoder, in one process) on the image bench/bundle.sh
# stores. What bounds random reads of bundles, and what a smaller or larger cut would cost in
# memory.
#
# Usage: bench/bundle-shapes.sh [--doc] [MIB]   (default 128 MiB of image)
#   --doc   also write the table between the BUNDLE-SHAPES markers of docs/BENCHMARKS.md
# Environment: ROUNDS (timing rounds, default 3: the medians are shown).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/doc.bash
DOC=0
[[ ${1:-} == --doc ]] && DOC=1 && shift
MIB=${1:-128}
ROUNDS=${ROUNDS:-3}
LIB=build/libuzram.a
[[ -f $LIB ]] || { echo "bundle-shapes.sh: no $LIB (make lib)" >&2; exit 2; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/uzram-shapes.XXXXXX") || { echo "bundle-shapes.sh: mktemp failed" >&2; exit 1; }
trap 'rm -rf "$WORK"' EXIT

gcc -std=gnu11 -O2 -Wall -Wextra -Werror -Iinclude -Ilib -o "$WORK/bundle_shapes" \
    bench/bundle_shapes.c "$LIB" -lzstd -llz4 -llzo2 -ldeflate -lxxhash -lpthread -lm
IMAGE=$WORK/image
tar cf - -C / usr/include usr/lib/x86_64-linux-gnu 2>/dev/null | head -c $((MIB << 20)) >"$IMAGE" || true
[[ $(stat -c %s "$IMAGE") -eq $((MIB << 20)) ]] || { echo "bundle-shapes.sh: image short" >&2; exit 2; }
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
"$WORK/bundle_shapes" "$IMAGE" "$ROUNDS" >"$WORK/rows"

text=$WORK/table.md
{
    echo "### Shapes of a bundle's frame: \`bench/bundle-shapes.sh --doc $MIB\`"
    echo
    echo "uzram $(bench_git), $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load average $LOAD_START" \
        "at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end. $MIB MiB of /usr/include and" \
        "/usr/lib/x86_64-linux-gnu (tar), same-filled pages left out; zstd level 7 with a 64 KiB" \
        "dictionary trained on every 8th page; each aligned window of N pages one frame in blocks" \
        "of B pages where that takes less pool memory than its pages alone. Memory: pool bytes" \
        "(pool_object_cost; bundle_cost: its pieces and its record) against each page alone. A random read of a bundled" \
        "page: the pages its decode goes through, (on average over every place) and the CPU time" \
        "of comp_span_decode from a fresh begin, against comp_decompress_dict of a page alone;" \
        "medians of $ROUNDS rounds. Decoding only: no NBD, no copy out of the pool."
    echo
    echo "| form | block B (pages) | pool memory | x alone | pages decoded a random read | decode us a random read | x alone |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    cat "$WORK/rows"
} >"$text"
cat "$text"
if [[ $DOC == 1 ]]; then
    doc_block docs/BENCHMARKS.md "<!-- BEGIN BUNDLE-SHAPES (bench/bundle-shapes.sh --doc; do not edit by hand) -->" \
        "<!-- END BUNDLE-SHAPES -->" "$text"
    echo "bundle-shapes.sh: wrote the BUNDLE-SHAPES part of docs/BENCHMARKS.md"
fi
