#!/usr/bin/env bash
# control.sh - integration test: the control socket and the command line around a real
# `uzram serve`: where the control socket lives (never in a directory other users can write),
# the answers to bad input, users without access to the runtime directory, signals (SIGHUP
# does not stop the server; SIGTERM says what it discards) and the banner's volatility notice.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

need_python_nbd
lib_init

FAILED=() # every part runs, so one run shows all that is wrong
bad() { echo "not ok - $*"; FAILED+=("$*"); }

# unprivileged CMD...: CMD as nobody when running as root, else as is. A copy of the binary in a
# directory everyone can search, so that nobody can run it wherever the build tree is.
if [[ $(id -u) -eq 0 ]]; then
    need_tools setpriv
    PUBLIC=$(mktemp -d "${TMPDIR:-/tmp}/uzram-public.XXXXXX")
    at_exit "rm -rf $PUBLIC"
    chmod 755 "$PUBLIC"
    cp "$UZRAM" "$PUBLIC/uzram"
fi
unprivileged() {
    if [[ $(id -u) -eq 0 ]]; then
        local args=("${@/#$UZRAM/$PUBLIC/uzram}")
        setpriv --reuid=65534 --regid=65534 --clear-groups "${args[@]}"
    else
        "$@"
    fi
}
# as_other CMD...: CMD as a user who cannot read $XDG_RUNTIME_DIR: nobody when running as root
# (root reads everything), else this user with the directory's permissions taken away.
as_other() {
    if [[ $(id -u) -eq 0 ]]; then
        unprivileged "$@"
    else
        chmod 000 "$XDG_RUNTIME_DIR"
        local rc=0
        "$@" || rc=$?
        chmod 700 "$XDG_RUNTIME_DIR"
        return $rc
    fi
}

# --- the control socket stays out of a shared --unix directory (issue 11 item 5) ---
# Another user binds NAME.ctl in a world-writable directory first; the server must not care.
mkdir -m 1777 "$WORK/shared"
"$PY" - "$WORK/shared/squat.ctl" <<'EOF' &
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
s.listen(1)
time.sleep(60)
EOF
squatter=$!
at_exit "kill $squatter"
for _ in $(seq 50); do [[ -S $WORK/shared/squat.ctl ]] && break; sleep 0.1; done
"$UZRAM" serve -n squat -s 16M --unix "$WORK/shared/squat.sock" >"$WORK/server-squat.out" \
    2>"$WORK/server-squat.err" &
SERVER_PID[squat]=$!
started=false
for _ in $(seq 100); do
    [[ -S $WORK/shared/squat.sock && -S $(ctl_of squat) ]] && { started=true; break; }
    kill -0 "${SERVER_PID[squat]}" 2>/dev/null || break
    sleep 0.1
done
if ! $started; then
    bad "--unix in a shared directory with NAME.ctl taken there: the server did not start: $(cat "$WORK/server-squat.err")"
    unset "SERVER_PID[squat]"
elif [[ $("$UZRAM" attr squat disksize 2>&1) != 16777216 ]]; then
    bad "the control socket of a --unix server is not found by name in the runtime directory"
else
    grep -q "control: $(ctl_of squat)" "$WORK/server-squat.out" ||
        bad "the banner does not name the control socket in the runtime directory: $(cat "$WORK/server-squat.out")"
    nbdinfo --size "nbd+unix:///?socket=$WORK/shared/squat.sock" >/dev/null 2>&1 ||
        bad "the NBD socket in the shared directory does not serve"
    kill -TERM "${SERVER_PID[squat]}"
    wait "${SERVER_PID[squat]}" 2>/dev/null || true
    unset "SERVER_PID[squat]"
    [[ -S $WORK/shared/squat.ctl ]] || bad "the server removed another user's socket on exit"
    pass "--unix in a world-writable directory: the control socket is in the runtime directory"
fi
# With no usable runtime directory, a control socket in a shared directory is refused.
rc=0
XDG_RUNTIME_DIR=/proc/no-such-dir timeout 5 "$UZRAM" serve -n shared -s 16M \
    --unix "$WORK/shared/shared.sock" >/dev/null 2>"$WORK/shared.err" || rc=$?
