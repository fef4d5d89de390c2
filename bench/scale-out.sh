#!/usr/bin/env bash
# scale-out.sh - memory beyond one server, measured: one uzram server against two striped
# (raid0) or mirrored (raid1) by the client, all over TLS (PSK) on 127.0.0.1, the client
# bench/stripe.py (libnbd; md cannot run here: the kernel has no nbd, md or dm module). Rounds
# interleave the three layouts. Then what a dead server does: to the stripe, and to a mirror
# read through qemu's quorum driver (a raid1 engine that exists in user space).
#
# Usage: bench/scale-out.sh [--doc FILE] [UZRAM_BINARY]
# Environment: DATA_MIB=256 (data written and read back per run), CHUNK=1048576 (stripe unit
# and request size), DEPTH=8 (requests in flight over all servers), ROUNDS=3.
# With --doc FILE the results replace the SCALE-OUT part of FILE (docs/BENCHMARKS.md).
set -euo pipefail

DOC=
if [[ ${1:-} == --doc ]]; then
    DOC=$2
    shift 2
fi
UZRAM=$(realpath "${1:-build/uzram}")
DATA_MIB=${DATA_MIB:-256}
CHUNK=${CHUNK:-1048576}
DEPTH=${DEPTH:-8}
ROUNDS=${ROUNDS:-3}
PY=/usr/bin/python3
HERE=$(cd "$(dirname "$0")" && pwd)
COMMAND="bench/scale-out.sh${DOC:+ --doc $DOC}"
LOAD=$(cut -d" " -f1-3 /proc/loadavg) # at the start, for the report
WHEN=$(date -u '+%Y-%m-%d %H:%M UTC')
[[ $DATA_MIB != 256 || $CHUNK != 1048576 || $DEPTH != 8 || $ROUNDS != 3 ]] &&
    COMMAND="DATA_MIB=$DATA_MIB CHUNK=$CHUNK DEPTH=$DEPTH ROUNDS=$ROUNDS $COMMAND"

die() { echo "scale-out.sh: $*" >&2; exit 2; }
[[ -x $UZRAM ]] || die "no uzram binary at $UZRAM"
for tool in psktool qemu-io; do command -v $tool >/dev/null || die "$tool is not installed"; done
$PY -c 'import nbd' 2>/dev/null || die "$PY has no nbd module (python3-libnbd)"

WORK=$(mktemp -d)
declare -A PID PORT
cleanup() {
    for p in "${PID[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
    rm -rf "$WORK"
}
trap cleanup EXIT
export XDG_RUNTIME_DIR=$WORK/run
mkdir -m 700 "$XDG_RUNTIME_DIR"

# Compressible data as on a real disk: the machine's own libraries and programs.
find /usr/lib /usr/bin -type f -size +64k 2>/dev/null | sort | xargs cat 2>/dev/null |
    head -c $((DATA_MIB * 1048576)) >"$WORK/data" || true
[[ $(stat -c %s "$WORK/data") -eq $((DATA_MIB * 1048576)) ]] || die "not enough files for $DATA_MIB MiB"
mkdir -p "$WORK/psk"
psktool -u bench -p "$WORK/psk/keys.psk" >/dev/null 2>&1

# start NAME SIZE: a server on TCP 127.0.0.1 (a free port) requiring TLS with the PSK.
start() {
    # made here, not by the background job's redirection, which may come after the first sed
    : >"$WORK/$1.out"
    "$UZRAM" serve -n "$1" -s "$2" --no-unix --tcp 127.0.0.1:0 --tls require \
        --tls-psk "$WORK/psk/keys.psk" >"$WORK/$1.out" 2>"$WORK/$1.err" &
    PID[$1]=$!
    for _ in $(seq 100); do
        PORT[$1]=$(sed -n 's/.*tcp:127\.0\.0\.1:\([0-9]*\).*/\1/p' "$WORK/$1.out")
        [[ -n ${PORT[$1]} ]] && return 0
        sleep 0.1
    done
    die "server $1 did not start: $(cat "$WORK/$1.err")"
}
uri() { echo "nbds://bench@127.0.0.1:${PORT[$1]}/?tls-psk-file=$WORK/psk/keys.psk"; }
cpu_ticks() { # NAME...: user+system clock ticks of these servers so far
    local total=0 name f
    for name; do
        read -r -a f <"/proc/${PID[$name]}/stat"
        total=$((total + f[13] + f[14]))
    done
    echo $total
}
mem_used() { "$UZRAM" attr "$1" mm_stat | awk '{print $3}'; } # mem_used_total

