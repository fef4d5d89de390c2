#!/usr/bin/env bash
# persist_damage.sh - a `serve --persist` state written behind the server's back or damaged
# (issue 39): every intent record's lock word set to 1 while the server runs makes a client's
# write fail with EIO within the deadline (10 s, not for ever), the log says why once,
# state_lock_timeouts counts it, SIGTERM still stops the server, and the next server takes the
# state over with every byte as it was; a byte flipped in the page table of a SIGKILLed state
# is refused at start with the region and slot named, the file left as it was, and the state
# put right again is taken over with every byte.
# Skips and fails as tests/integration/lib.bash says (exit 0/1/77).
set -euo pipefail

. "$(dirname "$0")/lib.bash"
need_tools nbdcopy cmp
need_python_nbd
[[ -d /dev/shm && $(stat -f -c %T /dev/shm) == tmpfs ]] || skip "/dev/shm is not tmpfs"
lib_init

SHM=/dev/shm/uzram-persist-damage-$$
mkdir -m 700 "$SHM"
at_exit 'rm -rf "$SHM"'
STATE=$SHM/d.state

kill9() { # NAME: SIGKILL the server and wait for it; its stale sockets go
    local pid=${SERVER_PID[$1]}
    kill -KILL "$pid"
    wait "$pid" 2>/dev/null || true
    unset "SERVER_PID[$1]"
    rm -f "$(sock_of "$1")" "$(ctl_of "$1")"
}
same_back() { # NAME FILE: the device's first bytes equal FILE
    rm -f "$WORK/back"
    nbdcopy "$(uri_of "$1")" "$WORK/back" || return 1
    cmp -s -n "$(stat -c %s "$2")" "$2" "$WORK/back"
}

head -c $((4 * MiB)) /dev/urandom >"$WORK/data"
start_server d -s 64M --persist="$STATE"
nbdcopy "$WORK/data" "$(uri_of d)" || fail "nbdcopy in"

# --- every intent record's lock word held (8 KiB on, 32 bytes apart), the server running ---
$PY - "$STATE" <<'EOF'
import struct, sys
with open(sys.argv[1], "r+b") as f:
    for i in range(1024):
        f.seek(8192 + 32 * i)
        f.write(struct.pack("<I", 1))
EOF
# (bounded here too: on the code before, the write never ended)
timeout 60 $PY - "$(sock_of d)" <<'EOF' || fail "a write with the intent records held did not fail with EIO in time"
import errno, os, sys, time, nbd
h = nbd.NBD()
h.connect_unix(sys.argv[1])
started = time.monotonic()
try:
    h.pwrite(os.urandom(4096), 8 << 20)
    sys.exit("the write succeeded")
except nbd.Error as e:
    took = time.monotonic() - started
    assert e.errnum == errno.EIO, f"the write failed with {e}, not EIO"
    assert 9 < took < 30, f"the write failed after {took:.1f} s, not about 10"
    print(f"the write failed with EIO after {took:.1f} s", file=sys.stderr)
EOF
[[ $(stat_json_field d state_lock_timeouts) -ge 1 ]] || fail "state_lock_timeouts is $(stat_json_field d state_lock_timeouts)"
for _ in $(seq 30); do
    grep -q "a lock word in its state file stayed held past its deadline" "$WORK/server-d.err" && break
    sleep 0.1
done
grep -q "d: a lock word in its state file stayed held past its deadline (state_lock_timeouts 1)" \
    "$WORK/server-d.err" || fail "the log does not say why: $(cat "$WORK/server-d.err")"
stop_server d
start_server d -s 64M --persist="$STATE"
same_back d "$WORK/data" || fail "the data after the next server took the state over"
$PY - "$(sock_of d)" <<'EOF' || fail "a write after the takeover"
import os, sys, nbd
h = nbd.NBD()
h.connect_unix(sys.argv[1])
page = os.urandom(4096)
h.pwrite(page, 8 << 20)
assert h.pread(4096, 8 << 20) == page
EOF
pass "intent records' lock words held behind the server's back: EIO after the 10 s deadline, said in the log and counted, SIGTERM stops the server, the next one takes the state over with every byte"

# --- a byte of the page table flipped in a SIGKILLed state: refused, naming it; nothing lost ---
# fingerprint FILE: a digest of every data extent of the (sparse) file, the header's owner pid
# and clean flag (bytes 144 to 151, which a refused takeover resets) left out
fingerprint() {
    $PY - "$1" <<'PYEOF'
import hashlib, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
end, at, digest = os.fstat(fd).st_size, 0, hashlib.sha256()
while True:
    try:
        at = os.lseek(fd, at, os.SEEK_DATA)
    except OSError:
        break
    stop = os.lseek(fd, at, os.SEEK_HOLE)
    data = bytearray(os.pread(fd, stop - at, at))
    if at <= 144 < stop:
        data[144 - at:152 - at] = bytes(8)
    digest.update(at.to_bytes(8, "little") + data)
    at = stop
print(digest.hexdigest())
PYEOF
}
# flip FILE OFFSET MASK
flip() { $PY -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDWR); at = int(sys.argv[2])
os.pwrite(fd, bytes([os.pread(fd, 1, at)[0] ^ int(sys.argv[3], 0)]), at)' "$@"; }
table_offset=$($PY -c 'import struct, sys
f = open(sys.argv[1], "rb"); f.seek(24 + 8 * 4); print(struct.unpack("<Q", f.read(8))[0])' "$STATE")
kill9 d
before=$(fingerprint "$STATE")
flip "$STATE" $((table_offset + 100 * 16 + 8)) 0x01 # page 100's pool handle
if timeout 20 "$UZRAM" serve -n d -s 64M --persist="$STATE" >"$WORK/refused.out" 2>"$WORK/refused.err"; then
    fail "a state with a flipped byte in its page table was taken over"
fi
expected="cannot take over --persist '$STATE': the state is damaged: table page 0 slot 100 (page 100 of the disk, bytes $((table_offset + 1600)) to $((table_offset + 1615))): its check bits do not match its form; it is left as it is"
grep -qF -- "$expected" "$WORK/refused.err" || fail "the refusal says '$(cat "$WORK/refused.err")', not '$expected'"
flip "$STATE" $((table_offset + 100 * 16 + 8)) 0x01
[[ $(fingerprint "$STATE") == "$before" ]] || fail "the refused takeover changed the state's data"
start_server d -s 64M --persist="$STATE"
same_back d "$WORK/data" || fail "the data after the flip was put back"
pass "a flipped byte in the page table of a SIGKILLed state: refused naming page 100's slot and its bytes, the state's data unchanged, taken over with every byte once put back"

# --- uzram state-check says where a damaged header is, and whose a refused file is ---
stop_server d
flip "$STATE" 16 0x10 # the header's disk size
out=$("$UZRAM" state-check "$STATE") && fail "state-check took a damaged header: $out"
[[ $out == "$STATE: a damaged state: "*header* ]] || fail "state-check of a damaged header said: $out"
damage=${out#"$STATE: "}
flip "$STATE" 16 0x10
out=$("$UZRAM" state-check "$STATE") || fail "state-check after the byte was put back: $out"
chmod 640 "$STATE"
out=$("$UZRAM" state-check "$STATE") && fail "state-check took a 0640 state: $out"
[[ $out == *"refused: its mode 0640"*"chmod 600"* ]] || fail "state-check of a 0640 state said: $out"
chmod 600 "$STATE"
pass "state-check names a damaged header ($damage) and the mode of a file others may read"
