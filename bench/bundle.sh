#!/usr/bin/env bash
# bundle.sh - bundles (issue 27, item 1): memory and read speed of idle pages recompressed one
# by one with zstd, and in bundles of 4, 8 and 16 neighbours (recompress_group), against lz4,
# on real data. An image of /usr/include and /usr/lib (headers, libraries, binaries: what a
# build tree and a system hold) is stored with lz4 (no dedup: a page with a dedup entry is
# never bundled), then `idle all` + `recompress type=idle` with zstd level 7 and a trained
# 64 KiB dictionary (dict=auto), then `compact`. Reads over NBD from one client thread with 16
# requests in flight (`uzram bench nbd`, which costs the client 2-3 us a request): 4 KiB at
# random offsets, and 32 KiB one after another (what sequential reads and swap readahead of 8
# pages ask). One server a form, all of them up at once, and the read runs taken in turns (a
# round reads every form), so that a change in the load of a shared machine weighs on every
# form alike.
#
# Usage: bench/bundle.sh [--doc] [MIB]   (default 128 MiB of image)
#   --doc   also write the table between the BUNDLE markers of docs/BENCHMARKS.md
# Environment: UZRAM (default build/uzram), REQUESTS (random 4 KiB reads a run, default 40000;
# sequential runs read the image once), ROUNDS (rounds of read runs, each a random and a
# sequential run of every form, default 3: the medians are shown, as the machine may be shared).
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

IMAGE=$WORK/image
tar cf - -C / usr/include usr/lib/x86_64-linux-gnu 2>/dev/null | head -c $((MIB << 20)) >"$IMAGE" || true
[[ $(stat -c %s "$IMAGE") -eq $((MIB << 20)) ]] || { echo "bundle.sh: image short" >&2; exit 2; }

declare -A SERVERS=() # form -> server pid
trap 'for pid in "${SERVERS[@]}"; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done; rm -rf "$WORK"' EXIT
serve() { # FORM GROUP: a server named FORM, bundles of GROUP pages (0: none)
    local spec="algo=zstd,level=7,dict=auto"
    [[ $2 -gt 0 ]] && spec="$spec,group=$2"
    "$UZRAM" serve -q -n "$1" -s $((MIB + 16))M -a lz4 --recompress "$spec" >"$WORK/$1.log" 2>&1 &
    SERVERS[$1]=$!
    for _ in $(seq 100); do [[ -S $WORK/uzram/$1.sock && -S $WORK/uzram/$1.ctl ]] && return; sleep 0.1; done
    echo "bundle.sh: server $1 did not start: $(cat "$WORK/$1.log")" >&2
    exit 2
}
reads() { # FORM PATTERN BLOCK REQUESTS: "requests-a-second server-CPU-us-a-request"
    "$UZRAM" bench nbd --unix "$WORK/uzram/$1.sock" --rw read --pattern "$2" --block-size "$3" \
        --region ${MIB}M --requests "$4" --server-pid "${SERVERS[$1]}" --json |
        $PY -c 'import json,sys; d=json.load(sys.stdin); print(d["requests_per_s"], d["server_cpu_us_per_request"])'
}

# lz4 as written, and the same recompressed one page an object (zstd-0) or in bundles
FORMS=(lz4 zstd-0 zstd-4 zstd-8 zstd-16)
for form in "${FORMS[@]}"; do
    group=${form#zstd-}
    [[ $form == lz4 ]] && group=0
    serve "$form" "$group"
    nbdcopy --no-extents -S 0 "$IMAGE" "nbd+unix:///?socket=$WORK/uzram/$form.sock"
    if [[ $form != lz4 ]]; then
        "$UZRAM" attr "$form" idle all
        "$UZRAM" attr "$form" recompress type=idle
        "$UZRAM" attr "$form" compact 1
    fi
    echo "bundle.sh: $form stored" >&2
done
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq "$ROUNDS"); do
    for form in "${FORMS[@]}"; do
        reads "$form" random 4K "$REQUESTS" >>"$WORK/$form.random"
        reads "$form" seq 32K $((MIB * 32)) >>"$WORK/$form.seq"
    done
    echo "bundle.sh: round $round done" >&2
done
for form in "${FORMS[@]}"; do
    # stat_json and the medians of the rounds into FORM.json
    "$UZRAM" attr "$form" stat_json | $PY -c '
import json, statistics, sys
d = json.load(sys.stdin)
def medians(path):
    runs = [line.split() for line in open(path)]
    return [statistics.median(float(r[i]) for r in runs) for i in (0, 1)]
d["rand4k"], d["rand4k_us"] = medians(sys.argv[1])
d["seq32k"], d["seq32k_us"] = medians(sys.argv[2])
print(json.dumps(d))' "$WORK/$form.random" "$WORK/$form.seq" >"$WORK/$form.json"
    cmp -n $((MIB << 20)) "$IMAGE" <(nbdcopy "nbd+unix:///?socket=$WORK/uzram/$form.sock" -) ||
        { echo "bundle.sh: $form read back differs" >&2; exit 1; }
done

text=$WORK/table.md
$PY - "$WORK" "$MIB" "$(bench_git)" "$(date -u '+%Y-%m-%d %H:%M UTC')" "$(nproc)" \
    "$LOAD_START" "$(cut -d' ' -f1-3 /proc/loadavg)" "$REQUESTS" "$ROUNDS" >"$text" <<'EOF'
import json, sys
work, mib, git, when, cpus, load_start, load, requests, rounds = sys.argv[1:10]
rows = [("lz4 (as written)", "lz4")] + [("zstd-7 + dict, one page an object", "zstd-0")] + \
    [("zstd-7 + dict, bundles of %d" % n, "zstd-%d" % n) for n in (4, 8, 16)]
d = {key: json.load(open("%s/%s.json" % (work, key))) for _, key in rows}
single = d["zstd-0"]
print("### Bundles against single pages: `bench/bundle.sh --doc %s`\n" % mib)
print("uzram %s, %s, %s CPUs, load average %s when the reads began, %s at the end. %s MiB of "
      "/usr/include and /usr/lib/x86_64-linux-gnu (tar), stored with lz4, then `idle all`, "
      "`recompress type=idle` (zstd level 7, 64 KiB trained dictionary; `recompress_group` N), "
      "`compact`; one server a form. Reads: `uzram bench nbd`, 16 in flight, %s random 4 KiB "
      "reads, and the image once in 32 KiB sequential reads; %s rounds, each reading every "
      "form in turn, and the medians. Memory includes the dictionary.\n"
      % (git, when, cpus, load_start, load, mib, requests, rounds))
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