start one $((DATA_MIB))M
start a $((DATA_MIB / 2 + 16))M
start b $((DATA_MIB / 2 + 16))M
start ma $((DATA_MIB))M
start mb $((DATA_MIB))M
HZ=$(getconf CLK_TCK)

# run LAYOUT: one round of one layout; appends a JSON line to results.
run() {
    local layout=$1 servers mode uris=() s before after
    case $layout in
    single) servers=(one) mode=stripe ;;
    stripe) servers=(a b) mode=stripe ;;
    mirror) servers=(ma mb) mode=mirror ;;
    esac
    for s in "${servers[@]}"; do uris+=("$(uri "$s")"); done
    before=$(cpu_ticks "${servers[@]}")
    line=$($PY "$HERE/stripe.py" "$mode" "$WORK/data" "$CHUNK" "$DEPTH" "${uris[@]}") ||
        die "$layout: stripe.py failed"
    after=$(cpu_ticks "${servers[@]}")
    local mems=() 
    for s in "${servers[@]}"; do mems+=("$(mem_used "$s")"); done
    $PY -c 'import json,sys; d=json.loads(sys.argv[1]); d.update(layout=sys.argv[2], cpu_s=int(sys.argv[3])/int(sys.argv[4]), mem=[int(x) for x in sys.argv[5:]]); print(json.dumps(d))' \
        "$line" "$layout" $((after - before)) "$HZ" "${mems[@]}" >>"$WORK/results"
}
for round in $(seq "$ROUNDS"); do
    for layout in single stripe mirror; do
        run $layout
        echo "round $round $layout: $(tail -n 1 "$WORK/results")" >&2
    done
done

# What a dead server does. The mirror through qemu's quorum driver (vote-threshold=1: one
# good copy is enough, reads from the first child that answers): one qemu-io writes 16 MiB
# (half the disk when DATA_MIB is under 32: a mirror's disk is DATA_MIB), sleeps while the
# FIRST server (ma) is stopped, then reads the pattern back and writes on.
PATTERN_MIB=$((DATA_MIB < 32 ? DATA_MIB / 2 : 16))
# The stripe: stripe.py once server b is gone.
mkdir -p "$WORK/qemu-psk"
cp "$WORK/psk/keys.psk" "$WORK/qemu-psk/keys.psk"
quorum="driver=quorum,vote-threshold=1,read-pattern=fifo"
for i in 0 1; do
    s=$([[ $i == 0 ]] && echo ma || echo mb)
    quorum+=",children.$i.driver=nbd,children.$i.server.type=inet,children.$i.server.host=127.0.0.1"
    quorum+=",children.$i.server.port=${PORT[$s]},children.$i.tls-creds=tls0"
done
(sleep 2 && kill "${PID[ma]}") &
killer=$!
if qemu-io --object "tls-creds-psk,id=tls0,endpoint=client,dir=$WORK/qemu-psk,username=bench" \
    --image-opts "$quorum" -c "write -P 0x5a 0 ${PATTERN_MIB}M" -c "sleep 4000" -c "read -P 0x5a 0 ${PATTERN_MIB}M" \
    -c "write -P 0x33 0 1M" -c "read -P 0x33 0 1M" >"$WORK/q" 2>&1 && ! kill -0 "${PID[ma]}" 2>/dev/null
then
    mirror_dead="the client goes on with the other copy: a qemu-io that wrote a $PATTERN_MIB MiB pattern before the first server was stopped read it back intact from the second, and wrote and read 1 MiB more (one copy left: the next death loses the data)"
