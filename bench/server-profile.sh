#!/usr/bin/env bash
# server-profile.sh - where the server's CPU goes per request (issue 25), on both paths a
# client reaches it by:
#   nbd     `uzram serve` loaded by `uzram bench nbd` (one thread, 16 requests in flight, a
#           fixed request count; it costs the client about 2-3 us a request, so the server's
#           own ceiling shows);
#   attach  the same server's FUSE file behind a loop device (`uzram attach --via loop`),
#           loaded by fio (libaio, direct, 16 in flight, a fixed request count: --io_size at
#           random offsets, --norandommap, so that it is not cut at one pass over the region),
#           over /dev/fuse and, where the kernel has it (Linux 6.14+), over io_uring (the fuse
#           module's enable_uring turned on for that run and put back after).
# `perf record` samples the server; each sample is put in one part by the code it was in:
#   kernel     system calls, the socket or FUSE stack, scheduling, page faults ([k] symbols)
#   transport  the program's own code outside the engine (src/: NBD or FUSE requests and
#              replies) and libfuse
#   engine     libuzram's code (lib/: page table, pool, dedup, locks)
#   codec      the compression libraries (liblz4, libzstd, ...)
#   libc       the C library (memcpy, malloc, pthread, system call wrappers)
# and the server's CPU per request (utime + stime from /proc) is split in the same shares.
# Random 4 KiB reads and writes over 512 MiB filled first; 50% compressible. Beside it, the
# codec alone (`uzram bench -a lz4 -k half`: one page compressed or decompressed in-process):
# the floor under what a request can cost the server.
#
# Usage: bench/server-profile.sh [--doc] [REQUESTS]   (default 400000 a run)
#   --doc   also write the table between the SERVER-PROFILE markers of docs/BENCHMARKS.md
# Needs perf (linux-perf) and root (loop devices for attach; perf on another process).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/doc.bash
DOC=0
[[ ${1:-} == --doc ]] && DOC=1 && shift
REQUESTS=${1:-400000}
UZRAM=$(realpath "${UZRAM:-build/uzram}")
die() { echo "server-profile: $*" >&2; exit 2; }
command -v perf >/dev/null || die "perf is not installed (apt-get install linux-perf)"
command -v fio >/dev/null || die "fio is not installed (apt-get install fio)"
[[ $(id -u) == 0 ]] || die "needs root (a loop device for the attach path, perf on the server)"
make -s programs >/dev/null
WORK=$(mktemp -d "${TMPDIR:-/tmp}/uzram-profile.XXXXXX")
export XDG_RUNTIME_DIR=$WORK
SOCK=$WORK/uzram/prof.sock
SERVER= ATTACHED=0
URING_PARAM=/sys/module/fuse/parameters/enable_uring
URING_OLD=$(cat "$URING_PARAM" 2>/dev/null || true)
set_uring() { [[ -z $URING_OLD ]] || echo "$1" >"$URING_PARAM"; }
cleanup() {
    set_uring "$URING_OLD"
    [[ $ATTACHED == 1 ]] && "$UZRAM" detach prof >/dev/null 2>&1
    [[ -n $SERVER ]] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

server_start() {
    "$UZRAM" serve -n prof -s 1G --threads 1 -q >"$WORK/server.out" 2>&1 &
    SERVER=$!
    for _ in $(seq 100); do [[ -S $SOCK ]] && return 0; sleep 0.1; done
    die "the server did not start: $(cat "$WORK/server.out")"
}
server_stop() {
    kill "$SERVER"
    wait "$SERVER" 2>/dev/null || true
    SERVER=
}
server_ticks() { awk '{print $14 + $15}' "/proc/$SERVER/stat"; }

# Which symbols are the engine's: every function of libuzram.a, static ones too.
nm --defined-only build/libuzram.a 2>/dev/null | awk '$2 ~ /^[tTwW]$/ {print $3}' | sort -u >"$WORK/engine.syms"

# split LABEL DATA US: the perf samples in DATA by part, scaled to US a request; prints
# "LABEL US kernel transport engine codec libc" and "# LABEL share part symbol" lines.
split() {
    local label=$1 data=$2 us=$3
    perf report -i "$data" --no-children --sort dso,sym --stdio -g none --percent-limit 0 \
        2>/dev/null >"$data.report"
    /usr/bin/python3 - "$data.report" "$WORK/engine.syms" "$label" "$us" <<'PY'
import re, sys
report, syms, label, us = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
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
print(label, "%.2f" % us, *("%.2f" % (us * parts[p] / total) for p in parts))
for pct, part, sym in sorted(top, reverse=True)[:5]:
    print("#", label, "%.1f%%" % (pct * 100 / total), part, sym)
PY
}

# record DATA CMD...: perf on the server while CMD runs.
record() {
    local data=$1 perf_pid
    shift
    perf record -q -F 2999 -p "$SERVER" -o "$data" 2>/dev/null &
    perf_pid=$!
    sleep 0.5
    "$@"
    kill -INT "$perf_pid"
    wait "$perf_pid" 2>/dev/null || true
}

nbd_path() {
    server_start
    "$UZRAM" bench nbd --unix "$SOCK" --rw write --pattern seq --region 512M --block-size 1M \
        --requests 512 >/dev/null
    local rw us
    for rw in read write; do
        record "$WORK/nbd-$rw.data" "$UZRAM" bench nbd --unix "$SOCK" --rw "$rw" --region 512M \
            --requests "$REQUESTS" --server-pid "$SERVER" --json >"$WORK/nbd-$rw.json"
        us=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["server_cpu_us_per_request"])' "$WORK/nbd-$rw.json")
        split "nbd-$rw" "$WORK/nbd-$rw.data" "$us"
    done
    server_stop
}

