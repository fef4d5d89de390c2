#!/usr/bin/env bash
# clients.sh - integration test: many real NBD clients on one `uzram serve` at once: parallel
# writers, a client killed mid-copy, 8 write+verify loops, and SIGTERM during active I/O.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

need_tools nbdcopy qemu-io sha256sum cmp
need_python_nbd
lib_init

CLIENT_PIDS=()
at_exit 'for p in "${CLIENT_PIDS[@]}"; do kill -KILL "$p"; done'

# wait_pid PID SECONDS: wait for a background job at most SECONDS; its exit status, or 124.
wait_pid() {
    local pid=$1 limit=$(($2 * 10))
    for _ in $(seq "$limit"); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        return 124
    fi
    local rc=0
    wait "$pid" 2>/dev/null || rc=$?
    return $rc
}

start_server multi -s 512M
URI=$(uri_of multi)

# --- data written first, checked after every disturbance ---
head -c $((32 * MiB)) /dev/urandom >"$WORK/known"
KNOWN_SUM=$(sha256sum <"$WORK/known" | cut -d' ' -f1)
qemu-io -f raw -c "write -s $WORK/known 448M 32M" "$URI" >"$WORK/qio.log" 2>&1 ||
    fail "qemu-io writing the known region: $(cat "$WORK/qio.log")"
known_intact() {
    local got
    got=$($PY - "$URI" <<'EOF'
import hashlib, nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
s = hashlib.sha256()
for off in range(448 << 20, 480 << 20, 8 << 20):
    s.update(h.pread(8 << 20, off))
print(s.hexdigest())
h.shutdown()
EOF
    ) || fail "reading the known region back ($1)"
    [[ $got == "$KNOWN_SUM" ]] || fail "the known region at 448M changed ($1)"
}
known_intact "right after writing it"
pass "32 MiB known region written at 448M"

# --- three clients writing different regions at the same time ---
head -c $((32 * MiB)) /dev/urandom >"$WORK/a"
head -c $((32 * MiB)) /dev/urandom >"$WORK/b"
nbdcopy "$WORK/a" "$URI" >"$WORK/a.log" 2>&1 &                                   # 0..32M
pid_a=$!
qemu-io -f raw -c "write -s $WORK/b 64M 32M" "$URI" >"$WORK/b.log" 2>&1 &       # 64M..96M
pid_b=$!
$PY - "$URI" >"$WORK/c.log" 2>&1 <<'EOF' &                                        # 128M..160M
import nbd, random, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
rng = random.Random(7)
for i in range(64):                       # 512 KiB pieces, 16 in flight
    buf = nbd.Buffer.from_bytearray(bytearray(rng.randbytes(512 << 10)))
    h.aio_pwrite(buf, (128 << 20) + i * (512 << 10))
    while h.aio_in_flight() >= 16:
        h.poll(-1)
while h.aio_in_flight() > 0:
    h.poll(-1)
h.shutdown()
EOF
pid_c=$!
CLIENT_PIDS+=("$pid_a" "$pid_b" "$pid_c")
wait_pid "$pid_a" 60 || fail "parallel nbdcopy failed: $(cat "$WORK/a.log")"
wait_pid "$pid_b" 60 || fail "parallel qemu-io write failed: $(cat "$WORK/b.log")"
wait_pid "$pid_c" 60 || fail "parallel python writer failed: $(cat "$WORK/c.log")"
$PY - "$URI" "$WORK/a" "$WORK/b" <<'EOF' || fail "a region differs after the parallel writes"
import nbd, random, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
assert h.pread(32 << 20, 0) == open(sys.argv[2], "rb").read(), "nbdcopy region 0..32M"
assert h.pread(32 << 20, 64 << 20) == open(sys.argv[3], "rb").read(), "qemu-io region 64M..96M"
rng = random.Random(7)
want = b"".join(rng.randbytes(512 << 10) for _ in range(64))
assert h.pread(32 << 20, 128 << 20) == want, "python region 128M..160M"
assert h.pread(32 << 20, 32 << 20) == bytes(32 << 20), "the gap between regions is not zero"
EOF
known_intact "after the parallel writers"
pass "nbdcopy, qemu-io and an aio python client wrote 3 regions at once; all verified"

