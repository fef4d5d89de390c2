#!/usr/bin/env bash
# tls.sh - what TLS costs: fio's nbd engine against one `uzram serve --tls on` (X.509), over
# plain TCP (nbd://) and TLS (nbds://) on 127.0.0.1, the two interleaved in every round, with
# the server's CPU time per request. fio's nbd engine is libnbd (nbd_connect_uri), which does
# TLS: it takes the CA from its default directory, $HOME/.pki/libnbd for a user other than
# root (root's is /etc/pki/libnbd, which a benchmark must not write), so fio runs as nobody
# with HOME in the work directory. Run it alone on the machine (it measures CPU per request).
#
# Usage: bench/tls.sh [--doc FILE] [UZRAM_BINARY]
# Environment: ROUNDS=3, RUNTIME=8 (seconds per fio run), REGION=256M, IODEPTH=16.
# With --doc FILE the results replace the TLS part of FILE (docs/BENCHMARKS.md).
set -euo pipefail

DOC=
if [[ ${1:-} == --doc ]]; then
    DOC=$2
    shift 2
fi
UZRAM=$(realpath "${1:-build/uzram}")
ROUNDS=${ROUNDS:-3}
RUNTIME=${RUNTIME:-8}
REGION=${REGION:-256M}
IODEPTH=${IODEPTH:-16}
PY=/usr/bin/python3
COMMAND="bench/tls.sh${DOC:+ --doc $DOC}"
[[ $ROUNDS != 3 || $RUNTIME != 8 || $REGION != 256M || $IODEPTH != 16 ]] &&
    COMMAND="ROUNDS=$ROUNDS RUNTIME=$RUNTIME REGION=$REGION IODEPTH=$IODEPTH $COMMAND"
LOAD=$(cut -d" " -f1-3 /proc/loadavg) # at the start, for the report

die() { echo "tls.sh: $*" >&2; exit 2; }
[[ -x $UZRAM ]] || die "no uzram binary at $UZRAM"
for tool in fio certtool setpriv; do command -v $tool >/dev/null || die "$tool is not installed"; done
fio --enghelp=nbd >/dev/null 2>&1 || die "this fio has no nbd engine"
[[ $(id -u) == 0 ]] || die "run as root (fio then runs as nobody, see above)"

WORK=$(mktemp -d)
chmod 755 "$WORK"
SERVER=
cleanup() {
    [[ -n $SERVER ]] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
export XDG_RUNTIME_DIR=$WORK/run
mkdir -m 700 "$XDG_RUNTIME_DIR"

# Credentials: a CA and a server certificate for localhost/127.0.0.1 (ECDSA P-256, what
# certtool makes with --key-type=ecdsa), the CA where libnbd looks for it.
C=$WORK/creds
mkdir -p "$C" "$WORK/home/.pki/libnbd" "$WORK/fio"
printf 'cn = bench CA\nca\ncert_signing_key\nexpiration_days = 2\n' >"$C/ca.info"
printf 'cn = localhost\ndns_name = localhost\nip_address = 127.0.0.1\ntls_www_server\nencryption_key\nsigning_key\nexpiration_days = 2\n' >"$C/server.info"
certtool --generate-privkey --key-type=ecdsa --outfile "$C/ca-key.pem" 2>/dev/null
certtool --generate-self-signed --load-privkey "$C/ca-key.pem" --template "$C/ca.info" --outfile "$C/ca-cert.pem" >/dev/null 2>&1
certtool --generate-privkey --key-type=ecdsa --outfile "$C/server-key.pem" 2>/dev/null
certtool --generate-certificate --load-ca-certificate "$C/ca-cert.pem" --load-ca-privkey "$C/ca-key.pem" \
    --load-privkey "$C/server-key.pem" --template "$C/server.info" --outfile "$C/server-cert.pem" >/dev/null 2>&1
cp "$C/ca-cert.pem" "$WORK/home/.pki/libnbd/ca-cert.pem"
chown -R nobody "$WORK/home" "$WORK/fio"

: >"$WORK/server.out" # before the server: its redirection may come after the first sed below
"$UZRAM" serve -n tlsbench -s 1G --no-unix --tcp 127.0.0.1:0 --tls on --tls-certificates "$C" \
    >"$WORK/server.out" 2>"$WORK/server.err" &
SERVER=$!
PORT=
for _ in $(seq 100); do
    PORT=$(sed -n 's/.*tcp:127\.0\.0\.1:\([0-9]*\).*/\1/p' "$WORK/server.out")
    [[ -n $PORT ]] && break
    sleep 0.1
done
[[ -n $PORT ]] || die "the server did not start: $(cat "$WORK/server.err")"
declare -A URI=([plain]="nbd://127.0.0.1:$PORT/" [tls]="nbds://127.0.0.1:$PORT/")

cpu_ticks() { local f; read -r -a f <"/proc/$SERVER/stat"; echo $((f[13] + f[14])); }
# run_fio MODE OUTPUT [fio options...], as nobody
run_fio() {
    local mode=$1 out=$2
    shift 2
    setpriv --reuid=nobody --regid=nogroup --clear-groups env HOME="$WORK/home" \
        fio --output-format=json --output="$out" --name=bench --ioengine=nbd --uri="${URI[$mode]}" \
        --bs=4k --size="$REGION" --buffer_compress_percentage=50 --refill_buffers \
        --group_reporting "$@" >"$WORK/fio.log" 2>&1 ||
        die "fio failed ($mode $*): $(cat "$WORK/fio.log")"
}

run_fio tls "$WORK/fio/fill.json" --rw=write --bs=1M --iodepth=4
grep -q 'TLS' "$WORK/server.out" || die "the server did not offer TLS"
for round in $(seq "$ROUNDS"); do
    # Alternate which mode goes first, so neither always runs on a warmer machine.
    order=(plain tls)
    ((round % 2 == 0)) && order=(tls plain)
    for workload in randwrite:4k randread:4k read:1M; do
        rw=${workload%%:*} bs=${workload##*:}
        for mode in "${order[@]}"; do
            name=$mode-$rw-$bs-r$round
            before=$(cpu_ticks)
            run_fio "$mode" "$WORK/fio/$name.json" --rw="$rw" --bs="$bs" --iodepth="$IODEPTH" \
                --time_based --runtime="$RUNTIME"
            echo $(($(cpu_ticks) - before)) >"$WORK/fio/$name.cpu"
        done
    done
    echo "round $round of $ROUNDS done" >&2
done
# A refused client shows the TLS really was required for the nbds:// runs' handshake: the
# plain runs went in clear and the TLS runs encrypted (libnbd fails nbds:// without TLS).
tls_clients=$(grep -c 'TLS handshake failed' "$WORK/server.err" || true)
[[ $tls_clients == 0 ]] || die "TLS handshakes failed during the runs: $(cat "$WORK/server.err")"

GIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]] && GIT="$GIT + uncommitted changes"
$PY - "$WORK/fio" "$ROUNDS" "$(getconf CLK_TCK)" "$COMMAND" "$RUNTIME" "$REGION" "$IODEPTH" "$(nproc)" \
    "$GIT" "$(date -u '+%Y-%m-%d %H:%M UTC')" "$LOAD" >"$WORK/report.md" <<'EOF'