if [[ $rc -eq 0 || $rc -eq 124 ]]; then
    bad "a server with its control socket in a world-writable directory started"
elif ! grep -q "writable by other users" "$WORK/shared.err"; then
    bad "refusing a shared control directory: message is: $(cat "$WORK/shared.err")"
else
    pass "no runtime directory and a world-writable --unix directory: refused with a reason"
fi

start_server ctl -s 64M
CTL=$(ctl_of ctl)

# --- answers that say what is wrong (item 8) ---
if "$UZRAM" attr ctl comp_algorithm nosuch 2>"$WORK/algo.err"; then
    bad "comp_algorithm nosuch was accepted"
elif grep -q "no attribute" "$WORK/algo.err" || ! grep -q "nosuch" "$WORK/algo.err" ||
    ! grep -q "lz4" "$WORK/algo.err"; then
    bad "comp_algorithm nosuch: the message should name the value and the algorithms: $(cat "$WORK/algo.err")"
else
    pass "attr comp_algorithm nosuch: $(cat "$WORK/algo.err")"
fi

# A request line over 4096 bytes: the error line arrives whole (no reset before it is read).
if ! reply=$("$PY" - "$CTL" <<'EOF'
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
s.connect(sys.argv[1])
s.sendall(b"get " + b"x" * 6000 + b"\n")
out = b""
try:
    while True:
        part = s.recv(4096)
        if not part:
            break
        out += part
except ConnectionResetError:
    sys.exit(f"connection reset after {out!r}")
print(out.decode().strip())
EOF
); then
    bad "control line of 6004 bytes: $reply"
elif [[ $reply != "error EINVAL: request line too long"* ]]; then
    bad "control line of 6004 bytes answered: $reply"
else
    pass "control line over 4096 bytes: '$reply'"
fi