# --- a client killed (SIGKILL) in the middle of a large nbdcopy write ---
# A throttled feeder (about 100 MB/s) keeps nbdcopy busy long enough to be killed mid-copy.
before=$(mm_stat_field multi 0)
$PY -c '
import os, sys, time
block = os.urandom(1 << 20)
out = sys.stdout.buffer
for i in range(400):
    out.write(block[i % 7:] + block[:i % 7])
    time.sleep(0.01)
' 2>/dev/null | nbdcopy - "$URI" >"$WORK/kill.log" 2>&1 &
pid_copy=$!
CLIENT_PIDS+=("$pid_copy")
disown # its death by SIGKILL is the point: keep bash from reporting it as a job
copying=false
for _ in $(seq 200); do
    # copying for real: the server holds at least 48 MiB more than before
    if [[ $(mm_stat_field multi 0) -ge $((before + 48 * MiB)) ]]; then copying=true; break; fi
    kill -0 "$pid_copy" 2>/dev/null || break
    sleep 0.05
done
$copying || fail "nbdcopy did not get going (or ended early): $(cat "$WORK/kill.log")"
# ($! of a background pipeline is its last command: nbdcopy itself)
kill -KILL "$pid_copy" 2>/dev/null || fail "nbdcopy ended before it could be killed"
for _ in $(seq 100); do kill -0 "$pid_copy" 2>/dev/null || break; sleep 0.1; done
server_alive multi || fail "the server died when a client was killed mid-copy"
for _ in $(seq 100); do
    [[ $("$UZRAM" attr multi clients) -eq 0 ]] && break
    sleep 0.1
done
[[ $("$UZRAM" attr multi clients) -eq 0 ]] || fail "the killed client's connection is still counted after 10 s"
known_intact "after killing a client mid-copy"
qemu-io -f raw -c 'write -P 0x5c 500M 4M' -c 'read -P 0x5c 500M 4M' "$URI" >"$WORK/qio.log" 2>&1 ||
    fail "a new client after the kill: $(cat "$WORK/qio.log")"
pass "nbdcopy killed mid-copy: server alive, connection released, known data intact"

# --- 8 concurrent clients doing write+verify loops ---
for i in $(seq 0 7); do
    $PY - "$URI" "$i" >"$WORK/loop$i.log" 2>&1 <<'EOF' &
