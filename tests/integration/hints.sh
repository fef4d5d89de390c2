#!/usr/bin/env bash
# hints.sh - integration test: every command uzram prints works when pasted (issue 28). The
# banner's connect line is run by a shell as printed, for a plain Unix socket (in a runtime
# directory whose path has a space and a quote), several devices (--list), TLS with PSK over
# Unix and TCP (libnbd needs USER@ and tls-psk-file), X.509 over Unix and TCP, and TLS offered
# but not required. The examples of `uzram --help`, `serve --help` and `hot-add --help` are
# run as printed (with this build's path for `uzram`). Hints in errors are run as printed,
# with their placeholders (SIZE, NAME) filled in: "no device NAME is running; start one with
# ...", "make one with psktool ...", "uzram detach NAME first", "unmount it first: umount ..."
# (root, FUSE, loop devices). The commands `make run` prints are run by runtime.sh.
# Skips and fails as tests/integration/lib.bash says (exit 0/1/77).
set -euo pipefail

. "$(dirname "$0")/lib.bash"
need_tools nbdinfo nbdcopy psktool certtool qemu-img qemu-io
lib_init

# The runtime directory has a space and a quote in its path: the printed line must quote it.
export XDG_RUNTIME_DIR="$WORK/it's run"
mkdir -m 700 "$XDG_RUNTIME_DIR"
mkdir "$WORK/bin"
ln -s "$UZRAM" "$WORK/bin/uzram" # the help texts say `uzram`
export PATH="$WORK/bin:$PATH"

# connect_line NAME: the command the banner of server NAME prints after "connect: ".
connect_line() {
    for _ in $(seq 50); do grep -q "the data lives only" "$WORK/server-$1.out" && break; sleep 0.1; done
    sed -n 's/^  connect: \(.*\)   stats: uzram status$/\1/p' "$WORK/server-$1.out"
}
# pasted NAME WANT: run the connect line of NAME in a shell, as pasted; its output has WANT.
pasted() {
    local line
    line=$(connect_line "$1")
    [[ -n $line ]] || fail "server $1 printed no connect line: $(cat "$WORK/server-$1.out")"
    bash -c "$line" >"$WORK/pasted.out" 2>&1 || fail "server $1's line failed: $line: $(cat "$WORK/pasted.out")"
    grep -q -- "$2" "$WORK/pasted.out" || fail "server $1's line: $line: no '$2' in $(cat "$WORK/pasted.out")"
    echo "$line"
}

# start_tcp NAME OPTIONS...: a server with --no-unix (start_server waits for its Unix socket).
start_tcp() {
    local name=$1
    shift
    "$UZRAM" serve -n "$name" --no-unix --tcp 127.0.0.1:0 "$@" >"$WORK/server-$name.out" 2>"$WORK/server-$name.err" &
    SERVER_PID[$name]=$!
    for _ in $(seq 100); do [[ -S $(ctl_of "$name") ]] && return 0; sleep 0.1; done
    fail "server $name did not start: $(cat "$WORK/server-$name.err")"
}

# --- the banner's connect line ---
start_server plain -s 16M
line=$(pasted plain 'export-size: 16777216')
pass "plain Unix socket in a directory with a space and a quote: $line"
start_server pool --device db:16M --device tmp:8M
line=$(pasted pool 'export="tmp"')
pass "several devices: $line"

C=$WORK/creds
mkdir -p "$C/x509"
psktool -u alice -p "$C/keys.psk" >/dev/null 2>&1
start_server psk -s 16M --tls-psk "$C/keys.psk"
line=$(pasted psk 'export-size: 16777216')
[[ $line == *"nbds+unix://alice@/?socket="*"&tls-psk-file=$C/keys.psk"* ]] || fail "PSK line: $line"
pass "TLS PSK over Unix: $line"
start_tcp psktcp -s 16M --tls-psk "$C/keys.psk"
line=$(pasted psktcp 'export-size: 16777216')
pass "TLS PSK over TCP: $line"
start_server offered -s 16M --tls on --tls-psk "$C/keys.psk"
line=$(pasted offered 'export-size: 16777216')
pass "TLS offered, not required: $line"

