#!/usr/bin/env bash
# bench-nbd.sh - integration test of `uzram bench nbd`, the light NBD load generator, against a
# real `uzram serve`: writes land (mm_stat moves), reads verify byte for byte, the counts it
# reports are the requests it was asked for, and bad input (unknown export, read-only export,
# options of the other job, a stopped, killed or misbehaving server) ends in a clear error and
# a nonzero status within --timeout, never a hang.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

[[ -x $PY ]] || skip "$PY is missing"
lib_init

REGION=$((16 * MiB))
BLOCKS=$((REGION / 4096))
start_server bn -s 32M --tcp 127.0.0.1:0
PORT=
for _ in $(seq 50); do # the banner names the port the system chose
    PORT=$(sed -n 's/.*tcp:127\.0\.0\.1:\([0-9]*\).*/\1/p' "$WORK/server-bn.out")
    [[ -n $PORT ]] && break
    sleep 0.1
done
[[ -n $PORT ]] || fail "no TCP port in the server's banner: $(cat "$WORK/server-bn.out")"
start_server ro -s 8M -r
SOCK=$(sock_of bn)
PID=${SERVER_PID[bn]}

# json_get FILE KEY: one value of a `uzram bench nbd --json` report.
json_get() { $PY -c 'import json, sys; v = json.load(open(sys.argv[1]))[sys.argv[2]]; print("null" if v is None else v)' "$1" "$2"; }

# 1. Writes: every block of the region once, in order; the report counts them and the
# device's orig_data_size grows by exactly that many bytes.
before=$(mm_stat_field bn 0)
"$UZRAM" bench nbd --unix "$SOCK" --rw write --pattern seq --region $REGION \
    --requests $BLOCKS --depth 32 --server-pid "$PID" --json >"$WORK/write.json" ||
    fail "the write run failed"
[[ $(json_get "$WORK/write.json" requests) == "$BLOCKS" ]] || fail "write run: requests is not $BLOCKS"
[[ $(json_get "$WORK/write.json" writes) == "$BLOCKS" ]] || fail "write run: writes is not $BLOCKS"
[[ $(json_get "$WORK/write.json" reads) == 0 ]] || fail "write run: reads is not 0"
server_cpu=$(json_get "$WORK/write.json" server_cpu_us_per_request)
[[ $server_cpu != null ]] || fail "write run: no server CPU with --server-pid"
$PY -c 'import sys; c = float(sys.argv[1]); sys.exit(0 if 0 < c < 1e6 else 1)' "$server_cpu" ||
    fail "write run: server CPU a request $server_cpu us is not plausible"
after=$(mm_stat_field bn 0)
((after - before == REGION)) ||
    fail "orig_data_size grew by $((after - before)), not the $REGION bytes written"
pass "write run: $BLOCKS writes counted, orig_data_size grew by $REGION"

# 2. Random reads with --verify: every one returns the bytes the write run stored.
"$UZRAM" bench nbd --unix "$SOCK" --rw read --region $REGION --requests 20000 --verify \
    --json >"$WORK/read.json" || fail "the verified read run failed"
[[ $(json_get "$WORK/read.json" reads) == 20000 ]] || fail "read run: reads is not 20000"
[[ $(json_get "$WORK/read.json" verified_reads) == 20000 ]] || fail "read run: not every read verified"
[[ $(json_get "$WORK/read.json" verified_zero_reads) == 0 ]] || fail "read run: some reads were zeros"
pass "read run: 20000 random reads, each equal to what was written"

# 3. --verify can fail: with another seed the same blocks are not what it expects.
if "$UZRAM" bench nbd --unix "$SOCK" --rw read --region $REGION --requests 100 --verify \
    --seed 2 >/dev/null 2>"$WORK/wrong.err"; then
    fail "--verify accepted blocks written with another seed"
fi
grep -q -- "--verify" "$WORK/wrong.err" || fail "no --verify message: $(cat "$WORK/wrong.err")"
pass "--verify refuses other bytes"

