#!/usr/bin/env bash
# tls.sh - integration test: TLS (NBD_OPT_STARTTLS) with real clients. nbdinfo and nbdcopy
# over nbds:// (TCP on 127.0.0.1) and nbds+unix:// with X.509 certificates made here by
# certtool and with pre-shared keys made by psktool; --tls require refuses plain clients,
# --tls on serves both; a certificate from another CA, a wrong PSK key, an unknown user and
# (with --tls-verify-peer) a missing or foreign client certificate are refused; bytes round
# trip identical; credentials that cannot be loaded stop the server naming the file; the
# config file's keys; a client stalling in the TLS handshake is dropped at the deadline; TLS 1.0
# and 1.1 refused and ECDHE-PSK/DHE-PSK given to TLS 1.2 PSK clients (gnutls-cli, through
# starttls_relay.py).
set -euo pipefail
source "$(dirname "$0")/lib.bash"

need_tools nbdinfo nbdcopy certtool psktool cmp
need_python_nbd
lib_init

# ---- credentials ----
C=$WORK/creds
mkdir -p "$C"
# make_ca NAME: a CA key and self-signed certificate in $C/NAME-ca-{key,cert}.pem.
make_ca() {
    printf 'cn = uzram test CA %s\nca\ncert_signing_key\nexpiration_days = 2\n' "$1" >"$C/$1-ca.info"
    certtool --generate-privkey --key-type=ecdsa --outfile "$C/$1-ca-key.pem" 2>/dev/null
    certtool --generate-self-signed --load-privkey "$C/$1-ca-key.pem" --template "$C/$1-ca.info" \
        --outfile "$C/$1-ca-cert.pem" >/dev/null 2>&1
}
# make_cert CA ROLE OUTDIR: a key and certificate signed by CA for ROLE (server or client),
# as OUTDIR/ROLE-{key,cert}.pem.
make_cert() {
    local ca=$1 role=$2 out=$3
    mkdir -p "$out"
    if [[ $role == server ]]; then
        printf 'cn = localhost\ndns_name = localhost\nip_address = 127.0.0.1\ntls_www_server\nencryption_key\nsigning_key\nexpiration_days = 2\n' >"$C/$role.info"
    else
        printf 'cn = uzram test client\ntls_www_client\nencryption_key\nsigning_key\nexpiration_days = 2\n' >"$C/$role.info"
    fi
    certtool --generate-privkey --key-type=ecdsa --outfile "$out/$role-key.pem" 2>/dev/null
    certtool --generate-certificate --load-ca-certificate "$C/$ca-ca-cert.pem" \
        --load-ca-privkey "$C/$ca-ca-key.pem" --load-privkey "$out/$role-key.pem" \
        --template "$C/$role.info" --outfile "$out/$role-cert.pem" >/dev/null 2>&1
}
make_ca good
make_ca other
make_cert good server "$C/server"
cp "$C/good-ca-cert.pem" "$C/server/ca-cert.pem"
make_cert good client "$C/client"                 # trusts the good CA, has a good certificate
cp "$C/good-ca-cert.pem" "$C/client/ca-cert.pem"
mkdir -p "$C/anonymous"                             # trusts the good CA, has no certificate
cp "$C/good-ca-cert.pem" "$C/anonymous/ca-cert.pem"
make_cert other client "$C/foreign"                # trusts the good CA, certificate from another
cp "$C/good-ca-cert.pem" "$C/foreign/ca-cert.pem"
make_cert other client "$C/stranger"               # trusts only the other CA
cp "$C/other-ca-cert.pem" "$C/stranger/ca-cert.pem"
psktool -u alice -p "$C/keys.psk" >/dev/null 2>&1
psktool -u alice -p "$C/wrong.psk" >/dev/null 2>&1 # same user, another key
psktool -u mallory -p "$C/mallory.psk" >/dev/null 2>&1
[[ -s $C/server/server-cert.pem && -s $C/client/client-cert.pem && -s $C/keys.psk ]] ||
    fail "certtool/psktool made no credentials"

head -c $((8 * MiB)) /dev/urandom >"$WORK/data"

