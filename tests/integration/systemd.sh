#!/usr/bin/env bash
# systemd.sh - integration test of what uzram@.service and uzram@.socket rely on, without
# systemd: a fake service manager's NOTIFY_SOCKET (a path, and a name in the abstract namespace)
# gets READY=1 only once the NBD and control sockets accept connections, and STOPPING=1 on
# SIGTERM; sockets handed over as systemd does (LISTEN_FDS, LISTEN_PID, LISTEN_FDNAMES; made
# by activate.py) are served to nbdinfo and nbdcopy and left in place at exit; what cannot be
# served is refused with one line.
# Skips and fails as tests/integration/lib.bash says (exit 0/1/77).
set -euo pipefail

. "$(dirname "$0")/lib.bash"
need_tools nbdinfo nbdcopy
lib_init

# notify_check NAME ADDRESS: serve NAME with NOTIFY_SOCKET=ADDRESS (a path, or @name) as a
# service manager would, and check the order of what the server says.
notify_check() {
    $PY - "$UZRAM" "$1" "$2" "$XDG_RUNTIME_DIR/uzram" "$WORK" <<'EOF'
import os, signal, socket, subprocess, sys
uzram, name, address, rundir, work = sys.argv[1:]
manager = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
manager.bind("\0" + address[1:] if address.startswith("@") else address)
manager.settimeout(10)
with open(f"{work}/server-{name}.err", "w") as err:
    server = subprocess.Popen([uzram, "serve", "-n", name, "-s", "16M"], stdout=subprocess.DEVNULL,
                              stderr=err, env=dict(os.environ, NOTIFY_SOCKET=address))
try:
    message = manager.recv(4096).decode()
    # READY=1 promises listening sockets: connecting must work at once, with no retry.
    for suffix in ("sock", "ctl"):
        probe = socket.socket(socket.AF_UNIX)
        probe.connect(f"{rundir}/{name}.{suffix}")
        probe.close()
    lines = message.split("\n")
    assert "READY=1" in lines, message
    assert f"STATUS=serving {name}" in lines, message
    subprocess.run(["nbdinfo", "--size", f"nbd+unix:///?socket={rundir}/{name}.sock"], check=True,
                   stdout=subprocess.DEVNULL)
    server.send_signal(signal.SIGTERM)
    message = manager.recv(4096).decode()
    assert "STOPPING=1" in message.split("\n"), message
    assert server.wait(timeout=20) == 0, "exit status"
finally:
    if server.poll() is None:
        server.kill()
        server.wait()
EOF
}

notify_check pathnotify "$WORK/notify.sock" || fail "sd_notify over a path socket"
pass "NOTIFY_SOCKET path: READY=1 (and STATUS) once the sockets accept, STOPPING=1 on SIGTERM, exit 0"
notify_check abstractnotify "@uzram-test-notify-$$" || fail "sd_notify over an abstract socket"
pass "NOTIFY_SOCKET @abstract: the same"

# Without NOTIFY_SOCKET (Type=simple, or no service manager) nothing changes.
start_server plain -s 16M
nbdinfo --size "$(uri_of plain)" >/dev/null || fail "serving without NOTIFY_SOCKET"
stop_server plain
pass "without NOTIFY_SOCKET the server runs as before"

# --- socket activation: the server serves the sockets it is handed (LISTEN_FDS) ---
ACT="$PY $(dirname "$0")/activate.py"
mkdir -p "$XDG_RUNTIME_DIR/uzram"
chmod 700 "$XDG_RUNTIME_DIR/uzram"
NBD=$XDG_RUNTIME_DIR/uzram/act.sock
# shellcheck disable=SC2086 # $ACT is a command and its script
$ACT --port-file "$WORK/port" --unix "$NBD=nbd" --tcp 127.0.0.1:0=nbd-tcp -- \
    "$UZRAM" serve -n act -s 32M >"$WORK/server-act.out" 2>"$WORK/server-act.err" &