else
    mirror_dead="FAILED: $(tail -n 3 "$WORK/q" | tr '\n' ' ')"
fi
wait "$killer" || true
wait "${PID[ma]}" 2>/dev/null || true
unset 'PID[ma]'
kill "${PID[b]}"
wait "${PID[b]}" 2>/dev/null || true
unset 'PID[b]'
if $PY "$HERE/stripe.py" stripe "$WORK/data" "$CHUNK" "$DEPTH" "$(uri a)" "nbds://bench@127.0.0.1:${PORT[b]}/?tls-psk-file=$WORK/psk/keys.psk" >"$WORK/s2" 2>&1
then stripe_dead="UNEXPECTED: the stripe still worked"
else stripe_dead="the disk is gone: the client cannot even connect ($(grep -o 'Connection refused' "$WORK/s2" | head -n 1 || true)); half of every stripe lived there"; fi

GIT=$(git -C "$HERE" rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n $(git -C "$HERE" status --porcelain --untracked-files=no 2>/dev/null) ]] && GIT="$GIT + uncommitted changes"
$PY - "$WORK/results" "$COMMAND" "$DATA_MIB" "$CHUNK" "$DEPTH" "$ROUNDS" "$mirror_dead" "$stripe_dead" "$(nproc)" \
    "$GIT" "$WHEN" "$LOAD" >"$WORK/report.md" <<'EOF'
import json, statistics, sys
path, command, data_mib, chunk, depth, rounds, mirror_dead, stripe_dead, cpus, git, when, load = sys.argv[1:]
rows = [json.loads(l) for l in open(path)]
def med(layout, key):
    return statistics.median(r[key] for r in rows if r["layout"] == layout)
mib = int(data_mib)
print("Command: `%s`, uzram git %s, %s, load average %s at the start (%s rounds, the three layouts interleaved in each; medians). %s MiB of "
      "the machine's own libraries and programs (compressible) written and read back through "
      "`bench/stripe.py` (libnbd, %d KiB requests, %s in flight over all servers, data checked), "
      "every server `uzram serve --tls require --tls-psk` on 127.0.0.1 TCP, all on this %s-core "
      "machine, client included." % (command, git, when, load, rounds, data_mib, int(chunk) // 1024, depth, cpus))
print()
print("| layout | servers | write MiB/s | read MiB/s | server CPU s (all servers, write+read) | memory per server after the write (mem_used_total) |")
print("| --- | --- | --- | --- | --- | --- |")
names = {"single": "one server", "stripe": "stripe (raid0)", "mirror": "mirror (raid1)"}
for layout in ("single", "stripe", "mirror"):
    r = [x for x in rows if x["layout"] == layout][-1]
    mem = ", ".join("%.1f MiB" % (m / 1048576) for m in r["mem"])
    print("| %s | %d | %.0f | %.0f | %.2f | %s |" % (names[layout], r["servers"], mib / med(layout, "write_s"),
          mib / med(layout, "read_s"), med(layout, "cpu_s"), mem))
print()
print("When a server dies (stopped with SIGTERM after the runs; its data is gone with it):")
print()
print("- mirror, read through qemu's quorum driver (`vote-threshold=1`): %s;" % mirror_dead)
print("- stripe: %s." % stripe_dead)
EOF
cat "$WORK/report.md"
if [[ -n $DOC ]]; then
    $PY - "$DOC" "$WORK/report.md" <<'EOF'
import sys
doc, part = sys.argv[1], open(sys.argv[2]).read()
begin = "<!-- BEGIN SCALE-OUT RESULTS (bench/scale-out.sh --doc; do not edit by hand) -->"
end = "<!-- END SCALE-OUT RESULTS -->"
text = open(doc).read()
block = begin + "\n" + part + end
if begin in text:
    head, rest = text.split(begin, 1)
    text = head + block + rest.split(end, 1)[1]
else:
    text = text.rstrip("\n") + "\n\n## Scale-out: two servers, striped and mirrored\n\n" + block + "\n"
open(doc, "w").write(text)
EOF
    echo "($DOC updated)"
fi