# banner NAME TEXT: the server's startup lines say TEXT (they may still be on their way
# when its sockets appear: waits at most 5 s).
banner() {
    for _ in $(seq 50); do
        grep -qF -- "$2" "$WORK/server-$1.out" && return 0
        sleep 0.1
    done
    fail "server $1: no '$2' in its banner: $(cat "$WORK/server-$1.out")"
}
# tcp_port NAME: the port a server with --tcp 127.0.0.1:0 bound, from its banner.
tcp_port() {
    banner "$1" "the data lives only in this process"
    sed -n 's/.*tcp:127\.0\.0\.1:\([0-9]*\).*/\1/p' "$WORK/server-$1.out" | head -n 1
}
# refused WHAT CMD...: CMD must fail (a client that must not get in).
refused() {
    local what=$1
    shift
    if "$@" >"$WORK/refused.log" 2>&1; then
        fail "$what: the client got in: $(cat "$WORK/refused.log")"
    fi
}
# round_trip NAME TO FROM: nbdcopy the data to URI TO, back from URI FROM, compare.
round_trip() {
    rm -f "$WORK/back"
    nbdcopy "$WORK/data" "$2" >"$WORK/copy.log" 2>&1 || fail "$1: nbdcopy to $2: $(cat "$WORK/copy.log")"
    nbdcopy "$3" "$WORK/back" >"$WORK/copy.log" 2>&1 || fail "$1: nbdcopy from $3: $(cat "$WORK/copy.log")"
    cmp -s -n $((8 * MiB)) "$WORK/data" "$WORK/back" || fail "$1: the bytes read back differ"
}

# ---- X.509, --tls require (the default with credentials) ----
start_server x509 -s 64M --tcp 127.0.0.1:0 --tls-certificates "$C/server"
banner x509 'TLS required (X.509)'
PORT=$(tcp_port x509)
[[ -n $PORT ]] || fail "no TCP port in the banner"
TCP="nbds://127.0.0.1:$PORT/?tls-certificates=$C/client"
UNIX="nbds+unix:///?socket=$(sock_of x509)&tls-certificates=$C/client"
nbdinfo "$TCP" >"$WORK/info" 2>&1 || fail "nbdinfo over nbds:// TCP: $(cat "$WORK/info")"
grep -q 'with TLS' "$WORK/info" || fail "nbdinfo did not report TLS: $(cat "$WORK/info")"
nbdinfo "$UNIX" >"$WORK/info" 2>&1 || fail "nbdinfo over nbds+unix://: $(cat "$WORK/info")"
grep -q 'with TLS' "$WORK/info" || fail "nbdinfo (unix) did not report TLS"
pass "X.509: nbdinfo over nbds:// (TCP) and nbds+unix://"
round_trip "X.509 TCP -> unix" "$TCP" "$UNIX"
round_trip "X.509 unix -> TCP" "$UNIX" "$TCP"
pass "X.509: 8 MiB nbdcopy round trips byte-identical, TCP and Unix"

refused "plain client under --tls require (TCP)" nbdinfo "nbd://127.0.0.1:$PORT/"
grep -q 'TLS is required' "$WORK/refused.log" ||
    grep -q 'TLS is required' "$WORK/server-x509.err" || fail "no TLS-required message"
