#!/usr/bin/env bash
# state-ab.sh - a device's state in a shareable file (issue 29) against anonymous memory: the
# same data written (4 KiB, one thread) and read back (64 KiB) through the library, rounds
# interleaved (which goes first alternates); the memory the pool accounts (mem_used_total) and
# what the process and its state file take (RssAnon growth + the memfd's allocated blocks);
# and the time uzram_adopt() takes for the state, after uzram_destroy() and after a SIGKILL.
# Medians over the rounds; the machine may be shared.
#
# Usage: bench/state-ab.sh [--doc FILE] [--dedup] [DISK_MIB [STORED_MIB [ROUNDS]]]
#        (default: a 4096 MiB disk with 1024 MiB stored, 5 rounds)
#   --doc FILE  also write the table between the STATE-AB markers of FILE
#   --dedup     both devices with dedup on (every page but the same-filled ones unique: an
#               entry each, the index at its largest for the data)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/doc.bash
doc_parse "$@"
set -- "${ARGS[@]}"
DEDUP=
if [[ ${1:-} == --dedup ]]; then
    DEDUP=dedup
    shift
fi
DISK=${1:-4096}
STORED=${2:-1024}
ROUNDS=${3:-5}
BIN=build/bench/state_ab
GIT=$(bench_git) # the commit the binary is built from
make -s -j2 lib build/src/common/datagen.o >/dev/null
mkdir -p build/bench
# shellcheck disable=SC2046
gcc -std=gnu11 -O2 -g -Wall -Wextra -Werror -Iinclude -Isrc -o "$BIN" bench/state_ab.c \
    build/src/common/datagen.o build/libuzram.a \
    $(pkg-config --libs liblz4 libzstd lzo2 libdeflate libxxhash 2>/dev/null || echo -llz4 -lzstd -llzo2 -ldeflate -lxxhash) \
    -pthread -lm
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
"$BIN" "$DISK" "$STORED" "$ROUNDS" $DEDUP | tee "$OUT" >&2

TABLE=$(/usr/bin/python3 - "$OUT" "$DISK" "$STORED" "$ROUNDS" "$GIT" "$DEDUP" <<'PY'
import statistics, sys
path, disk, stored, rounds, git, dedup = sys.argv[1:7]
values = {}
for line in open(path):
    mode, _, key, value = line.split()
    values.setdefault((mode, key), []).append(float(value))
med = lambda mode, key: statistics.median(values[(mode, key)])
rows = [("write, MiB/s (4 KiB, 1 thread)", "write_mib_s"),
        ("read, MiB/s (64 KiB, 1 thread)", "read_mib_s"),
        ("pool memory (mem_used_total), MiB", "mem_used_mib"),
        ("memory taken (process RssAnon + state file), MiB", "memory_mib")]
print("A %s MiB disk with %s MiB stored (text, half-compressible, same-filled, zero and random"
      " pages), lz4%s; medians of %s interleaved rounds; commit %s."
      % (disk, stored, ", dedup on" if dedup else "", rounds, git))
print()
print("| | anonymous memory | state file (memfd) |")
print("| --- | ---: | ---: |")
for label, key in rows:
    print("| %s | %.1f | %.1f |" % (label, med("anon", key), med("state", key)))
print()
print("uzram_adopt() of that state: %.1f ms after uzram_destroy(), %.1f ms after a SIGKILL"
      " (medians; max %.1f ms)." % (med("state", "adopt_clean_ms"), med("state", "adopt_killed_ms"),
      max(values[("state", "adopt_clean_ms")] + values[("state", "adopt_killed_ms")])))
PY
)
echo "$TABLE"
if [[ -n $DOC ]]; then
    printf '%s\n' "$TABLE" >"$OUT"
    doc_block "$DOC" "<!-- BEGIN STATE-AB (bench/state-ab.sh --doc; do not edit by hand) -->" \
        "<!-- END STATE-AB -->" "$OUT"
    echo "state-ab.sh: wrote the STATE-AB part of $DOC"
fi