SERVER_PID[act]=$!
for _ in $(seq 100); do [[ -S $(ctl_of act) && -s $WORK/port ]] && break; sleep 0.1; done
[[ -S $(ctl_of act) ]] || fail "activated server did not start: $(cat "$WORK/server-act.err")"
port=$(cat "$WORK/port")
[[ $(nbdinfo --size "nbd+unix:///?socket=$NBD") -eq $((32 << 20)) ]] || fail "nbdinfo over the handed-over Unix socket"
[[ $(nbdinfo --size "nbd://127.0.0.1:$port") -eq $((32 << 20)) ]] || fail "nbdinfo over the handed-over TCP socket"
head -c $((4 << 20)) /dev/urandom >"$WORK/data"
nbdcopy "$WORK/data" "nbd+unix:///?socket=$NBD" || fail "nbdcopy in over the handed-over socket"
nbdcopy "nbd://127.0.0.1:$port" "$WORK/back" || fail "nbdcopy out over the handed-over TCP socket"
cmp -s -n $((4 << 20)) "$WORK/back" "$WORK/data" || fail "data read back over TCP differs"
grep -q "on unix:$NBD, tcp:127.0.0.1:$port (2 sockets from the service manager); control: $(ctl_of act)" \
    "$WORK/server-act.out" || fail "banner of an activated server: $(cat "$WORK/server-act.out")"
[[ $("$UZRAM" status -n -o name,socket,tcp act | tr -s ' ') == "act $NBD 127.0.0.1:$port" ]] ||
    fail "status of an activated server: $("$UZRAM" status -n -o name,socket,tcp act)"
[[ $("$UZRAM" status -n -o name -u "$NBD") == act ]] || fail "status -u of the handed-over socket"
stop_server_keeping() { # NAME: SIGTERM, exit 0; the manager's socket stays, the control socket goes
    local pid=${SERVER_PID[$1]} rc=0
    kill -TERM "$pid"
    for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    wait "$pid" || rc=$?
    unset "SERVER_PID[$1]"
    [[ $rc -eq 0 ]] || fail "activated server $1 exited with $rc"
    check_server_log "$1"
}
stop_server_keeping act
[[ -S $NBD ]] || fail "the server removed the socket the service manager owns"
[[ ! -e $(ctl_of act) ]] || fail "the server left its own control socket"
pass "LISTEN_FDS: Unix and TCP sockets served (nbdinfo, nbdcopy), status shows them, the manager's socket kept"
rm -f "$NBD"

# A control socket handed over too (FileDescriptorName=control), and READY=1 with activation.
$PY - "$UZRAM" "$XDG_RUNTIME_DIR/uzram" "$WORK" "$(dirname "$0")/activate.py" <<'EOF' || fail "activation with a control socket and NOTIFY_SOCKET"
import os, signal, socket, subprocess, sys
uzram, rundir, work, activate = sys.argv[1:]
manager = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
manager.bind(f"{work}/notify2.sock")
manager.settimeout(10)
server = subprocess.Popen([sys.executable, activate, "--unix", f"{rundir}/both.sock=nbd",
                           "--unix", f"{rundir}/both.ctl=control", "--", uzram, "serve", "-n",
                           "both", "-s", "16M"], stdout=open(f"{work}/server-both.out", "w"),
                          stderr=open(f"{work}/server-both.err", "w"),
                          env=dict(os.environ, NOTIFY_SOCKET=f"{work}/notify2.sock"))
try:
    assert "READY=1" in manager.recv(4096).decode().split("\n")
    out = subprocess.check_output([uzram, "attr", "both", "disksize"], text=True)
    assert int(out) == 16 << 20, out
    out = subprocess.check_output(["nbdinfo", "--size", f"nbd+unix:///?socket={rundir}/both.sock"], text=True)
    assert int(out) == 16 << 20, out
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=20) == 0
    for name in ("both.sock", "both.ctl"):  # both belong to the manager
        assert os.path.exists(f"{rundir}/{name}"), name + " removed"
    banner = open(f"{work}/server-both.out").read()
    assert f"; control: {rundir}/both.ctl\n" in banner, banner  # not "(null)"
