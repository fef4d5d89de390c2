#!/usr/bin/env bash
# tls-memory.sh - what an idle connection costs the server in memory, with and without TLS: the
# figure docs/SECURITY.md gives ("Costs and bounds"). One `uzram serve` on 127.0.0.1 TCP per
# kind (plain; --tls require with an ECDSA P-256 X.509 certificate; --tls require with PSK);
# N clients (python3 + libnbd, one connection each) connect, write one 4 KiB page each and stay
# connected; the server's VmRSS before the first and with all N connected gives the cost per
# connection. ROUNDS rounds, each kind once per round in turn; medians.
#
# Usage: bench/tls-memory.sh [--doc docs/SECURITY.md] [UZRAM]
#   --doc FILE  replace the text between the TLS MEMORY markers of FILE with the result
# Environment: CONNECTIONS (default 100), ROUNDS (default 3).
# Memory is counted, not timed: the machine's load does not change it.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/doc.bash
doc_parse "$@"
set -- "${ARGS[@]}"
UZRAM=$(realpath "${1:-build/uzram}")
CONNECTIONS=${CONNECTIONS:-100}
ROUNDS=${ROUNDS:-3}
PY=/usr/bin/python3
for tool in certtool psktool; do
    command -v $tool >/dev/null || { echo "tls-memory.sh: $tool is missing (gnutls-bin)" >&2; exit 1; }
done
$PY -c 'import nbd' 2>/dev/null || { echo "tls-memory.sh: $PY has no nbd module (python3-libnbd)" >&2; exit 1; }
[[ -x $UZRAM ]] || { echo "tls-memory.sh: no uzram at $UZRAM" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/uzram-tls-memory.XXXXXX")
server=
cleanup() {
    [[ -n $server ]] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
export XDG_RUNTIME_DIR=$WORK/run
mkdir -m 700 "$XDG_RUNTIME_DIR"

# Credentials: a CA and a server certificate (ECDSA P-256, as certtool makes by default with
# --key-type=ecdsa), and a PSK file.
C=$WORK/creds
mkdir -p "$C/server"
printf 'cn = tls-memory CA\nca\ncert_signing_key\nexpiration_days = 2\n' >"$C/ca.info"
printf 'cn = localhost\ndns_name = localhost\nip_address = 127.0.0.1\ntls_www_server\nencryption_key\nsigning_key\nexpiration_days = 2\n' >"$C/server.info"
certtool --generate-privkey --key-type=ecdsa --outfile "$C/ca-key.pem" 2>/dev/null
certtool --generate-self-signed --load-privkey "$C/ca-key.pem" --template "$C/ca.info" --outfile "$C/server/ca-cert.pem" >/dev/null 2>&1
certtool --generate-privkey --key-type=ecdsa --outfile "$C/server/server-key.pem" 2>/dev/null
certtool --generate-certificate --load-ca-certificate "$C/server/ca-cert.pem" --load-ca-privkey "$C/ca-key.pem" \
    --load-privkey "$C/server/server-key.pem" --template "$C/server.info" --outfile "$C/server/server-cert.pem" >/dev/null 2>&1
psktool -u bench -p "$C/keys.psk" >/dev/null 2>&1

# measure KIND: one server, N connections; prints "BEFORE_KIB WITH_KIB".
measure() {
    local kind=$1 options=() uri
    case $kind in
    plain) options=() ;;
    x509) options=(--tls require --tls-certificates "$C/server") ;;
    psk) options=(--tls require --tls-psk "$C/keys.psk") ;;
    esac
    "$UZRAM" serve -q -n mem -s 64M --threads 2 --tcp 127.0.0.1:0 "${options[@]}" >"$WORK/server.out" 2>"$WORK/server.err" &
    server=$!
    for _ in $(seq 100); do "$UZRAM" status -n -o tcp mem >"$WORK/tcp" 2>/dev/null && break; sleep 0.1; done
    case $kind in
    plain) uri="nbd://$(cat "$WORK/tcp")/" ;;
    x509) uri="nbds://$(cat "$WORK/tcp")/?tls-certificates=$C/server" ;;
    psk) uri="nbds://bench@$(cat "$WORK/tcp")/?tls-psk-file=$C/keys.psk" ;;
    esac
    $PY - "$uri" "$CONNECTIONS" "$server" <<'EOF'
import nbd, sys, time
uri, count, pid = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def rss():
    for line in open("/proc/%s/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
time.sleep(0.5)
before = rss()
handles = []
for i in range(count):
    h = nbd.NBD()
    h.set_uri_allow_local_file(True)  # the URI names the key or certificate files
    h.connect_uri(uri)
    h.pwrite(b"\xa5" * 4096, i * 4096)
    handles.append(h)
time.sleep(1)
print(before, rss())
for h in handles:
    h.shutdown()
EOF
    kill "$server"
    wait "$server" || true
    server=
}

: >"$WORK/results"
for round in $(seq "$ROUNDS"); do
    for kind in plain x509 psk; do
        # Not `< <(measure)`: read would return before measure has stopped its server,
        # and the next server would meet it.
        measure "$kind" >"$WORK/measured"
        read -r before with <"$WORK/measured"
        echo "$kind $before $with" >>"$WORK/results"
        echo "round $round $kind: VmRSS $before kB idle, $with kB with $CONNECTIONS connections" >&2
    done
done

GIT=$(bench_git)
# The server's connection cap, from the source (one place for the number).
CAP=$(sed -n 's/^#define NBD_SERVER_MAX_CONNECTIONS \([0-9]*\)u$/\1/p' src/nbd/limits.h)
$PY - "$WORK/results" "$CONNECTIONS" "$ROUNDS" "$GIT" "$(cut -d' ' -f1-3 /proc/loadavg)" "$CAP" >"$WORK/text" <<'EOF'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
count, rounds, git, load, cap = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], int(sys.argv[6])
per = {}
for kind, before, with_ in rows:
    per.setdefault(kind, []).append((int(with_) - int(before)) / count)
m = {k: statistics.median(v) for k, v in per.items()}
print("Measured by `bench/tls-memory.sh` (uzram git %s, %d rounds, medians): %d idle connections, "
      "each after one 4 KiB write, raise the server's RSS by %.0f KiB each with TLS and X.509 "
      "(ECDSA P-256), %.0f KiB each with TLS and PSK, against %.0f KiB each for plain ones; "
      "within the %d-connection cap that is at most about %.0f MiB."
      % (git, rounds, count, m["x509"], m["psk"], m["plain"], cap, max(m["x509"], m["psk"]) * cap / 1024))
EOF
cat "$WORK/text"
if [[ -n $DOC ]]; then
    doc_block "$DOC" "<!-- BEGIN TLS MEMORY (bench/tls-memory.sh --doc) -->" "<!-- END TLS MEMORY -->" \
        "$WORK/text" wrap
    echo "($DOC updated)" >&2
fi
