#!/usr/bin/env bash
# protocol.sh - integration test: malformed, truncated and edge-case NBD traffic against a real
# `uzram serve` (the checks are in protocol.py); the server must answer as the spec says and live.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

need_python_nbd
lib_init

start_server proto -s 64M
start_server ro -s 16M -r
"$PY" "$(dirname "$0")/protocol.py" "$(sock_of proto)" "$(sock_of ro)" \
    "${SERVER_PID[proto]}" "${SERVER_PID[ro]}" ||
    fail "protocol checks failed (the 'not ok' lines above say which)"

server_alive proto || fail "server died during the protocol checks"
# Refused requests are counted, not fatal: the device still reports sane statistics.
"$UZRAM" attr proto io_stat >/dev/null || fail "control socket stopped answering"
stop_server proto
stop_server ro
echo "PASS: protocol.sh"