import nbd, random, sys, time
h = nbd.NBD()
h.connect_uri(sys.argv[1])
me = int(sys.argv[2])
base, span = (192 << 20) + me * (16 << 20), 16 << 20    # 16 MiB each, 192M..320M
rng = random.Random(me)
mirror = bytearray(span)
end = time.monotonic() + 4
rounds = 0
while time.monotonic() < end:
    for _ in range(16):
        length = rng.randrange(1, 65) * 4096 if rng.random() < 0.8 else rng.randrange(1, 9) * 512
        off = rng.randrange(0, (span - length) // 512 + 1) * 512
        kind = rng.random()
        if kind < 0.7:
            data = rng.randbytes(length) if rng.random() < 0.5 else bytes([rng.randrange(256)]) * length
            h.pwrite(data, base + off)
        elif kind < 0.85:
            data = bytes(length)
            h.zero(length, base + off)
        else:
            data = bytes(length)
            h.trim(length, base + off)
        mirror[off:off + length] = data
        roff = rng.randrange(0, span // 4096) * 4096
        rlen = min(span - roff, rng.randrange(1, 33) * 4096)
        got = h.pread(rlen, base + roff)
        if got != mirror[roff:roff + rlen]:
            sys.exit(f"client {me}: read {roff}+{rlen} differs in round {rounds}")
    rounds += 1
for off in range(0, span, 4 << 20):
    if h.pread(4 << 20, base + off) != mirror[off:off + (4 << 20)]:
        sys.exit(f"client {me}: final check of {off}+4M differs")
h.shutdown()
print(f"client {me}: {rounds * 16} operations verified")
EOF
    CLIENT_PIDS+=("$!")
    loop_pids[$i]=$!
done
for i in $(seq 0 7); do
    wait_pid "${loop_pids[$i]}" 60 || fail "write+verify client $i: $(tail -5 "$WORK/loop$i.log")"
done
known_intact "after 8 concurrent clients"
pass "8 concurrent write+verify clients: $(cat "$WORK"/loop*.log | awk '{n += $3} END {print n}') operations, all verified"

# --- SIGTERM while clients are busy: exit 0, socket files removed ---
busy_pids=()
for i in 0 1 2 3; do
    $PY - "$URI" "$i" >"$WORK/busy$i.log" 2>&1 <<'EOF' &
import nbd, os, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
me = int(sys.argv[2])
buf = os.urandom(1 << 20)
print("connected", flush=True)
n = 0
try:
    while True:                  # until the server goes away
        off = (256 << 20) + me * (32 << 20) + (n % 32) * (1 << 20)
        h.pwrite(buf, off)
        h.pread(1 << 20, off)
        n += 1
except nbd.Error as e:
    print(f"stopped after {n} rounds: {e}")
EOF
    CLIENT_PIDS+=("$!")
    busy_pids+=("$!")
done
# ...plus one client idle after its handshake and one stalled in the middle of it: shutdown
# must not wait for them (the 20 s bound in stop_server is below the handshake timeout).
$PY - "$(sock_of multi)" >"$WORK/idle.log" 2>&1 <<'EOF' &
import nbd, socket, sys, time
h = nbd.NBD()
h.connect_unix(sys.argv[1])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.recv(18)                       # the greeting, then nothing
s.settimeout(60)
s.recv(1)                        # returns when the server closes the stalled handshake
print("closed by the server")
EOF
idle_pid=$!
CLIENT_PIDS+=("$idle_pid")
# ...and one that asks for 64 MiB of reads and never takes the replies: its workers sit in
# send() until the stop grace (5 s) runs out, not for the 30 s send timeout.
$PY - "$(sock_of multi)" >"$WORK/stalled.log" 2>&1 <<'EOF' &
import socket, struct, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.recv(18)                                                   # greeting
s.sendall(struct.pack(">I", 3))                              # FIXED_NEWSTYLE | NO_ZEROES
s.sendall(struct.pack(">QII", 0x49484156454F5054, 1, 0))     # EXPORT_NAME ""
reply = b""
while len(reply) < 10:                                       # size + flags
    reply += s.recv(10 - len(reply))
for i in range(64):
    s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, 0, i, i << 20, 1 << 20))
print("64 reads sent, not reading the replies", flush=True)
time.sleep(120)
EOF
stalled_pid=$!
CLIENT_PIDS+=("$stalled_pid")
for _ in $(seq 100); do
    [[ $("$UZRAM" attr multi clients) -ge 6 ]] && grep -q "reads sent" "$WORK/stalled.log" && break
    sleep 0.1
done
[[ $("$UZRAM" attr multi clients) -ge 6 ]] ||
    fail "the 4 busy clients, the idle and the stalled one did not all connect: $(cat "$WORK/stalled.log")"
sleep 0.5
stop_started=$SECONDS
stop_server multi # SIGTERM; checks exit status 0 and that both sockets are gone
((SECONDS - stop_started <= 12)) ||
    fail "shutdown took $((SECONDS - stop_started)) s with a client not reading (grace is 5 s)"
grep -q "not taking their replies" "$WORK/server-multi.err" ||
    fail "no log line about the client that did not take its replies"
for pid in "${busy_pids[@]}"; do
    wait_pid "$pid" 20 || true
done
grep -q 'stopped after' "$WORK"/busy*.log || fail "busy clients were not stopped by the shutdown"
wait_pid "$idle_pid" 10 || fail "the stalled handshake was not closed by the shutdown: $(cat "$WORK/idle.log")"
kill "$stalled_pid" 2>/dev/null
pass "SIGTERM during I/O from 4 clients (+1 idle, +1 mid-handshake, +1 not reading): exit 0 within the grace, sockets removed"

echo "PASS: clients.sh"