# 4. A 70/30 mix through the URI form, verified, beyond the written region (zeros allowed).
"$UZRAM" bench nbd --uri "nbd+unix:///?socket=$SOCK" --rw mix --requests 5000 --depth 64 \
    --verify --json >"$WORK/mix.json" || fail "the mixed run failed"
reads=$(json_get "$WORK/mix.json" reads) writes=$(json_get "$WORK/mix.json" writes)
((reads + writes == 5000 && reads > 0 && writes > 0)) || fail "mix run: $reads reads + $writes writes"
[[ $(json_get "$WORK/mix.json" verified_reads) -gt 0 ]] || fail "mix run: nothing verified"
pass "mix run: $reads reads, $writes writes"
"$UZRAM" bench nbd --unix "$SOCK" --requests 1000 >"$WORK/text.out" || fail "text run failed"
"$UZRAM" bench nbd --uri "nbd://127.0.0.1:$PORT/bn" --region $REGION --requests 2000 --verify \
    --json >"$WORK/tcp.json" || fail "the TCP run failed"
[[ $(json_get "$WORK/tcp.json" verified_reads) == 2000 ]] || fail "TCP run: not every read verified"
pass "TCP run through nbd://127.0.0.1:$PORT/bn: 2000 verified reads"
{ grep -q '^requests/s' "$WORK/text.out" && grep -q '^client CPU' "$WORK/text.out"; } ||
    fail "text report lacks requests/s or client CPU: $(cat "$WORK/text.out")"

# 5. Bad input: a clear message and a nonzero status each.
# expect_error STATUS PATTERN COMMAND...: COMMAND exits with STATUS and says PATTERN.
expect_error() {
    local want=$1 pattern=$2 rc=0
    shift 2
    timeout 60 "$@" >/dev/null 2>"$WORK/err" || rc=$?
    [[ $rc == "$want" ]] || fail "$* exited $rc, not $want: $(cat "$WORK/err")"
    grep -q -- "$pattern" "$WORK/err" || fail "$*: no '$pattern' in: $(cat "$WORK/err")"
}
expect_error 1 "no such export" "$UZRAM" bench nbd --unix "$SOCK" --export nope --requests 10
expect_error 1 "read-only" "$UZRAM" bench nbd --unix "$(sock_of ro)" --rw write --requests 10
expect_error 1 "larger than the export" "$UZRAM" bench nbd --unix "$SOCK" --region 1G
expect_error 1 "cannot connect" "$UZRAM" bench nbd --unix "$WORK/no.sock"
expect_error 2 "not an option of" "$UZRAM" bench nbd --unix "$SOCK" --algorithms lz4
expect_error 2 "only" "$UZRAM" bench --depth 4
expect_error 2 "--unix PATH or --uri" "$UZRAM" bench nbd
pass "unknown export, read-only export, bad region, no socket and wrong options refused"

# 6. A stopped server: the handshake, then a run in progress, each gives up within --timeout.
# elapsed_since START: seconds (fractional) since $EPOCHREALTIME was START.
elapsed_since() { $PY -c 'import sys; print(float(sys.argv[2]) - float(sys.argv[1]))' "$1" "$EPOCHREALTIME"; }
kill -STOP "$PID"
at_exit kill -CONT "$PID"
start=$EPOCHREALTIME
expect_error 1 "did not answer in time" "$UZRAM" bench nbd --unix "$SOCK" --timeout 2 --requests 10
took=$(elapsed_since "$start")
kill -CONT "$PID"
$PY -c 'import sys; t = float(sys.argv[1]); sys.exit(0 if 1.9 <= t <= 6 else 1)' "$took" ||
    fail "a stopped server's handshake gave up after $took s, not about 2 s"
pass "stopped server: handshake gave up after $took s (--timeout 2)"

"$UZRAM" bench nbd --unix "$SOCK" --timeout 2 --requests 100000000 >/dev/null 2>"$WORK/stall.err" &
bench=$!
sleep 1
kill -0 "$bench" 2>/dev/null || fail "the long run ended early: $(cat "$WORK/stall.err")"
kill -STOP "$PID"
start=$EPOCHREALTIME
rc=0
for _ in $(seq 100); do # at most 10 s, then it counts as a hang
    kill -0 "$bench" 2>/dev/null || break
    sleep 0.1