printf 'cn = hints CA\nca\ncert_signing_key\nexpiration_days = 2\n' >"$C/ca.info"
certtool --generate-privkey --key-type=ecdsa --outfile "$C/ca-key.pem" 2>/dev/null
certtool --generate-self-signed --load-privkey "$C/ca-key.pem" --template "$C/ca.info" \
    --outfile "$C/x509/ca-cert.pem" >/dev/null 2>&1
printf 'cn = localhost\ndns_name = localhost\nip_address = 127.0.0.1\ntls_www_server\nencryption_key\nsigning_key\nexpiration_days = 2\n' >"$C/server.info"
certtool --generate-privkey --key-type=ecdsa --outfile "$C/x509/server-key.pem" 2>/dev/null
certtool --generate-certificate --load-ca-certificate "$C/x509/ca-cert.pem" --load-ca-privkey "$C/ca-key.pem" \
    --load-privkey "$C/x509/server-key.pem" --template "$C/server.info" --outfile "$C/x509/server-cert.pem" >/dev/null 2>&1
start_server x509 -s 16M --tls-certificates "$C/x509"
line=$(pasted x509 'export-size: 16777216')
pass "TLS X.509 over Unix: $line"
start_tcp x509tcp -s 16M --tls-certificates "$C/x509"
line=$(pasted x509tcp 'export-size: 16777216')
pass "TLS X.509 over TCP: $line"
for name in plain pool psk offered x509; do stop_server $name; done
for name in psktcp x509tcp; do kill "${SERVER_PID[$name]}" && wait "${SERVER_PID[$name]}" && unset "SERVER_PID[$name]"; done

# --- the examples of the help texts, as printed ---
# example COMMAND...: the indented lines after "Example(s):" in COMMAND --help, as a script in
# which each server started with & is recorded (and stopped at exit) and given a second.
example() {
    "$@" --help | sed -n '/Examples\?:$/,$p' | sed -n 's/^  \(.*\)$/\1/p' |
        sed 's/&$/\& echo $! >>example.pids; sleep 1/' >"$WORK/example.sh"
}
touch "$WORK/example.pids"
at_exit 'kill $(cat "$WORK/example.pids")'
run_example() { (cd "$WORK" && bash -e "$WORK/example.sh") >"$WORK/example.out" 2>&1; }
# Stops the examples' servers and waits (up to 10 s) until they are gone: the next example's
# server takes the same default name, and one started while the last still stopped was
# refused ("in use by another server") on a loaded machine.
stop_examples() {
    local pid pids
    pids=$(cat "$WORK/example.pids")
    [[ -z $pids ]] || kill $pids
    for _ in $(seq 100); do
        for pid in $pids; do kill -0 "$pid" 2>/dev/null && break; pid=; done
        [[ -z ${pid:-} ]] && break
        sleep 0.1
    done
    : >"$WORK/example.pids"
}
example uzram
grep -q 'nbdinfo "$(uzram status -n -o uri uzram0)"' "$WORK/example.sh" || fail "uzram --help example: $(cat "$WORK/example.sh")"
run_example || fail "uzram --help example: $(cat "$WORK/example.out")"
grep -q 'export-size: 2147483648' "$WORK/example.out" || fail "uzram --help example: $(cat "$WORK/example.out")"
grep -q '^uzram0 ' "$WORK/example.out" || fail "uzram --help example's status: $(cat "$WORK/example.out")"
stop_examples
example uzram serve
[[ $(wc -l <"$WORK/example.sh") -eq 4 ]] || fail "serve --help examples: $(cat "$WORK/example.sh")"
head -c 1M /dev/urandom >"$WORK/disk.img"
run_example || fail "serve --help examples: $(cat "$WORK/example.sh" "$WORK/example.out")"
grep -q 'export="tmp"' "$WORK/example.out" || fail "serve --help's nbdinfo of tmp: $(cat "$WORK/example.out")"
[[ $(mm_stat_field uzram0 0) -eq $MiB ]] || fail "serve --help's nbdcopy did not store 1 MiB"
example uzram hot-add
run_example || fail "hot-add --help example: $(cat "$WORK/example.out")"
grep -q '\[zstd\]' <<<"$("$UZRAM" attr scratch comp_algorithm)" || fail "hot-add example: scratch is not zstd"
stop_examples
pass "the examples of uzram --help, serve --help and hot-add --help run as printed"