attach_path() { # LABEL Y|N: the FUSE file over io_uring (Y) or /dev/fuse (N)
    local label=$1 dev rw t0 t1 done
    set_uring "$2"
    server_start
    dev=$("$UZRAM" attach --via loop prof 2>"$WORK/attach.err") || die "attach failed: $(cat "$WORK/attach.err")"
    ATTACHED=1
    local fio=(fio --name=p --filename="$dev" --ioengine=libaio --direct=1 --iodepth=16 --numjobs=1
        --size=512M --buffer_compress_percentage=50 --refill_buffers --buffer_pattern=0xdeadbeef
        --output="$WORK/fio.out")
    "${fio[@]}" --rw=write --bs=1M
    for rw in read write; do
        t0=$(server_ticks)
        record "$WORK/$label-$rw.data" "${fio[@]}" --rw="rand$rw" --bs=4k --norandommap \
            --io_size=$((REQUESTS * 4096)) --output-format=json
        t1=$(server_ticks)
        done=$(/usr/bin/python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))["jobs"][0]; print(j["read"]["total_ios"] + j["write"]["total_ios"])' "$WORK/fio.out")
        [[ $done == "$REQUESTS" ]] || die "fio did $done requests, not $REQUESTS"
        split "$label-$rw" "$WORK/$label-$rw.data" \
            "$(awk -v t=$((t1 - t0)) -v n="$done" -v hz="$(getconf CLK_TCK)" 'BEGIN {print t * 1e6 / hz / n}')"
    done
    "$UZRAM" detach prof >/dev/null
    ATTACHED=0
    server_stop
}

# The codec alone: one 4 KiB page of the same kind of data, in-process.
codec_floor() {
    "$UZRAM" bench -a lz4 -k half -t 1 -s 64M --json >"$WORK/codec.json"
    /usr/bin/python3 - "$WORK/codec.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
def find(node):
    if isinstance(node, dict):
        if node.get("algorithm") == "lz4" and "compress_MBps" in node:
            return node
        for v in node.values():
            r = find(v)
            if r: return r
    if isinstance(node, list):
        for v in node:
            r = find(v)
            if r: return r
c = find(doc)
print("codec %.2f %.2f" % (4096 / c["decompress_MBps"], 4096 / c["compress_MBps"]))
PY
}

{
    nbd_path
    attach_path attach N
    [[ -w $URING_PARAM ]] && attach_path attach_uring Y
    codec_floor
} >"$WORK/table"
cat "$WORK/table"
[[ $DOC == 1 ]] || exit 0
text=$WORK/doc
read -r _ floor_read floor_write < <(grep '^codec ' "$WORK/table")
{
    echo "### Server CPU per request, by part: \`bench/server-profile.sh --doc $REQUESTS\`"
    echo
    echo "uzram $(bench_git), $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end."
    echo "\`uzram serve -s 1G --threads 1\`; nbd: loaded by \`uzram bench nbd\` (one thread, 16 requests in"
    echo "flight); attach: its FUSE file behind a loop device, loaded by fio (libaio, direct, 16 in flight),"
    echo "over /dev/fuse and (Linux 6.14+, the fuse module's enable_uring on) over io_uring."
    echo "$REQUESTS random 4 KiB requests a run over 512 MiB filled first, 50% compressible; \`perf record"
    echo "-F 2999\` on the server; the server's CPU per request (from /proc) split in the shares of its samples."
    echo
    echo "| path, request | server CPU us | kernel | transport (src/, libfuse) | engine (lib/) | codec | libc |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    awk '!/^#/ && $1 != "codec" {sub("-", ", ", $1); sub("attach_uring", "attach over io_uring", $1); printf "| %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7}' "$WORK/table"
    echo
    echo "The codec alone (\`uzram bench -a lz4 -k half -t 1\`, in-process): $floor_read us to decompress"
    echo "a page, $floor_write us to compress one."
    echo
    echo "The largest symbols of each run:"
    echo
    awk '/^#/ {printf "- %s: %s %s (%s)\n", $2, $3, $5, $4}' "$WORK/table"
} >"$text"
doc_block docs/BENCHMARKS.md "<!-- BEGIN SERVER-PROFILE (bench/server-profile.sh --doc; do not edit by hand) -->" \
    "<!-- END SERVER-PROFILE -->" "$text"
echo "server-profile: wrote the SERVER-PROFILE part of docs/BENCHMARKS.md"
