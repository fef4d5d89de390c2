#!/usr/bin/env bash
# basic.sh - integration test: a real `uzram serve` checked with nbdinfo, nbdcopy, qemu-img, qemu-io.
# Also covers the control socket (status, attr, mem_limit, reset) and a clean SIGTERM.
# Skips and fails as tests/integration/lib.bash says (exit 0/1/77).
set -euo pipefail

. "$(dirname "$0")/lib.bash"
need_tools nbdinfo nbdcopy qemu-img qemu-io sha256sum
need_python_nbd
lib_init

SOCK=$(sock_of uzram0)
CTL=$(ctl_of uzram0)
URI=$(uri_of uzram0)
CLIENT_PID=
at_exit 'kill $CLIENT_PID'

start_server uzram0 -s 64M
# The banner follows the sockets; give it a moment.
for _ in $(seq 50); do
    [[ -s $WORK/server-uzram0.out ]] && break
    sleep 0.1
done
grep -q "^uzram: serving uzram0 (67108864 bytes, lz4) on unix:$SOCK; control: $CTL" "$WORK/server-uzram0.out" ||
    fail "startup line not as documented: $(cat "$WORK/server-uzram0.out")"
pass "server started"

# --- a second server on the same name must refuse with one clear line ---
if "$UZRAM" serve -s 64M >/dev/null 2>"$WORK/second.err"; then
    fail "a second server on the same socket started"
fi
grep -q "in use by another server" "$WORK/second.err" || fail "busy socket message: $(cat "$WORK/second.err")"
[[ -S $SOCK ]] || fail "the refused second server removed the first one's socket"
pass "busy socket refused"

# --- nbdinfo: size, flags, block sizes, list ---
nbdinfo "$URI" >"$WORK/info"
grep -q 'export-size: 67108864' "$WORK/info" || fail "nbdinfo size: $(cat "$WORK/info")"
for flag in can_multi_conn can_flush can_fua can_trim can_zero can_fast_zero can_cache can_df; do
    grep -q "$flag: true" "$WORK/info" || fail "nbdinfo: $flag not true"
done
grep -q 'is_read_only: false' "$WORK/info" || fail "nbdinfo: read-only"
grep -q 'block_size_minimum: 512' "$WORK/info" || fail "nbdinfo: minimum block size"
grep -q 'block_size_preferred: 4096' "$WORK/info" || fail "nbdinfo: preferred block size"
grep -q 'block_size_maximum: 33554432' "$WORK/info" || fail "nbdinfo: maximum block size"
grep -q 'base:allocation' "$WORK/info" || fail "nbdinfo: base:allocation context"
nbdinfo --list "$URI" | grep -q 'export="uzram0"' || fail "nbdinfo --list does not show uzram0"
nbdinfo "nbd+unix:///uzram0?socket=$SOCK" --size | grep -qx 67108864 || fail "export by name"
if nbdinfo "nbd+unix:///nosuch?socket=$SOCK" >/dev/null 2>&1; then
    fail "an unknown export name was accepted"
fi
pass "nbdinfo size, flags, block sizes, list"

# type of the extent covering OFFSET in `nbdinfo --map --json` (0 data, 3 hole+zero, ...)
map_type_at() {
    nbdinfo --map --json "$URI" | $PY -c '
import json, sys
off = int(sys.argv[1])
for e in json.load(sys.stdin):
    if e["offset"] <= off < e["offset"] + e["length"]:
        print(e["type"]); break
' "$1"
}

# --- a fresh device maps as one hole ---
nbdinfo --map --json "$URI" | $PY -c '
import json, sys
m = json.load(sys.stdin)
assert all(e["type"] == 3 for e in m), m
assert sum(e["length"] for e in m) == 64 << 20, m
' || fail "fresh device is not all hole,zero: $(nbdinfo --map "$URI")"
pass "fresh device maps as hole,zero"

# --- nbdcopy in and out: random, zero, repeated and text regions ---
head -c $((8 * MiB)) /dev/urandom >"$WORK/src.img"
head -c $((8 * MiB)) /dev/zero >>"$WORK/src.img"
head -c $((64 * 1024)) /dev/urandom >"$WORK/block"
for _ in $(seq 128); do cat "$WORK/block"; done >>"$WORK/src.img"
# `yes` dies of SIGPIPE when head has enough: expected, hence the `|| true`.
{ yes 'The quick brown fox jumps over the lazy dog; uzram keeps pages compressed in RAM.' |
    head -c $((8 * MiB)) >>"$WORK/src.img"; } || true
