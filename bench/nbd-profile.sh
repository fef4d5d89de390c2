#!/usr/bin/env bash
# nbd-profile.sh - where the NBD server's CPU goes per request (issue 25): `uzram serve` loaded by
# `uzram bench nbd` (one thread, many requests in flight, a fixed request count; it costs the
# client about 2-3 us a request, so the server's own ceiling shows), with `perf record` on the
# server. Each sample of the server is put in one part by the code it was in:
#   kernel     system calls, the socket stack, scheduling, page faults ([k] symbols)
#   transport  the program's own code outside the engine (src/: NBD requests and replies)
#   engine     libuzram's code (lib/: page table, pool, dedup, locks)
#   codec      the compression libraries (liblz4, libzstd, ...)
#   libc       the C library (memcpy, malloc, pthread, system call wrappers)
# and the server's CPU per request (utime + stime from /proc, reported by bench nbd) is split in
# the same shares. Random 4 KiB reads and writes over a region filled first; 50% compressible.
#
# Usage: bench/nbd-profile.sh [--doc] [REQUESTS]   (default 400000 a run)
#   --doc   also write the table between the NBD-PROFILE markers of docs/BENCHMARKS.md
# Needs perf (linux-perf) and root (or perf_event_paranoid <= 1).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/doc.bash
DOC=0
[[ ${1:-} == --doc ]] && DOC=1 && shift
REQUESTS=${1:-400000}
UZRAM=${UZRAM:-build/uzram}
command -v perf >/dev/null || { echo "nbd-profile: perf is not installed (apt-get install linux-perf)" >&2; exit 2; }
make -s programs >/dev/null
WORK=$(mktemp -d "${TMPDIR:-/tmp}/uzram-profile.XXXXXX")
SOCK=$WORK/prof.sock
XDG_RUNTIME_DIR=$WORK "$UZRAM" serve -n prof -s 1G --unix "$SOCK" --threads 1 -q >"$WORK/server.out" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 100); do [[ -S $SOCK ]] && break; sleep 0.1; done
[[ -S $SOCK ]] || { echo "nbd-profile: the server did not start: $(cat "$WORK/server.out")" >&2; exit 2; }
"$UZRAM" bench nbd --unix "$SOCK" --rw write --pattern seq --region 512M --block-size 1M \
    --requests 512 >/dev/null

# Which symbols are the engine's: every function of libuzram.a, static ones too.
nm --defined-only build/libuzram.a 2>/dev/null | awk '$2 ~ /^[tTwW]$/ {print $3}' | sort -u >"$WORK/engine.syms"

profile() { # RW: perf over one bench nbd run; prints "RW us_per_request kernel transport engine codec libc"
    local rw=$1 us
    perf record -q -F 2999 -p "$SERVER" -o "$WORK/$rw.data" 2>/dev/null &
    local perf_pid=$!
    sleep 0.5
    "$UZRAM" bench nbd --unix "$SOCK" --rw "$rw" --region 512M --requests "$REQUESTS" \
        --server-pid "$SERVER" --json >"$WORK/$rw.json"
    kill -INT "$perf_pid"
    wait "$perf_pid" 2>/dev/null || true
    us=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["server_cpu_us_per_request"])' "$WORK/$rw.json")
    perf report -i "$WORK/$rw.data" --no-children --sort dso,sym --stdio -g none --percent-limit 0 \
        2>/dev/null >"$WORK/$rw.report"
    /usr/bin/python3 - "$WORK/$rw.report" "$WORK/engine.syms" "$rw" "$us" <<'PY'
import re, sys
report, syms, rw, us = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
engine = set(open(syms).read().split())
parts = dict.fromkeys(["kernel", "transport", "engine", "codec", "libc"], 0.0)
top = []
for line in open(report):
    m = re.match(r"\s+([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*)$", line)
    if not m:
        continue
    pct, dso, kind, sym = float(m.group(1)), m.group(2), m.group(3), m.group(4).strip()
    if kind == "k":
        part = "kernel"
    elif re.search(r"lz4|zstd|lzo|libz\.|deflate", dso):
        part = "codec"
    elif dso.startswith("libc") or "ld-linux" in dso:
        part = "libc"
    elif sym in engine:
        part = "engine"
    else:
        part = "transport"
    parts[part] += pct
    top.append((pct, part, sym))
total = sum(parts.values()) or 1
print(rw, us, *("%.2f" % (us * parts[p] / total) for p in parts))
for pct, part, sym in sorted(top, reverse=True)[:6]:
    print("#", rw, "%.1f%%" % (pct * 100 / total), part, sym)
PY
}

{
    profile read
    profile write
} >"$WORK/table"
cat "$WORK/table"
[[ $DOC == 1 ]] || exit 0
text=$WORK/doc
{
    echo "### Server CPU per request, by part: \`bench/nbd-profile.sh --doc $REQUESTS\`"
    echo
    echo "uzram $(bench_git), $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end."
    echo "\`uzram serve -s 1G --threads 1\` loaded by \`uzram bench nbd\` (one thread, 16 requests in flight,"
    echo "$REQUESTS random 4 KiB requests over 512 MiB filled first, 50% compressible); \`perf record -F 2999\` on"
    echo "the server; the server's CPU per request (from /proc) split in the shares of its samples."
    echo
    echo "| request | server CPU us | kernel | transport (src/) | engine (lib/) | codec | libc |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    awk '!/^#/ {printf "| %s | %.2f | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7}' "$WORK/table"
    echo
    echo "The largest symbols of each run:"
    echo
    awk '/^#/ {printf "- %s: %s %s (%s)\n", $2, $3, $5, $4}' "$WORK/table"
} >"$text"
doc_block docs/BENCHMARKS.md "<!-- BEGIN NBD-PROFILE (bench/nbd-profile.sh --doc; do not edit by hand) -->" \
    "<!-- END NBD-PROFILE -->" "$text"
echo "nbd-profile: wrote the NBD-PROFILE part of docs/BENCHMARKS.md"