# With every control peer slot held (8, each up to its 5 s deadline), later peers get the EBUSY
# line and then the end of the connection, not a reset (the server read what they sent).
if ! reply=$("$PY" - "$CTL" <<'EOF'
import socket, sys, threading
path = sys.argv[1]
held = []
for _ in range(8):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    held.append(s)
results = {}
lock = threading.Lock()
def peer():
    for _ in range(30):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        out = b""
        try:
            s.connect(path)
            s.sendall(b"devices\n")
            while True:
                part = s.recv(4096)
                if not part:
                    break
                out += part
            key = out.split(b":")[0].decode()
        except OSError as e:
            key = f"{type(e).__name__} after {out!r}"
        s.close()
        with lock:
            results[key] = results.get(key, 0) + 1
threads = [threading.Thread(target=peer) for _ in range(10)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(" ".join(f"{k}={v}" for k, v in sorted(results.items())))
if set(results) != {"error EBUSY"}:
    sys.exit(1)
EOF
); then
    bad "300 peers beside 8 held ones: $reply"
else
    pass "300 peers beside 8 held ones each got the EBUSY line: $reply"
fi

# A user who cannot read the runtime directory is told so (and the exit status says it).
rc=0
as_other "$UZRAM" status >"$WORK/status.out" 2>"$WORK/status.err" || rc=$?
if [[ $rc -eq 0 ]] || ! grep -qi "permission denied" "$WORK/status.err"; then
    bad "uzram status without access to the runtime directory: status $rc, said: $(cat "$WORK/status.out" "$WORK/status.err")"
else
    pass "uzram status without access: $(head -1 "$WORK/status.err")"
fi
rc=0
as_other "$UZRAM" status ctl >"$WORK/status.out" 2>"$WORK/status.err" || rc=$?
if [[ $rc -eq 0 ]] || grep -q "no device" "$WORK/status.err" ||
    ! grep -qi "permission denied" "$WORK/status.err"; then
    bad "uzram status NAME without access: status $rc, said: $(cat "$WORK/status.err")"
else
    pass "uzram status NAME without access: $(head -1 "$WORK/status.err")"
fi

# --name must not look like an option.
"$UZRAM" serve -n -rf -s 16M >/dev/null 2>"$WORK/name.err" &
name_pid=$!
at_exit "kill $name_pid"
for _ in $(seq 50); do kill -0 $name_pid 2>/dev/null || break; sleep 0.1; done
if kill -0 $name_pid 2>/dev/null; then
    bad "--name -rf was accepted"
elif ! grep -q "bad --name" "$WORK/name.err"; then
    bad "--name -rf refused with: $(cat "$WORK/name.err")"
else
    pass "--name -rf refused: $(cat "$WORK/name.err")"
fi
kill $name_pid 2>/dev/null || true
wait $name_pid 2>/dev/null || true

# The mode and group of an NBD Unix socket there is not: refused, not dropped.
for option in "--socket-mode 0660" "--socket-group 0"; do
    rc=0
    # shellcheck disable=SC2086 # the option and its value
    timeout 5 "$UZRAM" serve -n nounix -s 16M --no-unix --tcp 127.0.0.1:0 $option \
        >/dev/null 2>"$WORK/nounix.err" || rc=$?
    if [[ $rc -ne 1 ]]; then
        bad "$option with --no-unix: status $rc (accepted, and dropped)"
    elif [[ $(wc -l <"$WORK/nounix.err") -ne 1 ]] || ! grep -q "with --no-unix there is none" "$WORK/nounix.err"; then
        bad "$option with --no-unix refused with: $(cat "$WORK/nounix.err")"
    else
        pass "$option with --no-unix refused: $(cat "$WORK/nounix.err")"
    fi
done

# An IPv4 loopback address written as IPv6 (::ffff:127.0.0.1) is loopback: no warning.
start_server v4mapped -s 16M --tcp '[::ffff:127.0.0.1]:0'
if grep -q "warning" "$WORK/server-v4mapped.err"; then
    bad "--tcp [::ffff:127.0.0.1]:0 warned: $(cat "$WORK/server-v4mapped.err")"
else
    pass "--tcp [::ffff:127.0.0.1]:0: no warning"
fi
stop_server v4mapped

# A runtime directory another user (root) created: the error says what to do.
mkdir -p "$WORK/rootrun/uzram"
chmod 755 "$WORK" "$WORK/rootrun"
chmod 500 "$WORK/rootrun/uzram" # not writable for its owner either, so this works unprivileged
rc=0
XDG_RUNTIME_DIR=$WORK/rootrun unprivileged timeout 5 "$UZRAM" serve -s 16M >/dev/null 2>"$WORK/rootrun.err" || rc=$?
chmod 700 "$WORK"
if [[ $rc -eq 0 || $rc -eq 124 ]]; then
    bad "a server started in a runtime directory it cannot write"
elif ! grep -q "XDG_RUNTIME_DIR" "$WORK/rootrun.err" || ! grep -q -- "--unix" "$WORK/rootrun.err"; then
    bad "runtime directory not writable: the message names neither XDG_RUNTIME_DIR nor --unix: $(cat "$WORK/rootrun.err")"
else
    pass "runtime directory not writable: $(cat "$WORK/rootrun.err")"
fi

# --- the client side trusts only control sockets nobody else can have put there (issue 23) ---
# fake_server PATH MODE: a fake control socket at PATH that answers every request with made-up
# statistics (MODE "lie"), or with an endless reply (MODE "flood"); prints its pid.
fake_server() {
    "$PY" - "$1" "$2" <<'EOF' >/dev/null 2>&1 &
import socket, sys, threading
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
s.listen(8)
def answer(c):
    try:
        c.recv(4096)
        if sys.argv[2] == "lie":
            c.sendall(b"ok\nFORGED 1 2 3 4 5 6 7 8 9 10 11\n")
        else:
            c.sendall(b"ok\n")
            block = b"x" * 65536
            while True:
                c.sendall(block)
    except OSError:
        pass
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=answer, args=(c,), daemon=True).start()
EOF
    echo $!
}
wait_socket() { for _ in $(seq 50); do [[ -S $1 ]] && break; sleep 0.1; done; }
# trust_refused WHAT DIR: status, attr and attach on the fake device `fake` in DIR are refused,
# and nothing it says is printed.
trust_refused() {
    local what=$1 dir=$2 out rc
    for cmd in "status" "status fake" "attr fake mm_stat" "attach fake"; do
        rc=0
        out=$(XDG_RUNTIME_DIR=$dir timeout 10 "$UZRAM" $cmd 2>&1) || rc=$?
        if [[ $rc -eq 0 ]] || grep -q FORGED <<<"$out"; then
            bad "$what: 'uzram $cmd' believed the fake socket: $out"
            return
        elif ! grep -q "not trusting" <<<"$out"; then
            bad "$what: 'uzram $cmd' said: $out"
            return
        fi
    done
    pass "$what: status, attr and attach refuse it: $out"
}
mkdir -p "$WORK/open/uzram"
chmod 777 "$WORK/open/uzram"
fake=$(fake_server "$WORK/open/uzram/fake.ctl" lie)
at_exit "kill $fake"
wait_socket "$WORK/open/uzram/fake.ctl"
trust_refused "a runtime directory others may write (0777)" "$WORK/open"
if [[ $(id -u) -eq 0 ]]; then
    chmod 755 "$WORK/open/uzram"
    chown 1 "$WORK/open/uzram" # another user's (daemon), as /tmp/uzram-UID made by someone else
    trust_refused "a runtime directory of another user" "$WORK/open"
    chown 0 "$WORK/open/uzram"
    chown 1 "$WORK/open/uzram/fake.ctl"
    trust_refused "another user's socket in a private directory" "$WORK/open"
