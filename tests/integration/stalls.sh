#!/usr/bin/env bash
# stalls.sh - integration test: clients that try to stall `uzram serve` for everyone else (the
# checks are in stalls.py): unfinished request payloads, a handshake that does not read its
# replies, 1000 idle connections at --threads 64, helper workers that come and go, a control
# peer that trickles its request.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

need_python_nbd
lib_init
# 1000 connections in one client process, and as many in the server.
ulimit -n 4096 2>/dev/null || ulimit -n "$(ulimit -Hn)"
(($(ulimit -n) >= 2100)) || skip "the open file limit $(ulimit -Hn) is below the 2100 this test needs"

STALLS=$(dirname "$0")/stalls.py
# A sanitizer build maps shadow memory per thread: stalls.py then skips the bound on maps.
if grep -qa -e __tsan_init -e __asan_init "$UZRAM"; then export UZRAM_SANITIZED=1; fi
FAILED=() # every part runs, so one run shows all that is wrong
run_check() { # CHECK NAME [DEADLINE]
    "$PY" "$STALLS" "$1" "$(sock_of "$2")" "$(ctl_of "$2")" "${SERVER_PID[$2]}" "${@:3}" ||
        FAILED+=("$1")
}

# Short deadlines (UZRAM_SERVE_TIMEOUT) so that the stalled clients are dropped within seconds.
UZRAM_SERVE_TIMEOUT=2 start_server stall -s 256M
run_check payload stall 2
run_check handshake-send stall 2
grep -q "not complete within 2 s" "$WORK/server-stall.err" ||
    FAILED+=("no log line about the unfinished requests")
grep -q "handshake not finished within 2 s" "$WORK/server-stall.err" ||
    FAILED+=("no log line about the handshake that stopped reading")
stop_server stall

start_server idle -s 64M --threads 64
run_check idle idle
stop_server idle

start_server helpers -s 64M -a zstd --threads 4
run_check helpers helpers
stop_server helpers

start_server ctl -s 64M
run_check control ctl
# SIGTERM while a control peer trickles: the server still stops within the stop grace.
"$PY" - "$(ctl_of ctl)" <<'PYEOF' &
import socket, sys, time
end = time.monotonic() + 40
while time.monotonic() < end:          # reconnect whenever the server drops us
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(sys.argv[1])
        while time.monotonic() < end:
            s.send(b"s")
            time.sleep(1)
    except OSError:
        time.sleep(0.2)
    s.close()
PYEOF
trickler=$!
at_exit "kill $trickler"
sleep 1.5
stop_started=$SECONDS
stop_server ctl
if ((SECONDS - stop_started <= 10)); then
    pass "SIGTERM while a control peer trickles: exit 0 within $((SECONDS - stop_started)) s"
else
    FAILED+=("SIGTERM took $((SECONDS - stop_started)) s while a control peer trickled")
fi
kill "$trickler" 2>/dev/null || true

((${#FAILED[@]} == 0)) || fail "$(printf '%s; ' "${FAILED[@]}")"

echo "PASS: stalls.sh"