done
took=$(elapsed_since "$start")
kill -CONT "$PID"
kill -0 "$bench" 2>/dev/null && { kill "$bench"; fail "the run did not give up 10 s after the server stopped"; }
wait "$bench" || rc=$?
((rc == 1)) || fail "the stalled run exited $rc, not 1: $(cat "$WORK/stall.err")"
grep -q "no reply from the server for 2 s" "$WORK/stall.err" || fail "stall message: $(cat "$WORK/stall.err")"
$PY -c 'import sys; t = float(sys.argv[1]); sys.exit(0 if 1.5 <= t <= 6 else 1)' "$took" ||
    fail "a run against a stopped server gave up after $took s, not about 2 s"
pass "stopped server mid-run: gave up after $took s (--timeout 2)"

# A server that dies mid-run: a clear error and status 1 at once, not a wait for --timeout.
start_server gone -s 16M
"$UZRAM" bench nbd --unix "$(sock_of gone)" --requests 100000000 >/dev/null 2>"$WORK/gone.err" &
bench=$!
sleep 1
kill -KILL "${SERVER_PID[gone]}"
wait "${SERVER_PID[gone]}" 2>/dev/null || true
unset "SERVER_PID[gone]"
start=$EPOCHREALTIME
for _ in $(seq 50); do
    kill -0 "$bench" 2>/dev/null || break
    sleep 0.1
done
kill -0 "$bench" 2>/dev/null && { kill "$bench"; fail "the run went on 5 s after its server died"; }
rc=0
wait "$bench" || rc=$?
((rc == 1)) || fail "the run whose server died exited $rc, not 1"
grep -q "closed the connection\|receiving replies failed\|sending requests failed" "$WORK/gone.err" ||
    fail "no message when the server died: $(cat "$WORK/gone.err")"
pass "server killed mid-run: status 1 after $(elapsed_since "$start") s: $(head -n 1 "$WORK/gone.err")"

# A misbehaving server (bench_nbd_peer.py): each way ends in status 1 and a line saying what
# went wrong, within --timeout 2 even when the server trickles a reply byte by byte.
# peer SCENARIO PATTERN: run one scenario against `uzram bench nbd`.
peer() {
    local scenario=$1 pattern=$2 sock=$WORK/peer.sock pid rc=0 start took
    rm -f "$sock"
    "$PY" "$(dirname "$0")/bench_nbd_peer.py" "$sock" "$scenario" &
    pid=$!
    for _ in $(seq 50); do
        [[ -S $sock ]] && break
        sleep 0.1
    done
    [[ -S $sock ]] || fail "peer $scenario did not start"
    start=$EPOCHREALTIME
    timeout 20 "$UZRAM" bench nbd --unix "$sock" --timeout 2 --requests 10 --depth 2 \
        >/dev/null 2>"$WORK/peer.err" || rc=$?
    took=$(elapsed_since "$start")
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    ((rc == 1)) || fail "peer $scenario: exited $rc, not 1: $(cat "$WORK/peer.err")"
    grep -q -- "$pattern" "$WORK/peer.err" || fail "peer $scenario: no '$pattern' in: $(cat "$WORK/peer.err")"
    $PY -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= 6 else 1)' "$took" ||
        fail "peer $scenario: took $took s"
}
peer garbage "not an NBD server"
peer cut "closed the connection during the greeting"
peer refuse "refused export '': NBD_REP_ERR_POLICY: not for you"
peer short "closed the connection\|receiving replies failed"
peer handle "a handle no request has"
peer error "failed a read at offset [0-9]*: Input/output error"
peer trickle "no reply from the server for 2 s"
pass "misbehaving servers: not NBD, cut greeting, refused GO, short reply, unknown handle, EIO, trickle"

# The server lives on, and what it stores still reads back.
server_alive bn || fail "the server died"
"$UZRAM" bench nbd --unix "$SOCK" --rw read --region $REGION --requests 2000 --verify >/dev/null ||
    fail "reads after the stall no longer verify"
stop_server bn
stop_server ro
echo "PASS: bench-nbd.sh"