# --- hints in errors, run with their placeholders filled ---
"$UZRAM" attr lost disksize 2>"$WORK/err" && fail "attr of a device nobody serves"
hint=$(sed -n 's/.*start one with: \(uzram serve --name lost\), or add it to a server with: \(uzram hot-add lost SIZE\)$/\1/p' "$WORK/err")
[[ -n $hint ]] || fail "no hint in: $(cat "$WORK/err")"
$hint -s 16M >"$WORK/server-lost.out" 2>&1 &
SERVER_PID[lost]=$!
for _ in $(seq 100); do [[ -S $(ctl_of lost) ]] && break; sleep 0.1; done
[[ $("$UZRAM" attr lost disksize) -eq $((16 * MiB)) ]] || fail "'$hint' did not make the device"
"$UZRAM" attr found disksize 2>"$WORK/err" && fail "attr of another device nobody serves"
hint=$(sed -n 's/.*or add it to a server with: \(uzram hot-add found\) SIZE$/\1 16M/p' "$WORK/err")
$hint >/dev/null || fail "'$hint' failed"
[[ $("$UZRAM" attr found disksize) -eq $((16 * MiB)) ]] || fail "'$hint' did not add the device"
stop_server lost
: >"$WORK/empty.psk"
"$UZRAM" serve -n nokeys --tls-psk "$WORK/empty.psk" 2>"$WORK/err" && fail "an empty PSK file was taken"
hint=$(sed -n 's/.*make one with \(psktool -u NAME -p .*\)$/\1/p' "$WORK/err")
[[ -n $hint ]] || fail "no psktool hint: $(cat "$WORK/err")"
${hint/NAME/bob} >/dev/null 2>&1 || fail "'$hint' failed"
start_server nokeys -s 16M --tls-psk "$WORK/empty.psk"
stop_server nokeys
pass "error hints: uzram serve --name, uzram hot-add NAME SIZE, psktool -u NAME -p FILE"

# hot-add with no server running: its hint starts one.
mkdir -m 700 "$WORK/empty-run"
XDG_RUNTIME_DIR=$WORK/empty-run "$UZRAM" hot-add extra 16M 2>"$WORK/err" && fail "hot-add with no server"
hint=$(sed -n 's/.*start one with: \(uzram serve --device NAME:SIZE\)$/\1/p' "$WORK/err")
[[ -n $hint ]] || fail "no hint from hot-add without a server: $(cat "$WORK/err")"
hint=${hint/NAME:SIZE/extra:16M}
XDG_RUNTIME_DIR=$WORK/empty-run $hint -n hinted >"$WORK/server-hinted.out" 2>&1 &
SERVER_PID[hinted]=$!
for _ in $(seq 100); do [[ -S $WORK/empty-run/uzram/hinted.ctl ]] && break; sleep 0.1; done
[[ $(XDG_RUNTIME_DIR=$WORK/empty-run "$UZRAM" attr extra disksize) -eq $((16 * MiB)) ]] ||
    fail "'$hint' did not serve device extra: $(cat "$WORK/server-hinted.out")"