refused "plain client under --tls require (unix)" nbdinfo "$(uri_of x509)"
# The protocol's answer, seen raw: NBD_REP_ERR_TLS_REQD to GO, ACK to ABORT.
$PY - "$(sock_of x509)" <<'EOF' || fail "raw GO without TLS was not answered NBD_REP_ERR_TLS_REQD"
import socket, struct, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(sys.argv[1])
def read(n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        assert c, "server closed"
        b += c
    return b
read(18)
s.sendall(struct.pack(">I", 3))
MAGIC = 0x49484156454F5054
s.sendall(struct.pack(">QII", MAGIC, 7, 6) + struct.pack(">IH", 0, 0))
_, opt, rtype, length = struct.unpack(">QIII", read(20))
read(length)
assert opt == 7 and rtype == 0x80000005, hex(rtype)
s.sendall(struct.pack(">QII", MAGIC, 2, 0))
_, opt, rtype, length = struct.unpack(">QIII", read(20))
assert opt == 2 and rtype == 1
EOF
refused "client trusting another CA" nbdinfo "nbds://127.0.0.1:$PORT/?tls-certificates=$C/stranger"
pass "X.509 require: plain clients get NBD_REP_ERR_TLS_REQD, a client of another CA is refused"
stop_server x509

# ---- X.509 with --tls-verify-peer ----
start_server verify -s 64M --tcp 127.0.0.1:0 --tls require --tls-certificates "$C/server" --tls-verify-peer
PORT=$(tcp_port verify)
nbdinfo "nbds://127.0.0.1:$PORT/?tls-certificates=$C/client" >"$WORK/info" 2>&1 ||
    fail "verify-peer: the client with a good certificate was refused: $(cat "$WORK/info")"
refused "verify-peer: client without a certificate" \
    nbdinfo "nbds://127.0.0.1:$PORT/?tls-certificates=$C/anonymous"
refused "verify-peer: client certificate from another CA" \
    nbdinfo "nbds://127.0.0.1:$PORT/?tls-certificates=$C/foreign"
grep -q 'TLS handshake failed' "$WORK/server-verify.err" ||
    fail "verify-peer: no log line about the refused handshakes"
pass "--tls-verify-peer: good client certificate served, none or a foreign one refused"
stop_server verify

# ---- PSK, --tls on ----
start_server psk -s 64M --tcp 127.0.0.1:0 --tls on --tls-psk "$C/keys.psk"
banner psk 'TLS offered, not required (PSK)'
PORT=$(tcp_port psk)
TCP="nbds://alice@127.0.0.1:$PORT/?tls-psk-file=$C/keys.psk"
UNIX="nbds+unix://alice@/?socket=$(sock_of psk)&tls-psk-file=$C/keys.psk"
nbdinfo "$TCP" >"$WORK/info" 2>&1 || fail "PSK nbdinfo: $(cat "$WORK/info")"
grep -q 'with TLS' "$WORK/info" || fail "PSK: nbdinfo did not report TLS"
round_trip "PSK TCP -> unix" "$TCP" "$UNIX"
# --tls on: a plain client is served too, and sees the same bytes.
nbdinfo "nbd://127.0.0.1:$PORT/" >"$WORK/info" 2>&1 || fail "--tls on refused a plain client"
grep -q 'without TLS' "$WORK/info" || fail "plain client under --tls on: $(cat "$WORK/info")"
round_trip "PSK TLS -> plain" "$TCP" "nbd://127.0.0.1:$PORT/"
pass "PSK: nbdinfo, nbdcopy over nbds:// and nbds+unix://; --tls on serves plain clients too"
refused "PSK: wrong key" nbdinfo "nbds://alice@127.0.0.1:$PORT/?tls-psk-file=$C/wrong.psk"
refused "PSK: unknown user" nbdinfo "nbds://mallory@127.0.0.1:$PORT/?tls-psk-file=$C/mallory.psk"
pass "PSK: a wrong key and an unknown user are refused"
stop_server psk

# ---- versions and key exchanges, with gnutls-cli's own priority strings (issue 23) ----
# gnutls-cli speaks TLS from the first byte; starttls_relay.py does the NBD handshake up to
# STARTTLS for it and then relays the TLS handshake, which is gnutls-cli's own. A handshake
# that completed prints "- Description: (TLS1.2-...)-(KX)-(CIPHER)" (gnutls-cli 3.7 may crash
# after printing it for PSK sessions: its exit status says nothing).
if command -v gnutls-cli >/dev/null && command -v stdbuf >/dev/null; then
    # tls_try NAME PRIORITY CLIENT-ARGS...: the Description line of a handshake through the
    # relay to server NAME, or "refused".
    tls_try() {
        local port=$1 priority=$2
        shift 2
        timeout 10 stdbuf -oL gnutls-cli --port "$port" 127.0.0.1 --priority "$priority" "$@" \
            </dev/null >"$WORK/cli.out" 2>&1 || true
        sed -n 's/^- Description: //p' "$WORK/cli.out" | grep . || echo refused
    }
    relay_for() { # NAME: start a relay to server NAME; its port in $port
        $PY "$(dirname "$0")/starttls_relay.py" "$(sock_of "$1")" >"$WORK/relay-$1.port" &
        at_exit "kill $!"
        for _ in $(seq 50); do [[ -s $WORK/relay-$1.port ]] && break; sleep 0.1; done
        port=$(head -n 1 "$WORK/relay-$1.port")
    }
    KEY=$(cut -d: -f2 "$C/keys.psk")
    PSK=(--pskusername alice --pskkey "$KEY")
    X509=(--x509cafile "$C/good-ca-cert.pem")
    start_server vers -s 16M --tls-psk "$C/keys.psk"
    relay_for vers
    for v in 1.0 1.1; do
        got=$(tls_try "$port" "NORMAL:-VERS-ALL:+VERS-TLS$v:-KX-ALL:+ECDHE-PSK:+DHE-PSK:+PSK" "${PSK[@]}")
        [[ $got == refused ]] || fail "PSK: a TLS $v client got in: $got"
    done
    got=$(tls_try "$port" "NORMAL:-VERS-ALL:+VERS-TLS1.2:+ECDHE-PSK:+DHE-PSK:+PSK" "${PSK[@]}")
    [[ $got == "(TLS1.2-X.509)-(ECDHE-"* ]] || fail "PSK: a TLS 1.2 client offering ECDHE-PSK got: $got"
    got=$(tls_try "$port" "NORMAL:-VERS-ALL:+VERS-TLS1.2:-KX-ALL:+PSK:+DHE-PSK:+ECDHE-PSK" "${PSK[@]}")
    [[ $got == "(TLS1.2-X.509)-(ECDHE-"* ]] || fail "PSK: plain PSK first in the client's order won: $got"
    got=$(tls_try "$port" "NORMAL:-VERS-ALL:+VERS-TLS1.2:-KX-ALL:+DHE-PSK" "${PSK[@]}")
    [[ $got == "(TLS1.2-X.509)-(DHE-"* ]] || fail "PSK: a TLS 1.2 DHE-PSK client got: $got"
    got=$(tls_try "$port" "NORMAL:-VERS-ALL:+VERS-TLS1.3:+ECDHE-PSK:+DHE-PSK:+PSK" "${PSK[@]}")
    [[ $got == "(TLS1.3-"* ]] || fail "PSK: a TLS 1.3 client got: $got"
    grep -q "A packet with illegal or unsupported version was received" "$WORK/server-vers.err" ||
        fail "the refused TLS 1.0/1.1 handshakes are not in the log: $(cat "$WORK/server-vers.err")"
    stop_server vers
    start_server versx -s 16M --tls-certificates "$C/server"
    relay_for versx
    for v in 1.0 1.1; do
        got=$(tls_try "$port" "NORMAL:-VERS-ALL:+VERS-TLS$v" "${X509[@]}")
        [[ $got == refused ]] || fail "X.509: a TLS $v client got in: $got"
    done
    got=$(tls_try "$port" "NORMAL:-VERS-ALL:+VERS-TLS1.2" "${X509[@]}")
    [[ $got == "(TLS1.2-X.509)-(ECDHE-"* ]] || fail "X.509: a TLS 1.2 client got: $got"
    stop_server versx
    pass "TLS 1.0 and 1.1 clients refused (PSK and X.509); TLS 1.2 PSK clients get ECDHE-PSK (even when they list plain PSK first) or DHE-PSK; 1.2 X.509 and 1.3 served"
else
    skip_check "TLS versions and PSK key exchanges: gnutls-cli (gnutls-bin) or stdbuf is missing"
fi

# ---- the config file's keys ----
cat >"$WORK/uzram.conf" <<EOF
[conf]
size = 16M
tls = require
tls-psk = $C/keys.psk
EOF
start_server conf --config "$WORK/uzram.conf"
banner conf 'TLS required (PSK)'
nbdinfo "nbds+unix://alice@/?socket=$(sock_of conf)&tls-psk-file=$C/keys.psk" >"$WORK/info" 2>&1 ||
    fail "config: PSK client: $(cat "$WORK/info")"
refused "config: plain client" nbdinfo "$(uri_of conf)"
stop_server conf
pass "config file keys tls and tls-psk"

# ---- start-up errors name the file or the option ----
# bad_start WHAT EXPECTED-TEXT SERVE-ARGS...: the server must exit 1 with EXPECTED-TEXT.
bad_start() {
    local what=$1 expected=$2 rc=0
    shift 2
    "$UZRAM" serve -n bad -s 1M "$@" >"$WORK/bad.out" 2>"$WORK/bad.err" </dev/null & 
    local pid=$!
    for _ in $(seq 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
    if kill -0 $pid 2>/dev/null; then
        kill -TERM $pid
        wait $pid || true
        fail "$what: the server started"
    fi
    wait $pid || rc=$?
    [[ $rc -eq 1 ]] || fail "$what: exit status $rc, wanted 1"
    grep -qF -- "$expected" "$WORK/bad.err" || fail "$what: no '$expected' in: $(cat "$WORK/bad.err")"
}
mkdir -p "$C/nokey"
cp "$C/server/server-cert.pem" "$C/nokey/"
bad_start "missing key" "$C/nokey/server-key.pem" --tls-certificates "$C/nokey"
mkdir -p "$C/badkey"
cp "$C/server/server-cert.pem" "$C/badkey/"
echo "not a key" >"$C/badkey/server-key.pem"
bad_start "bad key" "$C/badkey/server-cert.pem" --tls-certificates "$C/badkey"
bad_start "verify-peer without ca-cert.pem" "$C/badkey/ca-cert.pem" --tls-certificates "$C/badkey" --tls-verify-peer
printf 'alice:zz\n' >"$C/bad.psk"
bad_start "bad PSK file" "$C/bad.psk:1" --tls-psk "$C/bad.psk"
bad_start "missing PSK file" "$C/none.psk" --tls-psk "$C/none.psk"
bad_start "--tls require without credentials" "needs credentials" --tls require
bad_start "--tls off with credentials" "would go unused" --tls off --tls-psk "$C/keys.psk"
bad_start "bad --tls value" "use off, on or require" --tls maybe
bad_start "verify-peer with PSK" "needs --tls-certificates" --tls-psk "$C/keys.psk" --tls-verify-peer
pass "credentials that cannot be loaded and contradicting options stop the server, naming them"

# ---- deadlines: a TLS client that stalls only stalls itself ----
UZRAM_SERVE_TIMEOUT=2 start_server stall -s 64M --tls-certificates "$C/server"
S=$(sock_of stall)
STALL="$PY $(dirname "$0")/tls_stall.py"
took=$($STALL handshake "$S" "$C/server/ca-cert.pem") || fail "handshake stall client failed"
awk -v t="$took" 'BEGIN { exit !(t >= 1.5 && t <= 6) }' ||
    fail "half a ClientHello held the connection for $took s (deadline 2 s)"
grep -q 'handshake not finished within 2 s' "$WORK/server-stall.err" || fail "no handshake deadline line"
pass "half a ClientHello: dropped at the handshake deadline ($took s)"

$STALL record "$S" "$C/server/ca-cert.pem" >"$WORK/record.out" 2>&1 &
record_pid=$!
at_exit "kill -KILL $record_pid"
for _ in $(seq 50); do grep -q stalled "$WORK/record.out" && break; sleep 0.1; done
grep -q stalled "$WORK/record.out" || fail "record stall client: $(cat "$WORK/record.out")"
# Meanwhile a good client is served at once.
UNIX="nbds+unix:///?socket=$S&tls-certificates=$C/client"
timeout 10 nbdcopy "$WORK/data" "$UNIX" >"$WORK/copy.log" 2>&1 ||
    fail "a good client was not served while another stalled mid-record: $(cat "$WORK/copy.log")"
wait $record_pid || fail "record stall client: $(cat "$WORK/record.out")"
took=$(tail -n 1 "$WORK/record.out")
awk -v t="$took" 'BEGIN { exit !(t >= 1.5 && t <= 6) }' ||
    fail "half a TLS record held the connection for $took s (request deadline 2 s)"
grep -q 'request not complete within 2 s' "$WORK/server-stall.err" || fail "no request deadline line"
pass "half a TLS record: others served meanwhile, dropped at the request deadline ($took s)"

# An idle TLS client (no request started) is not dropped.
$PY - "$UNIX" <<'PYEOF' || fail "an idle TLS client was dropped"
import nbd, sys, time
h = nbd.NBD()
h.set_uri_allow_local_file(True)
h.connect_uri(sys.argv[1])
h.pwrite(b"x" * 4096, 0)
time.sleep(3.5)
assert h.pread(4096, 0) == b"x" * 4096
h.shutdown()
PYEOF
got=$($STALL noread "$S" "$C/server/ca-cert.pem" 5) || fail "noread client failed"
grep -q 'could not be sent within 2 s' "$WORK/server-stall.err" || fail "a TLS client not reading was not dropped ($got)"
pass "idle TLS client kept past the deadline; one not reading its replies dropped ($got)"
stop_server stall
