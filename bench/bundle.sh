#!/usr/bin/env bash
# bundle.sh - bundles (issue 27, item 1): memory and read speed of idle pages recompressed one
# by one with zstd, and in bundles of 4, 8 and 16 neighbours (recompress_group), against lz4,
# on real data. An image of /usr/include and /usr/lib (headers, libraries, binaries: what a
# build tree and a system hold) is stored with lz4 (no dedup: a page with a dedup entry is
# never bundled), then `idle all` + `recompress type=idle` with zstd level 7 and a trained
# 64 KiB dictionary (dict=auto), then `compact`. Reads over NBD from one client thread with 16
# requests in flight (`uzram bench nbd`, which costs the client 2-3 us a request): 4 KiB at
# random offsets, and 32 KiB one after another (what sequential reads and swap readahead of 8
# pages ask).
#
# Usage: bench/bundle.sh [--doc] [MIB]   (default 128 MiB of image)
#   --doc   also write the table between the BUNDLE markers of docs/BENCHMARKS.md
# Environment: UZRAM (default build/uzram), REQUESTS (random 4 KiB reads a run, default 40000;
# sequential runs read the image once), ROUNDS (read runs of each kind a form, default 3: the
# medians are shown, as the machine may be shared).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/doc.bash
DOC=0
[[ ${1:-} == --doc ]] && DOC=1 && shift
MIB=${1:-128}
REQUESTS=${REQUESTS:-40000}
ROUNDS=${ROUNDS:-3}
UZRAM=${UZRAM:-build/uzram}
PY=/usr/bin/python3
[[ -x $UZRAM ]] || { echo "bundle.sh: no uzram at $UZRAM (make programs)" >&2; exit 2; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/uzram-bundle.XXXXXX") || { echo "bundle.sh: mktemp failed" >&2; exit 1; }
export XDG_RUNTIME_DIR=$WORK
SERVER=
trap '[[ -n $SERVER ]] && { kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; }; rm -rf "$WORK"' EXIT

IMAGE=$WORK/image
tar cf - -C / usr/include usr/lib/x86_64-linux-gnu 2>/dev/null | head -c $((MIB << 20)) >"$IMAGE" || true
[[ $(stat -c %s "$IMAGE") -eq $((MIB << 20)) ]] || { echo "bundle.sh: image short" >&2; exit 2; }

serve() { # GROUP
    local spec="algo=zstd,level=7,dict=auto"
    [[ $1 -gt 0 ]] && spec="$spec,group=$1"
    "$UZRAM" serve -q -n b -s $((MIB + 16))M -a lz4 --recompress "$spec" >"$WORK/server.log" 2>&1 &
    SERVER=$!
    for _ in $(seq 100); do [[ -S $WORK/uzram/b.sock && -S $WORK/uzram/b.ctl ]] && return; sleep 0.1; done
    echo "bundle.sh: server did not start: $(cat "$WORK/server.log")" >&2
    exit 2
}
stop() { kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=; }
stats() { "$UZRAM" attr b stat_json; }
reads() { # PATTERN BLOCK REQUESTS: "requests-a-second server-CPU-us-a-request"
    "$UZRAM" bench nbd --unix "$WORK/uzram/b.sock" --rw read --pattern "$1" --block-size "$2" \
        --region ${MIB}M --requests "$3" --server-pid "$SERVER" --json |
        $PY -c 'import json,sys; d=json.load(sys.stdin); print(d["requests_per_s"], d["server_cpu_us_per_request"])'
}
measure() { # NAME: stat_json and the medians of ROUNDS read runs into NAME.json
    local random=() seq=() round
    for round in $(seq "$ROUNDS"); do
        random+=("$(reads random 4K "$REQUESTS")")
        seq+=("$(reads seq 32K $((MIB * 32)))")
    done
    stats | $PY -c '
import json, statistics, sys
d = json.load(sys.stdin)
half = (len(sys.argv) - 1) // 2
def medians(runs):
    return [statistics.median(float(r.split()[i]) for r in runs) for i in (0, 1)]
d["rand4k"], d["rand4k_us"] = medians(sys.argv[1:1 + half])
d["seq32k"], d["seq32k_us"] = medians(sys.argv[1 + half:])
print(json.dumps(d))' "${random[@]}" "${seq[@]}" >"$WORK/$1.json"
}

for group in 0 4 8 16; do
    serve $group
    nbdcopy --no-extents -S 0 "$IMAGE" "nbd+unix:///?socket=$WORK/uzram/b.sock"
    [[ $group -eq 0 ]] && measure lz4
    "$UZRAM" attr b idle all
    "$UZRAM" attr b recompress type=idle
    "$UZRAM" attr b compact 1
    measure "zstd-$group"
    cmp -n $((MIB << 20)) "$IMAGE" <(nbdcopy "nbd+unix:///?socket=$WORK/uzram/b.sock" -) ||
        { echo "bundle.sh: group $group read back differs" >&2; exit 1; }
    stop
    echo "bundle.sh: group $group done" >&2
done

text=$WORK/table.md
$PY - "$WORK" "$MIB" "$(bench_git)" "$(date -u '+%Y-%m-%d %H:%M UTC')" "$(nproc)" \
    "$(cut -d' ' -f1-3 /proc/loadavg)" "$REQUESTS" "$ROUNDS" >"$text" <<'EOF'
import json, sys
work, mib, git, when, cpus, load, requests, rounds = sys.argv[1:9]
rows = [("lz4 (as written)", "lz4")] + [("zstd-7 + dict, one page an object", "zstd-0")] + \
    [("zstd-7 + dict, bundles of %d" % n, "zstd-%d" % n) for n in (4, 8, 16)]
d = {key: json.load(open("%s/%s.json" % (work, key))) for _, key in rows}
single = d["zstd-0"]
print("### Bundles against single pages: `bench/bundle.sh --doc %s`\n" % mib)
print("uzram %s, %s, %s CPUs, load average %s at the end. %s MiB of /usr/include and "
      "/usr/lib/x86_64-linux-gnu (tar), stored with lz4, then `idle all`, `recompress type=idle` "
      "(zstd level 7, 64 KiB trained dictionary; `recompress_group` N), `compact`. Reads: "
      "`uzram bench nbd`, 16 in flight, %s random 4 KiB reads, and the image once in 32 KiB "
      "sequential reads; medians of %s runs of each. Memory includes the dictionary.\n"
      % (git, when, cpus, load, mib, requests, rounds))
print("| form | mem_used_total | x single zstd | pages in bundles | random 4 KiB reads/s "
      "(server us/read) | x single | sequential 32 KiB reads/s (server us/read) | x single |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for name, key in rows:
    r = d[key]
    print("| %s | %.1f MiB | %.3f | %d | %.0f (%.1f) | %.2f | %.0f (%.1f) | %.2f |" % (
        name, r["mem_used_total"] / 2**20, r["mem_used_total"] / single["mem_used_total"],
        r.get("bundled_pages", 0), r["rand4k"], r["rand4k_us"], r["rand4k"] / single["rand4k"],
        r["seq32k"], r["seq32k_us"], r["seq32k"] / single["seq32k"]))
EOF
cat "$text"
if [[ $DOC == 1 ]]; then
    doc_block docs/BENCHMARKS.md "<!-- BEGIN BUNDLE (bench/bundle.sh --doc; do not edit by hand) -->" \
        "<!-- END BUNDLE -->" "$text"
    echo "bundle.sh: wrote the BUNDLE part of docs/BENCHMARKS.md"
fi
