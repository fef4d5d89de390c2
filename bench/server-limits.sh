#!/bin/bash
# server-limits.sh - what clients that stall or idle cost `uzram serve`, and what they do to the
# others (issue 11): threads, memory maps and RSS with 1000 idle connections at --threads 64; the
# time a 1 MiB READ takes while 32 clients hold unfinished 32 MiB WRITEs or leave 32 MiB READ
# replies untaken; the greeting time while a control peer trickles a byte every 4 s; how long a
# handshake that stops reading its replies stays. A measurement, not a test: it prints figures.
#
# Usage: bench/server-limits.sh [UZRAM_BINARY]   (default build/uzram; e.g. an older build to
#        compare). Waits are capped at CAP seconds (default 60): "> 60 s" means no answer by then.
#        SCENARIOS="idle writes reads control handshake" (the default) picks the parts.
#        Needs an open file limit of at least 2100 (raised here when the hard limit allows).
set -u
cd "$(dirname "$0")/.." || exit 1
UZRAM=$(realpath "${1:-build/uzram}")
PY=/usr/bin/python3
CAP=${CAP:-60}
ulimit -n 4096 2>/dev/null || ulimit -n "$(ulimit -Hn)"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/uzram-limits.XXXXXX")
export XDG_RUNTIME_DIR=$WORK/run
mkdir -m 700 "$XDG_RUNTIME_DIR"
SERVER=
cleanup() {
    [[ -n $SERVER ]] && kill -KILL "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

# serve NAME ARGS...: start a server and wait for its sockets.
serve() {
    local name=$1
    shift
    "$UZRAM" serve -q -n "$name" "$@" >/dev/null 2>"$WORK/$name.err" &
    SERVER=$!
    for _ in $(seq 100); do
        [[ -S $XDG_RUNTIME_DIR/uzram/$name.sock && -S $XDG_RUNTIME_DIR/uzram/$name.ctl ]] && return 0
        sleep 0.1
    done
    echo "server $name did not start: $(cat "$WORK/$name.err")" >&2
    exit 1
}
unserve() {
    kill -KILL "$SERVER" 2>/dev/null
    wait "$SERVER" 2>/dev/null
    SERVER=
}
measure() { # SCENARIO NAME: the python part below
    PYTHONPATH=tests/integration "$PY" - "$1" "$XDG_RUNTIME_DIR/uzram/$2.sock" \
        "$XDG_RUNTIME_DIR/uzram/$2.ctl" "$SERVER" "$CAP" <<'EOF'
import os, socket, struct, sys, threading, time
from nbd_raw import *

scenario, sock, ctl, pid, cap = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])


def server_state():
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    with open(f"/proc/{pid}/maps") as f:
        maps = sum(1 for _ in f)
    return f"threads {len(os.listdir(f'/proc/{pid}/task'))}, maps {maps}, RSS {rss / 1024:.1f} MiB"


def timed(what, function):
    start = time.monotonic()
    try:
        function()
        print(f"  {what}: {time.monotonic() - start:.3f} s")
    except (Check, Closed, OSError) as e:
        print(f"  {what}: > {time.monotonic() - start:.0f} s ({type(e).__name__}: {e})")


if scenario == "idle":
    print(f"  no clients: {server_state()}")
    conns, failed = [], 0
    for i in range(1000):
        try:
            conns.append(Raw(sock).go())
        except (Check, Closed, OSError):
            failed += 1
    time.sleep(5)
    print(f"  1000 connections tried, {len(conns)} through GO, {failed} refused or dropped")
    print(f"  after 5 s idle: {server_state()}")
    if conns:
        timed("a 1 MiB WRITE + READ on connection 1", lambda: (conns[0].write(0, b"x" * MiB), conns[0].read(0, MiB)))
        timed(f"a 4 KiB READ on each of the {len(conns)} connections", lambda: [c.read(0, 4096) for c in conns])
    print(f"  after that: {server_state()}")
elif scenario in ("writes", "reads"):
    hogs = []
    for i in range(32):
        c = Raw(sock).go()
        if scenario == "writes":
            c.send(packed(CMD_WRITE, (i % 4) * 32 * MiB, 32 * MiB, cookie=i) + b"\xab")
        else:
            c.send(packed(CMD_READ, (i % 4) * 32 * MiB, 32 * MiB, cookie=i))
        hogs.append(c)
    time.sleep(0.5)
    print(f"  32 clients holding: {server_state()}")
    good = Raw(sock, timeout=cap).go()
    timed("1 MiB READ", lambda: good.read(0, MiB))
    timed("1 MiB WRITE", lambda: good.write(MiB, b"y" * MiB))
elif scenario == "control":
    peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    peer.connect(ctl)
    stop = threading.Event()

    def trickle():
        while not stop.is_set():
            try:
                peer.send(b"g")
            except OSError:
                return
            stop.wait(4)
    threading.Thread(target=trickle, daemon=True).start()
    time.sleep(1)
    timed("greeting of a new NBD client", lambda: Raw(sock, timeout=cap).greeting())
    timed("control request 'clients'", lambda: control(ctl, "clients", timeout=cap))
    stop.set()
elif scenario == "handshake":
    c = Raw(sock)
    c.greeting()
    c.sock.setblocking(False)
    option = struct.pack(">QII", IHAVEOPT, OPT_LIST, 0) * 256
    quiet = time.monotonic()
    while time.monotonic() - quiet < 1:
        try:
            c.sock.send(option)
            quiet = time.monotonic()
        except BlockingIOError:
            time.sleep(0.05)
    # Then take 2 KiB of replies every 10 s: each send of the server finishes in time.
    start = time.monotonic()
    gone = False
    while time.monotonic() - start < cap and not gone:
        try:
            gone = c.sock.recv(2048) == b""
        except BlockingIOError:
            pass
        except (ConnectionResetError, BrokenPipeError):
            gone = True
        for _ in range(20):
            if gone or control(ctl, "clients").split()[1] == "0":
                gone = True
                break
            time.sleep(0.5)
    print(f"  a handshake sending options, reading 2 KiB of replies every 10 s: "
          f"{'dropped after' if gone else 'still connected after'} {time.monotonic() - start:.1f} s")
EOF
}

declare -A TITLE=(
    [idle]="1000 idle connections, --threads 64"
    [writes]="32 clients with unfinished 32 MiB WRITEs (header and 1 byte of payload)"
    [reads]="32 clients that leave 32 MiB READ replies untaken"
    [control]="a control peer sending one byte every 4 s"
    [handshake]="a handshake sending LIST options and reading its replies slowly"
)
echo "uzram: $UZRAM"
for scenario in ${SCENARIOS:-idle writes reads control handshake}; do
    echo "== ${TITLE[$scenario]}"
    if [[ $scenario == idle ]]; then serve idle -s 64M --threads 64; else serve "$scenario" -s 256M; fi
    measure "$scenario" "$scenario"
    unserve
done