[[ $(stat -c %s "$WORK/src.img") -eq $((32 * MiB)) ]] || fail "test image is not 32 MiB"
nbdcopy "$WORK/src.img" "$URI" || fail "nbdcopy into the device"
nbdcopy "$URI" "$WORK/out.img" || fail "nbdcopy out of the device"
[[ $(stat -c %s "$WORK/out.img") -eq $((64 * MiB)) ]] || fail "copied-out image has the wrong size"
want=$(sha256sum <"$WORK/src.img" | cut -d' ' -f1)
got=$(head -c $((32 * MiB)) "$WORK/out.img" | sha256sum | cut -d' ' -f1)
[[ $want == "$got" ]] || fail "sha256 differs after nbdcopy in and out"
cmp -s <(tail -c $((32 * MiB)) "$WORK/out.img") <(head -c $((32 * MiB)) /dev/zero) ||
    fail "the unwritten half does not read as zeros"
pass "nbdcopy round trip, sha256 equal"

qemu-img compare -f raw -F raw "$WORK/src.img" "$URI" >/dev/null || fail "qemu-img compare"
pass "qemu-img compare"

# --- qemu-io: patterns, write zeroes, discard ---
QIO() { qemu-io -f raw "$@" "$URI" >"$WORK/qio.out" 2>&1 || fail "qemu-io $*: $(cat "$WORK/qio.out")"; }
QIO -c 'write -P 0xab 40M 1M' -c 'write -P 0xcd 41M 1M' -c 'write -P 0xef 42M 1M' \
    -c 'write -P 0x11 43M 4k' -c 'write -P 0x22 45092864 512'
QIO -c 'read -P 0xab 40M 1M' -c 'read -P 0xcd 41M 1M' -c 'read -P 0xef 42M 1M' \
    -c 'read -P 0x22 45092864 512' -c 'read -P 0x11 43M 4k' -c 'read -P 0 45093376 3584'
QIO -c 'write -z 41M 1M' -c 'discard 42M 1M'
QIO -c 'read -P 0xab 40M 1M' -c 'read -P 0 41M 1M' -c 'read -P 0 42M 1M'
# out-of-range and unaligned requests must fail, not crash the server
if qemu-io -f raw -c 'write -P 0x1 64M 4k' "$URI" >/dev/null 2>&1; then
    fail "a write past the end succeeded"
fi
pass "qemu-io write/read patterns, write -z, discard"

# --- nbdinfo --map: data where written, holes where discarded ---
[[ $(map_type_at $((40 * MiB))) == 0 ]] || fail "40M should be data: $(nbdinfo --map "$URI")"
[[ $(map_type_at $((42 * MiB))) == 3 ]] || fail "42M should be hole,zero: $(nbdinfo --map "$URI")"
t=$(map_type_at $((41 * MiB)))
[[ $t == 2 || $t == 3 ]] || fail "41M should read as zero: $(nbdinfo --map "$URI")"
[[ $(map_type_at $((50 * MiB))) == 3 ]] || fail "50M should be hole,zero"
[[ $(map_type_at 0) == 0 ]] || fail "the random region should be data"
pass "nbdinfo --map shows data and holes"

# --- structured reads of a sparse range come back right (OFFSET_HOLE chunks) ---
$PY - "$URI" <<'EOF' || fail "python nbd structured read checks"
import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
assert h.can_multi_conn()
buf = h.pread(8 << 20, 40 << 20)          # 40M..48M: data, zeros, hole, small writes
assert buf[:1 << 20] == b"\xab" * (1 << 20)
assert buf[1 << 20:3 << 20] == bytes(2 << 20)
assert buf[3 << 20:(3 << 20) + 4096] == b"\x11" * 4096
assert buf[(3 << 20) + 4096:(3 << 20) + 4608] == b"\x22" * 512
assert buf[(3 << 20) + 4608:] == bytes(len(buf) - (3 << 20) - 4608)
chunks = []
def chunk(subbuf, offset, status, error):
    chunks.append((status, offset, len(subbuf)))
    return 0