kill "${SERVER_PID[hinted]}" && wait "${SERVER_PID[hinted]}" && unset "SERVER_PID[hinted]"
# A backing file that others may read, then one that holds data: each refusal's command, run
# as printed, clears the way.
echo "old contents" >"$WORK/store"
chmod 644 "$WORK/store"
"$UZRAM" serve -n store -s 16M --backing-file "$WORK/store" 2>"$WORK/err" && fail "a 0644 backing file was taken"
hint=$(sed -n 's/.*: \(chmod 600 [^,]*\), or give another path$/\1/p' "$WORK/err")
[[ -n $hint ]] || fail "no chmod hint: $(cat "$WORK/err")"
$hint || fail "'$hint' failed"
"$UZRAM" serve -n store -s 16M --backing-file "$WORK/store" 2>"$WORK/err" && fail "a backing file with data was taken"
hint=$(sed -n 's/.*, or add \(--overwrite-backing-file\) (.*/\1/p' "$WORK/err")
[[ -n $hint ]] || fail "no --overwrite-backing-file hint: $(cat "$WORK/err")"
start_server store -s 16M --backing-file "$WORK/store" "$hint"
stop_server store
pass "hints: uzram serve --device NAME:SIZE (hot-add without a server), chmod 600 FILE and --overwrite-backing-file (backing file)"

# The man page's first examples (serve, then inspect, copy, compare, statistics), as printed.
/usr/bin/python3 - "$(dirname "$0")/../../docs/uzram.1" >"$WORK/example.sh" <<'PY'
import re, sys
text = open(sys.argv[1]).read().split("\n.SH EXAMPLES\n", 1)[1].split("\n.SH ", 1)[0]
blocks = re.findall(r"\.nf\n\.RS\n(.*?)\n\.RE\n\.fi", text, re.S)
for line in "\n".join(blocks[:2]).split("\n"):
    line = line.replace("\\-", "-").replace("\\\\", "\\")
    print(re.sub(r"&$", "& echo $! >>example.pids; sleep 1", line))
PY
grep -q '^uzram serve ' "$WORK/example.sh" || fail "no serve line in the man page's examples: $(cat "$WORK/example.sh")"
run_example || fail "the man page's examples: $(cat "$WORK/example.sh" "$WORK/example.out")"
grep -q 'export-size: 4294967296' "$WORK/example.out" || fail "man page example's nbdinfo: $(cat "$WORK/example.out")"
grep -q '^Images are identical' "$WORK/example.out" || fail "man page example's qemu-img compare: $(cat "$WORK/example.out")"
grep -q '^uzram0 ' "$WORK/example.out" || fail "man page example's status: $(cat "$WORK/example.out")"
kill $(cat "$WORK/example.pids") && : >"$WORK/example.pids"
pass "the man page's first examples run as printed"

if [[ $(id -u) -ne 0 || ! -c /dev/fuse || ! -e /dev/loop-control ]]; then
    skip_check "the attach hints (detach first, umount): need root, /dev/fuse and loop devices"
else
    start_server node -s 64M
    dev=$("$UZRAM" attach --via loop node) || fail "attach node"
    at_exit "umount '$WORK/mnt'; '$UZRAM' detach node"
    "$UZRAM" attach --via loop node 2>"$WORK/err" && fail "a second attach"
    hint=$(sed -n 's/.*; \(uzram detach node\) first$/\1/p' "$WORK/err")
    [[ -n $hint ]] || fail "no detach hint: $(cat "$WORK/err")"
    mkfs.ext4 -q "$dev" && mkdir "$WORK/mnt" && mount "$dev" "$WORK/mnt"
    $hint 2>"$WORK/err" && fail "detach of a mounted node"
    hint=$(sed -n 's/.*unmount it first: \(umount .*\)$/\1/p' "$WORK/err")
    [[ -n $hint ]] || fail "no umount hint: $(cat "$WORK/err")"
    $hint || fail "'$hint' failed"
    "$UZRAM" detach node || fail "detach after '$hint'"
    stop_server node
    pass "attach hints: uzram detach NAME, then umount DIR, run as printed"
fi

echo "PASS: hints.sh"