finally:
    if server.poll() is None:
        server.kill()
EOF
rm -f "$XDG_RUNTIME_DIR/uzram/both.sock" "$XDG_RUNTIME_DIR/uzram/both.ctl"
pass "LISTEN_FDNAMES control: the handed-over control socket serves attr and is the banner's; READY=1 under activation"

# Refusals: one line, exit 1, nothing left listening.
activate_fails() { # PATTERN ACTIVATE-OPTIONS... -- SERVE-OPTIONS...
    local pattern=$1 rc=0
    shift
    # shellcheck disable=SC2086 # bounded: a server that takes the options serves on
    timeout 10 $ACT "$@" >/dev/null 2>"$WORK/act.err" || rc=$?
    [[ $rc -eq 1 && $(wc -l <"$WORK/act.err") -eq 1 ]] || fail "activation ($*): status $rc: $(cat "$WORK/act.err")"
    grep -q "$pattern" "$WORK/act.err" || fail "activation ($*): $(cat "$WORK/act.err")"
}
activate_fails "tcp: the service manager handed over 1 socket to serve (socket activation, LISTEN_FDS): drop --tcp" \
    --unix "$WORK/r1.sock" -- "$UZRAM" serve -n r1 --tcp 127.0.0.1:0
activate_fails "unix: the service manager handed over 1 socket" --unix "$WORK/r2.sock" -- "$UZRAM" serve -n r2 -u "$WORK/x.sock"
printf '[r3]\ntcp = 127.0.0.1:0\n' >"$WORK/act.conf"
activate_fails "act.conf:2: tcp: the service manager handed over" --unix "$WORK/r3.sock" -- "$UZRAM" serve --config "$WORK/act.conf"
activate_fails "descriptor 3 (not-a-socket) is not a socket" --not-a-socket /etc/hostname -- "$UZRAM" serve -n r4
activate_fails "descriptor 3 (not-listening) is not listening" --not-listening -- "$UZRAM" serve -n r5
activate_fails "only a control socket" --unix "$WORK/r6.ctl=control" -- "$UZRAM" serve -n r6
# the socket unit says who may connect: --socket-mode and --socket-group would be dropped
activate_fails "socket-mode: the service manager handed over 1 socket.*SocketMode=" \
    --unix "$WORK/r7.sock" -- "$UZRAM" serve -n r7 --socket-mode 0660
printf '[r8]\nsocket-group = root\n' >"$WORK/act8.conf"
activate_fails "act8.conf:2: socket-group: the service manager handed over" \
    --unix "$WORK/r8.sock" -- "$UZRAM" serve --config "$WORK/act8.conf"
[[ -z $(ls -A "$XDG_RUNTIME_DIR/uzram") ]] || fail "a refused activation left: $(ls "$XDG_RUNTIME_DIR/uzram")"
pass "activation refuses --unix/--tcp/--socket-mode/--socket-group (command line or file), a descriptor that is not a listening socket"

# LISTEN_PID of another process: the sockets are not ours; the server binds its own.
$ACT --other-pid --unix "$WORK/stranger.sock" -- "$UZRAM" serve -n own -s 8M >/dev/null 2>"$WORK/server-own.err" &
SERVER_PID[own]=$!
for _ in $(seq 100); do [[ -S $(sock_of own) ]] && break; sleep 0.1; done
[[ $(nbdinfo --size "$(uri_of own)") -eq $((8 << 20)) ]] || fail "LISTEN_PID of another process was not ignored"
stop_server own
pass "LISTEN_PID of another process: ignored, the server binds its own socket"

echo "PASS: systemd.sh"