h.pread_structured(4 << 20, 40 << 20, chunk)
kinds = {c[0] for c in chunks}
assert nbd.READ_HOLE in kinds and nbd.READ_DATA in kinds, chunks
assert sum(c[2] for c in chunks) == 4 << 20, chunks
# errors exactly as the spec says
import errno
def err(f):
    """The errno name of the failure of f(), "" if it succeeded."""
    try:
        f()
    except nbd.Error as e:
        return e.errno if isinstance(e.errno, str) else errno.errorcode.get(e.errno, e.errno)
    return ""
h.set_strict_mode(0)
for got, want in [(err(lambda: h.pread(4096, 64 << 20)), "EINVAL"),
                  (err(lambda: h.pwrite(b"x" * 4096, 64 << 20)), "ENOSPC"),
                  (err(lambda: h.pread(100, 0)), "EINVAL"),
                  (err(lambda: h.trim(4096, (64 << 20) - 512)), "EINVAL"),
                  (err(lambda: h.zero(4096, 64 << 20)), "ENOSPC")]:
    assert got == want, (got, want)
assert h.pread(512, 40 << 20) == b"\xab" * 512     # still in step afterwards
h.shutdown()
EOF
pass "structured reads with holes; EINVAL/ENOSPC at the edges"

# --- uzram status and status --json ---
"$UZRAM" status >"$WORK/status" || fail "uzram status failed"
head -1 "$WORK/status" | grep -q '^NAME  *ALGORITHM  *DISKSIZE  *DATA  *COMPR  *TOTAL' ||
    fail "status header: $(cat "$WORK/status")"
grep -q '^uzram0  *lz4  *64M ' "$WORK/status" || fail "status row: $(cat "$WORK/status")"
"$UZRAM" status --json | $PY -c '
import json, sys
d = json.load(sys.stdin)
assert len(d) == 1 and d[0]["name"] == "uzram0", d
assert d[0]["disksize"] == 64 << 20 and d[0]["algorithm"] == "lz4", d
assert d[0]["orig_data_size"] > 0 and d[0]["mem_used_total"] > 0, d
' || fail "uzram status --json: $("$UZRAM" status --json)"
"$UZRAM" status uzram0 | grep -q '^uzram0 ' || fail "status NAME"
if "$UZRAM" status nosuch >/dev/null 2>&1; then fail "status of a missing device succeeded"; fi
pass "uzram status and --json"

# --- every counter in every form: stat_json names the library's whole list (the unit tests
# prove that); the control socket's stats reply and status --json must carry each of them ---
$PY - "$CTL" "$UZRAM" <<'EOF' || fail "a counter is missing from the control reply or status --json"
import json, socket, subprocess, sys
ctl, uzram = sys.argv[1], sys.argv[2]
counters = json.loads(subprocess.check_output([uzram, "attr", ctl, "stat_json"]))
assert len(counters) >= 18 and "dedup_hash_collisions" in counters, counters
with socket.socket(socket.AF_UNIX) as s:
    s.connect(ctl)
    s.sendall(b"stats\n")
    reply = b""
    while chunk := s.recv(65536):
        reply += chunk
lines = reply.decode().splitlines()
assert lines[0] == "ok", lines
control = dict(line.split(" ", 1) for line in lines[1:])
status = json.loads(subprocess.check_output([uzram, "status", "--json", "uzram0"]))[0]
for name, value in counters.items():
    assert int(control.get(name, -1)) == value, ("control reply", name, control.get(name), value)
    assert status.get(name) == value, ("status --json", name, status.get(name), value)
EOF
pass "every counter in the control reply and in status --json"