import json, os, statistics, sys
d, rounds, hz, command, runtime, region, depth, cpus, git, when, load_average = sys.argv[1:]
rounds, hz = int(rounds), int(hz)
def load(mode, rw, bs):
    iops, cpu_us = [], []
    for r in range(1, rounds + 1):
        name = "%s-%s-%s-r%d" % (mode, rw, bs, r)
        j = json.load(open(os.path.join(d, name + ".json")))["jobs"][0]
        part = j["read" if "read" in rw else "write"]
        ios = part["total_ios"]
        iops.append(part["iops"])
        ticks = int(open(os.path.join(d, name + ".cpu")).read())
        cpu_us.append(ticks / hz * 1e6 / max(ios, 1))
    return statistics.median(iops), statistics.median(cpu_us)
print("Command: `%s`, uzram git %s, %s, load average %s at the start (%d rounds; in each, every workload runs "
      "plain then TLS or TLS then plain, alternating; medians). fio's nbd engine (libnbd) "
      "against one `uzram serve --tls on --tls-certificates` (ECDSA P-256 certificate) on "
      "127.0.0.1 TCP, iodepth %s, one connection, %s s per run over a %s region filled first, "
      "buffers 50%% compressible; client and server share the machine's %s cores. Server CPU "
      "per request = the server's user+system time during the run / requests done."
      % (command, git, when, load_average, rounds, depth, runtime, region, cpus))
print()
print("| workload | plain IOPS | TLS IOPS | TLS/plain | plain server CPU/request | TLS server CPU/request | TLS costs the server |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for rw, bs in (("randwrite", "4k"), ("randread", "4k"), ("read", "1M")):
    pi, pc = load("plain", rw, bs)
    ti, tc = load("tls", rw, bs)
    print("| %s %s | %.0f | %.0f | %.2f | %.1f us | %.1f us | %+.1f us (%+.0f%%) |"
          % (rw, bs, pi, ti, ti / pi, pc, tc, tc - pc, (tc / pc - 1) * 100))
EOF
cat "$WORK/report.md"
if [[ -n $DOC ]]; then
    $PY - "$DOC" "$WORK/report.md" <<'EOF'
import sys
doc, part = sys.argv[1], open(sys.argv[2]).read()
begin = "<!-- BEGIN TLS RESULTS (bench/tls.sh --doc; do not edit by hand) -->"
end = "<!-- END TLS RESULTS -->"
text = open(doc).read()
block = begin + "\n" + part + end
if begin in text:
    head, rest = text.split(begin, 1)
    text = head + block + rest.split(end, 1)[1]
else:
    text = text.rstrip("\n") + "\n\n## TLS against plain TCP\n\n" + block + "\n"
open(doc, "w").write(text)
EOF
    echo "($DOC updated)"
fi