else
    skip_check "a runtime directory or socket of another user: needs root"
fi
kill "$fake"

# --- a control reply has a bound (issue 23): a socket that answers without end ---
mkdir -m 700 "$WORK/flood" "$WORK/flood/uzram"
flood=$(fake_server "$WORK/flood/uzram/fake.ctl" flood)
at_exit "kill $flood"
wait_socket "$WORK/flood/uzram/fake.ctl"
rc=0
start=$(date +%s)
(ulimit -v 1000000; timeout 20 "$UZRAM" attr "$WORK/flood/uzram/fake.ctl" mm_stat) >/dev/null 2>"$WORK/flood.err" || rc=$?
took=$(($(date +%s) - start))
if [[ $rc -ne 1 ]] || ! grep -q "sent more than 1048576 bytes: no uzram server reply" "$WORK/flood.err"; then
    bad "an endless control reply: exit $rc after $took s: $(head -c 300 "$WORK/flood.err")"
else
    pass "an endless control reply is cut at 1 MiB: $(cat "$WORK/flood.err") ($took s)"
fi
kill "$flood"

# --- signals and the volatile data (item 9) ---
grep -q "lost when the server stops" "$WORK/server-ctl.out" ||
    bad "the banner does not say that the data lives only in the server process: $(cat "$WORK/server-ctl.out")"
"$PY" - "$(uri_of ctl)" <<'EOF' || bad "writing the data before SIGHUP"
import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
h.pwrite(b"\x5a" * (4 << 20), 0)
h.shutdown()
EOF
kill -HUP "${SERVER_PID[ctl]}"
sleep 1
if ! server_alive ctl; then
    unset "SERVER_PID[ctl]"
    bad "SIGHUP stopped the server (closing a terminal would discard the disk)"
else
    "$PY" - "$(uri_of ctl)" <<'EOF' || bad "the data after SIGHUP"
import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
assert h.pread(4 << 20, 0) == b"\x5a" * (4 << 20), "the data changed after SIGHUP"
h.shutdown()
EOF
    pass "SIGHUP: the server goes on, the data is intact"
    # SIGTERM with a client connected: the log says what is discarded.
    $PY -c 'import nbd, sys, time
h = nbd.NBD(); h.connect_uri(sys.argv[1]); print("connected", flush=True); time.sleep(60)' \
        "$(uri_of ctl)" >"$WORK/holder.out" 2>&1 &
    holder=$!
    at_exit "kill $holder"
    for _ in $(seq 100); do grep -q connected "$WORK/holder.out" && break; sleep 0.1; done
    stored=$(mm_stat_field ctl 0)
    stop_server ctl
    grep -q "SIGTERM.*discarding $stored bytes of data.*1 client connected" "$WORK/server-ctl.err" ||
        bad "SIGTERM log line about the $stored bytes discarded: $(cat "$WORK/server-ctl.err")"
fi

((${#FAILED[@]} == 0)) || fail "$(printf '%s; ' "${FAILED[@]}")"
echo "PASS: control.sh"
