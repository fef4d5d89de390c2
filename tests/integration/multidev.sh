#!/usr/bin/env bash
# multidev.sh - integration test: one `uzram serve` with several devices (--device, a
# configuration section with a devices key), each its own NBD export with its own data,
# settings, statistics and mem_limit, a limit all of them share (--server-mem-limit), and
# hot-add / hot-remove through the control socket while another device serves I/O.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

need_tools nbdinfo nbdcopy
need_python_nbd
lib_init

# A client of its own (python3-libnbd): I/O on one export with checks.
cat >"$WORK/mdclient.py" <<'EOF'
import errno, os, random, sys, time
import nbd

def connect(sock, name):
    h = nbd.NBD()
    h.set_export_name(name)
    h.connect_unix(sock)
    return h

def pattern(name, block, size):
    # Each export and block its own bytes, so data that crossed to another export shows.
    seed = ("%s/%d" % (name, block)).encode()
    return (seed * (size // len(seed) + 1))[:size]

mode, sock = sys.argv[1], sys.argv[2]
if mode == "write":  # write SOCK NAME BLOCKS: a pattern in every 64K block of the first BLOCKS
    name, blocks = sys.argv[3], int(sys.argv[4])
    h = connect(sock, name)
    for b in range(blocks):
        h.pwrite(pattern(name, b, 65536), b * 65536)
    h.flush()
elif mode == "verify":  # verify SOCK NAME BLOCKS TOTAL: the pattern there, zeros after
    name, blocks, total = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    h = connect(sock, name)
    for b in range(total):
        want = pattern(name, b, 65536) if b < blocks else bytes(65536)
        got = h.pread(65536, b * 65536)
        if got != want:
            sys.exit("%s block %d: wrong data (%r...)" % (name, b, got[:24]))
elif mode == "busy":  # busy SOCK NAME STOPFILE COUNTFILE: write and verify until STOPFILE
    name, stop, count_path = sys.argv[3], sys.argv[4], sys.argv[5]
    h = connect(sock, name)
    rounds = 0
    rng = random.Random(1)
    while not os.path.exists(stop) or rounds < 20:
        block = rng.randrange(64)
        data = pattern(name + str(rounds), block, 65536)
        h.pwrite(data, block * 65536)
        if h.pread(65536, block * 65536) != data:
            sys.exit("busy client: block %d read back wrong in round %d" % (block, rounds))
        rounds += 1
        if rounds % 50 == 0:
            open(count_path, "w").write(str(rounds))
        time.sleep(0.002)
    open(count_path, "w").write(str(rounds))
elif mode == "hold":  # hold SOCK NAME STOPFILE: stay connected until STOPFILE
    name, stop = sys.argv[3], sys.argv[4]
    h = connect(sock, name)
    h.pwrite(b"held" * 1024, 0)
    open(stop + ".connected", "w").close()
    while not os.path.exists(stop):
        time.sleep(0.05)
elif mode == "fill":  # fill SOCK NAME MAX_BYTES: random 64K blocks until ENOSPC; prints bytes
    name, most = sys.argv[3], int(sys.argv[4])
    h = connect(sock, name)
    rng = random.Random(name)
    done = 0
    while done < most:
        try:
            h.pwrite(rng.randbytes(65536), done)
        except nbd.Error as e:
            if e.errnum != errno.ENOSPC:
                sys.exit("write at %d: %s (only ENOSPC is allowed)" % (done, e))
            break
        done += 65536
    print(done)
elif mode == "trim":  # trim SOCK NAME BYTES
    name, length = sys.argv[3], int(sys.argv[4])
    h = connect(sock, name)
    h.trim(length, 0)
EOF
client() { $PY "$WORK/mdclient.py" "$@"; }

# --- several --device: each an export; the first is the default ---
start_server pool --device a:32M --device b:16M:algorithm=zstd:dedup --device ro:8M:read-only
SOCK=$(sock_of pool)
nbdinfo --list --json "nbd+unix:///?socket=$SOCK" >"$WORK/list.json"
$PY - "$WORK/list.json" <<'EOF' || fail "nbdinfo --list: $(cat "$WORK/list.json")"
import json, sys
exports = {e["export-name"]: e for e in json.load(open(sys.argv[1]))["exports"]}
assert sorted(exports) == ["a", "b", "ro"], sorted(exports)
assert exports["a"]["export-size"] == 32 << 20 and exports["b"]["export-size"] == 16 << 20
assert exports["ro"]["is_read_only"] and not exports["a"]["is_read_only"]
assert "default export" in exports["a"]["description"], exports["a"]["description"]
assert "zstd" in exports["b"]["description"], exports["b"]["description"]
EOF
# "" is a: the plain URI reaches the first device.
[[ $(nbdinfo --size "nbd+unix:///?socket=$SOCK") -eq $((32 * MiB)) ]] || fail "the default export is not a"
[[ $(nbdinfo --size "nbd+unix:///b?socket=$SOCK") -eq $((16 * MiB)) ]] || fail "export b by name"
# (libnbd shows the server's message in its debug output.)
if LIBNBD_DEBUG=1 nbdinfo "nbd+unix:///nosuch?socket=$SOCK" >/dev/null 2>"$WORK/err"; then fail "unknown export served"; fi
grep -q "no export named 'nosuch'; this server exports: a, b, ro" "$WORK/err" ||
    fail "unknown export: the error names the exports: $(cat "$WORK/err")"
pass "nbdinfo --list shows every device (sizes, read-only, description); \"\" is the first; unknown names get the list"

# --- the data of one never appears in another ---
client write "$SOCK" a 40
client write "$SOCK" b 24
client verify "$SOCK" a 40 512 || fail "device a after writing both"
client verify "$SOCK" b 24 256 || fail "device b after writing both"
client verify "$SOCK" ro 0 128 || fail "device ro is not all zeros"
# nbdcopy over a whole export, and one write refused on the read-only one.
nbdcopy "nbd+unix:///b?socket=$SOCK" "$WORK/b.img"
[[ $(stat -c %s "$WORK/b.img") -eq $((16 * MiB)) ]] || fail "nbdcopy of b: wrong size"
nbdcopy "$WORK/b.img" "nbd+unix:///a?socket=$SOCK"
client verify "$SOCK" a 24 16 >/dev/null 2>&1 && fail "a still holds its own pattern after b was copied over it"
cmp <(nbdcopy "nbd+unix:///a?socket=$SOCK" - | head -c $((16 * MiB))) "$WORK/b.img" || fail "a does not hold b's copy"
client verify "$SOCK" b 24 256 || fail "device b changed when a was written"
if nbdcopy "$WORK/b.img" "nbd+unix:///ro?socket=$SOCK" 2>/dev/null; then fail "a write to ro succeeded"; fi
pass "distinct patterns read back on every device; nbdcopy between exports; read-only refuses"

# --- status, attr and stats per device ---
"$UZRAM" status >"$WORK/status"
head -n 1 "$WORK/status" | grep -q '^NAME  *SERVER ' || fail "status: no SERVER column: $(cat "$WORK/status")"
for d in a b ro; do grep -q "^$d  *pool " "$WORK/status" || fail "status has no row for $d: $(cat "$WORK/status")"; done
[[ $("$UZRAM" attr b comp_algorithm) == *"[zstd]"* ]] || fail "attr b comp_algorithm: $("$UZRAM" attr b comp_algorithm)"
[[ $("$UZRAM" attr b use_dedup) -eq 1 && $("$UZRAM" attr a use_dedup) -eq 0 ]] || fail "use_dedup per device"
[[ $(mm_stat_field b 0) -eq $((24 * 65536)) ]] || fail "b: orig_data_size $(mm_stat_field b 0), wanted $((24 * 65536))"
[[ $(mm_stat_field ro 0) -eq 0 ]] || fail "ro: data counted where none was written"
"$UZRAM" attr a mem_limit 1M
[[ $("$UZRAM" attr a mem_limit) -eq $MiB && $("$UZRAM" attr b mem_limit) -eq 0 ]] || fail "mem_limit set on a reached b"
"$UZRAM" attr a mem_limit 0
"$UZRAM" status -j >"$WORK/status.json"
$PY - "$WORK/status.json" <<'EOF' || fail "status -j: $(cat "$WORK/status.json")"
import json, sys
rows = {r["name"]: r for r in json.load(open(sys.argv[1]))}
assert set(rows) == {"a", "b", "ro"}, rows.keys()
assert all(r["server"] == "pool" for r in rows.values())
assert rows["b"]["algorithm"] == "zstd" and rows["a"]["algorithm"] == "lz4"
used = sum(r["mem_used_total"] - r.get("dict_mem", 0) + r["table_mem"] for r in rows.values())
assert all(r["server_mem_used"] == used for r in rows.values()), (used, rows["a"]["server_mem_used"])
EOF
pass "status lists each device with its server; attr and stats per device; server_mem_used = the devices' pool memory and page tables"

# --- a second server in the same runtime directory: status and attr find devices anywhere ---
start_server solo -s 8M
[[ $("$UZRAM" status -n -o name | tr '\n' ' ') == "a b ro solo " ]] || fail "status of two servers: $("$UZRAM" status)"
[[ $("$UZRAM" attr solo disksize) -eq $((8 * MiB)) ]] || fail "attr of the single-device server"
# A single device served alone keeps its old face: no SERVER column when it is alone.
[[ $("$UZRAM" status solo | head -n 1) == NAME\ * && $("$UZRAM" status solo | head -n 1) != *SERVER* ]] ||
    fail "status of a single device shows SERVER"
start_server other --device b:8M
if "$UZRAM" attr b disksize 2>"$WORK/err"; then fail "attr b with two servers serving a b"; fi
grep -q "2 servers serve a device named b" "$WORK/err" || fail "ambiguous name: $(cat "$WORK/err")"
[[ $("$UZRAM" attr -u "$(ctl_of other)" b disksize) -eq $((8 * MiB)) ]] || fail "attr -u CTL b"
stop_server other
stop_server solo
pass "status lists the devices of every server; attr finds a device on any server; a name on two servers is refused"

# --- hot-add and hot-remove while device a serves I/O throughout ---
client busy "$SOCK" a "$WORK/stop-busy" "$WORK/busy-count" &
BUSY=$!
at_exit "touch '$WORK/stop-busy'; kill $BUSY"
for _ in $(seq 100); do [[ -s $WORK/busy-count ]] && break; sleep 0.1; done
[[ -s $WORK/busy-count ]] || fail "the busy client on a did not get going"
"$UZRAM" hot-add c 8M --algorithm zstd >"$WORK/out" || fail "hot-add c"
grep -qx "uzram: added c (8M, zstd)" "$WORK/out" || fail "hot-add answer: $(cat "$WORK/out")"
nbdinfo --list "nbd+unix:///?socket=$SOCK" | grep -q '^export="c":' || fail "c not listed after hot-add"
client write "$SOCK" c 16
client verify "$SOCK" c 16 128 || fail "data on the hot-added c"
[[ $("$UZRAM" attr c comp_algorithm) == *"[zstd]"* ]] || fail "c's algorithm"
if "$UZRAM" hot-add c 8M 2>"$WORK/err"; then fail "a second c was added"; fi
grep -q "has a device named c already" "$WORK/err" || fail "hot-add of a taken name: $(cat "$WORK/err")"
if "$UZRAM" hot-add d 8M --algorithm nosuch 2>"$WORK/err"; then fail "hot-add with a bad algorithm"; fi
grep -q "unknown algorithm 'nosuch'" "$WORK/err" || fail "hot-add bad algorithm: $(cat "$WORK/err")"
if "$UZRAM" hot-add d 4097 2>"$WORK/err"; then fail "hot-add with a bad size"; fi
grep -q "must be a non-zero multiple of 4K" "$WORK/err" || fail "hot-add bad size: $(cat "$WORK/err")"
# Refused while a client is connected to it, with what to do; fine once it is gone.
client hold "$SOCK" c "$WORK/stop-hold" &
HOLD=$!
for _ in $(seq 100); do [[ -e $WORK/stop-hold.connected ]] && break; sleep 0.1; done
if "$UZRAM" hot-remove c 2>"$WORK/err"; then fail "hot-remove c with a client connected"; fi
grep -q "1 client uses c; disconnect it first" "$WORK/err" || fail "hot-remove refusal: $(cat "$WORK/err")"
if "$UZRAM" hot-remove a 2>"$WORK/err"; then fail "hot-remove a under the busy client"; fi
touch "$WORK/stop-hold"
wait "$HOLD" || fail "the holding client failed"
"$UZRAM" hot-remove c >"$WORK/out" || fail "hot-remove c after its client left"
grep -q "c removed; its .* bytes of data" "$WORK/out" || fail "hot-remove answer: $(cat "$WORK/out")"
nbdinfo --list "nbd+unix:///?socket=$SOCK" | grep -q '^export="c":' && fail "c still listed"
if nbdinfo "nbd+unix:///c?socket=$SOCK" >/dev/null 2>&1; then fail "c still served"; fi
if "$UZRAM" attr c disksize 2>/dev/null; then fail "attr c after hot-remove"; fi
# A device's background threads start with it and stop with hot-remove: both at the normal
# policy (0, field 41 of /proc/PID/task/TID/stat): the recompressor (uzram-recomp) held to its
# CPU budget (it makes progress on a busy machine, as SCHED_IDLE did not), the writeback
# thread (uzram-writeback) because it holds the lock writers wait for.
threads_of() { # NAME POLICY: how many threads of the server have that name and policy
    local task n=0
    for task in /proc/"${SERVER_PID[pool]}"/task/*; do
        [[ $(cat "$task/comm" 2>/dev/null) == "$1" &&
            $(sed 's/.*) //' "$task/stat" 2>/dev/null | cut -d' ' -f39) == "$2" ]] && n=$((n + 1))
    done
    echo $n
}
background() { echo "$(threads_of uzram-recomp 0) $(threads_of uzram-writeback 0)"; }
before=$(background)
read -r recomp writeback <<<"$before"
"$UZRAM" hot-add bg 8M --recompress-idle 60 --backing-file "$WORK/bg.back" --writeback-idle 60 \
    >/dev/null || fail "hot-add bg with background threads"
# (They start while hot-add answers: wait for them.)
want="$((recomp + 1)) $((writeback + 1))"
for _ in $(seq 50); do [[ $(background) == "$want" ]] && break; sleep 0.1; done
[[ $(background) == "$want" ]] || fail "bg: background threads (recompressor, writeback) $(background), wanted $want"
"$UZRAM" hot-remove bg >/dev/null || fail "hot-remove bg"
for _ in $(seq 50); do [[ $(background) == "$before" ]] && break; sleep 0.1; done
[[ $(background) == "$before" ]] || fail "bg's background threads outlived it: $(background), wanted $before"
# The name can be used again, for a fresh empty device.
"$UZRAM" hot-add c 4M >/dev/null || fail "hot-add c again"
client verify "$SOCK" c 0 64 || fail "the new c holds the old one's data"
"$UZRAM" hot-remove c >/dev/null || fail "hot-remove c again"
touch "$WORK/stop-busy"
wait "$BUSY" || fail "the client on a saw wrong data while devices came and went"
rounds=$(cat "$WORK/busy-count")
client verify "$SOCK" b 24 256 || fail "device b after the hot-add/remove"
# Attach (FUSE file + loop device) works per device; an attached device is not hot-removed.
if [[ -c /dev/fuse && -e /dev/loop-control && $(id -u) -eq 0 ]] && command -v losetup >/dev/null; then
    at_exit '"$UZRAM" detach b'
    DEV=$("$UZRAM" attach --via loop b 2>"$WORK/err") || fail "attach b: $(cat "$WORK/err")"
    [[ $(blockdev --getsize64 "$DEV") -eq $((16 * MiB)) ]] || fail "$DEV is not b's 16 MiB"
    [[ -S $(sock_of pool) && -e $XDG_RUNTIME_DIR/uzram/b.disk ]] || fail "b's FUSE file is not b.disk"
    cmp <(head -c $((24 * 65536)) "$DEV") <(nbdcopy "nbd+unix:///b?socket=$SOCK" - | head -c $((24 * 65536))) ||
        fail "$DEV does not show b's data"
    [[ $("$UZRAM" status -n -o name,attached | awk '$1 == "b" {print $2}') == "$DEV" ]] || fail "status: b not attached"
    [[ $("$UZRAM" status -n -o name,attached | awk '$1 == "a" {print $2}') == - ]] || fail "status: a attached"
    if "$UZRAM" hot-remove b 2>"$WORK/err"; then fail "hot-remove of an attached device"; fi
    grep -q "b is attached as $DEV; .* uzram detach b first" "$WORK/err" || fail "hot-remove while attached: $(cat "$WORK/err")"
    "$UZRAM" detach b || fail "detach b"
    client verify "$SOCK" b 24 256 || fail "device b after attach and detach"
    attached="; attach/detach per device, hot-remove refused while attached"
else
    skip_check "attach in a multi-device server: needs root, /dev/fuse and loop devices"
    attached=
fi
pass "hot-add and hot-remove while a serves I/O ($rounds verified write+read rounds on a); refused while a client uses it; a device's background threads come and go with it$attached"
stop_server pool

# --- the default export removed: "" finds nothing, also once its name is added again ---
start_server dflt --device first:8M --device second:8M
SOCK=$(sock_of dflt)
[[ $(nbdinfo --size "nbd+unix:///?socket=$SOCK") -eq $((8 * MiB)) ]] || fail "\"\" is not first"
"$UZRAM" hot-remove first >/dev/null || fail "hot-remove first"
if nbdinfo --size "nbd+unix:///?socket=$SOCK" >/dev/null 2>&1; then fail "\"\" served after first was removed"; fi
"$UZRAM" hot-add first 4M >/dev/null || fail "hot-add first again"
[[ $(nbdinfo --size "nbd+unix:///first?socket=$SOCK") -eq $((4 * MiB)) ]] || fail "the new first by name"
if size=$(nbdinfo --size "nbd+unix:///?socket=$SOCK" 2>/dev/null); then
    fail "\"\" selects the new, empty first ($size bytes) after the old one was removed"
fi
stop_server dflt
pass "the default export removed: \"\" finds nothing, also after a device of its name is added again"

# --- per-device and server-wide mem_limit ---
# Random data does not compress: each 64K written costs about 64K of pool memory.
start_server lim --device x:32M:mem-limit=3M --device y:32M --device z:32M --server-mem-limit 6M
SOCK=$(sock_of lim)
x=$(client fill "$SOCK" x $((32 * MiB)))
((x > 2 * MiB && x <= 3 * MiB)) || fail "x took $x bytes under its own 3M limit"
used_x=$(mm_stat_field x 2)
((used_x > 0 && used_x <= 3 * MiB)) || fail "x uses $used_x bytes, past its mem_limit"
y=$(client fill "$SOCK" y $((32 * MiB)))
((x + y > 5 * MiB && x + y <= 6 * MiB)) || fail "x+y took $x+$y bytes under the server's 6M"
# The server is full: z, with no limit of its own, gets ENOSPC at once.
z=$(client fill "$SOCK" z $((32 * MiB)))
((z <= 128 * 1024)) || fail "z wrote $z bytes past the server's limit"
used=$("$UZRAM" status -j | $PY -c 'import json,sys; print(json.load(sys.stdin)[0]["server_mem_used"])')
((used <= 6 * MiB)) || fail "server_mem_used $used past the 6M limit"
[[ $(stat_json_field z failed_writes) -ge 1 ]] || fail "z counted no failed write"
# Space freed on y is z's to use; the limit can change at run time.
client trim "$SOCK" y $((32 * MiB))
z=$(client fill "$SOCK" z $((2 * MiB)))
((z == 2 * MiB)) || fail "z wrote $z bytes after y was trimmed"
"$UZRAM" attr y server_mem_limit 0
[[ $("$UZRAM" attr z server_mem_limit) -eq 0 ]] || fail "server_mem_limit is not the server's"
z=$(client fill "$SOCK" z $((16 * MiB)))
((z == 16 * MiB)) || fail "z wrote $z bytes with no server limit"
stop_server lim
# With writeback-when-full, a write past the server's limit writes back that device's own
# cold pages instead of failing.
start_server wbl --device w:16M:backing-file="$WORK/w.back":writeback-when-full --device v:16M \
    --server-mem-limit 2M
SOCK=$(sock_of wbl)
w=$(client fill "$SOCK" w $((8 * MiB)))
((w == 8 * MiB)) || fail "w wrote $w bytes of 8M with writeback-when-full under the server's 2M"
[[ $(stat_json_field w bd_count) -gt 0 ]] || fail "w wrote nothing back"
((used_w = $(mm_stat_field w 2), used_w <= 2 * MiB)) || fail "w uses $used_w bytes, past the server's 2M"
client verify "$SOCK" v 0 16 || fail "v changed"
stop_server wbl
pass "ENOSPC at a device's mem_limit ($x bytes of 3M) and at the server's (x+y = $((x + y)) of 6M, z refused); trims free room for others; writeback-when-full makes room under the server's limit"

# --- a server from a configuration file with two device sections ---
cat >"$WORK/uzram.conf" <<'EOF'
[both]
devices = fast small
threads = 2
dedup = yes

[fast]
size = 16M

[small]
size = 8M
algorithm = zstd
dedup = no
EOF
start_server both --config "$WORK/uzram.conf"
SOCK=$(sock_of both)
[[ $(nbdinfo --list "nbd+unix:///?socket=$SOCK" | grep -c '^export=') -eq 2 ]] || fail "config: two exports"
[[ $(nbdinfo --size "nbd+unix:///small?socket=$SOCK") -eq $((8 * MiB)) ]] || fail "config: small's size"
[[ $("$UZRAM" attr small comp_algorithm) == *"[zstd]"* ]] || fail "config: small's algorithm"
[[ $("$UZRAM" attr fast use_dedup) -eq 1 && $("$UZRAM" attr small use_dedup) -eq 0 ]] ||
    fail "config: the server section's dedup is each device's default, small's own wins"
client write "$SOCK" fast 8
client write "$SOCK" small 8
client verify "$SOCK" fast 8 256 && client verify "$SOCK" small 8 128 || fail "config: data"
stop_server both
pass "a server from a configuration file with a devices key and a section per device"