# --- uzram attr ---
mm=$("$UZRAM" attr uzram0 mm_stat)
read -r -a fields <<<"$mm"
[[ ${#fields[@]} -eq 11 ]] || fail "mm_stat has ${#fields[@]} fields, not 11: $mm"
[[ ${fields[0]} -gt 0 ]] || fail "orig_data_size is 0 after writes: $mm"
"$UZRAM" attr "$CTL" disksize | grep -qx 67108864 || fail "attr by control socket path"
if "$UZRAM" attr uzram0 nosuch 2>/dev/null; then fail "an unknown attribute was read"; fi
if "$UZRAM" attr uzram0 mm_stat 5 2>"$WORK/attr.err"; then fail "mm_stat was writable"; fi
grep -q '^uzram: cannot set mm_stat: ' "$WORK/attr.err" || fail "attr error line: $(cat "$WORK/attr.err")"
pass "uzram attr reads, errors"

# --- mem_limit: a write past it fails with ENOSPC, older data stays ---
"$UZRAM" attr uzram0 mem_limit 1M || fail "setting mem_limit"
[[ $("$UZRAM" attr uzram0 mem_limit) -eq $MiB ]] || fail "mem_limit did not read back as 1M"
head -c $MiB /dev/urandom >"$WORK/random1m"
$PY - "$URI" "$WORK/random1m" <<'EOF' || fail "a write past mem_limit did not fail with ENOSPC"
import errno, nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
data = open(sys.argv[2], "rb").read()
try:
    h.pwrite(data, 48 << 20)
except nbd.Error as e:
    assert e.errno in (errno.ENOSPC, "ENOSPC"), e
else:
    raise SystemExit("write succeeded")
h.shutdown()
EOF
if qemu-io -f raw -c "write -s $WORK/random1m 52M 1M" "$URI" >"$WORK/qio.out" 2>&1; then
    fail "qemu-io write past mem_limit succeeded"
fi
grep -q 'No space left on device' "$WORK/qio.out" || fail "qemu-io did not report ENOSPC: $(cat "$WORK/qio.out")"
rm -f "$WORK/out.img"
nbdcopy "$URI" "$WORK/out.img" || fail "nbdcopy out after the mem_limit failure"
got=$(head -c $((32 * MiB)) "$WORK/out.img" | sha256sum | cut -d' ' -f1)
[[ $want == "$got" ]] || fail "data written before the mem_limit failure changed"
QIO -c 'read -P 0xab 40M 1M'
"$UZRAM" attr uzram0 mem_limit 0 || fail "clearing mem_limit"
pass "mem_limit gives ENOSPC; earlier data intact"

# --- reset is refused while a client is connected ---
$PY -c 'import nbd, sys, time
h = nbd.NBD(); h.connect_uri(sys.argv[1]); time.sleep(60)' "$URI" &
CLIENT_PID=$!
for _ in $(seq 100); do
    [[ $("$UZRAM" attr uzram0 clients) -ge 1 ]] && break
    sleep 0.1
done
[[ $("$UZRAM" attr uzram0 clients) -ge 1 ]] || fail "the client did not show up in 'clients'"
if "$UZRAM" attr uzram0 reset 1 2>"$WORK/reset.err"; then fail "reset accepted with a client connected"; fi
grep -q '1 client uses uzram0; disconnect it first (nbd-client -d, qemu.s blockdev-del, or stop the program), then reset again' "$WORK/reset.err" || fail "reset refusal message: $(cat "$WORK/reset.err")"
# disksize is read-only, and says so, with or without clients (no "disconnect first").
if "$UZRAM" attr uzram0 disksize 32M 2>"$WORK/disksize.err"; then fail "disksize was writable"; fi
grep -q "^uzram: cannot set disksize: 'disksize' is read-only" "$WORK/disksize.err" ||
    fail "disksize refusal with a client connected: $(cat "$WORK/disksize.err")"
kill "$CLIENT_PID"
wait "$CLIENT_PID" 2>/dev/null || true
CLIENT_PID=
for _ in $(seq 100); do
    [[ $("$UZRAM" attr uzram0 clients) -eq 0 ]] && break
    sleep 0.1
done
"$UZRAM" attr uzram0 reset 1 || fail "reset refused with no client connected"
read -r -a fields <<<"$("$UZRAM" attr uzram0 mm_stat)"
[[ ${fields[0]} -eq 0 ]] || fail "orig_data_size is not 0 after reset"
if "$UZRAM" attr uzram0 disksize 32M 2>"$WORK/disksize.err"; then fail "disksize was writable"; fi
grep -q "'disksize' is read-only" "$WORK/disksize.err" || fail "disksize refusal: $(cat "$WORK/disksize.err")"
pass "reset refused with a client, accepted without; disksize read-only either way"

# --- SIGTERM: exit 0, sockets removed, no sanitizer report ---
stop_server uzram0
pass "SIGTERM: exit 0, sockets removed"

echo "PASS: basic.sh"
