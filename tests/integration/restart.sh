#!/usr/bin/env bash
# restart.sh - the data outlives the server (issue 29, serve --persist): a planned restart in
# place (`uzram restart`: same pid, the sockets kept) with an NBD client writing, every byte
# read back after it reconnects, and every write it was told was done among them; SIGKILL and
# a new server on the same --persist=PATH: every byte back; with a zstd dictionary trained
# (dict=auto), with bundles (group=) and with a backing store (pages written back), every byte
# back after SIGKILL, with dedup every byte and the index's counts back after a planned restart
# and SIGKILL, the dictionary and the bundles kept and the store's file required again;
# a state of another format version refused, by a planned restart (the old server keeps
# serving) and at start (the file unchanged); the server ending during a planned restart seen
# by `uzram restart` at once, the state taken over after; a second server on one PATH refused; systemd's descriptor store (FDSTORE=1 with
# the memfd, handed back in LISTEN_FDS) through a fake service manager; bad option
# combinations refused with what to write (server_mem_limit at run time too).
# Skips and fails as tests/integration/lib.bash says (exit 0/1/77).
set -euo pipefail

. "$(dirname "$0")/lib.bash"
need_tools nbdcopy nbdinfo
need_python_nbd
[[ -d /dev/shm && $(stat -f -c %T /dev/shm) == tmpfs ]] || skip "/dev/shm is not tmpfs"
lib_init

SHM=/dev/shm/uzram-restart-$$
mkdir -m 700 "$SHM"
at_exit 'rm -rf "$SHM"'
MiB=$((1 << 20))

kill9() { # NAME: SIGKILL the server and wait for it
    local pid=${SERVER_PID[$1]}
    kill -KILL "$pid"
    wait "$pid" 2>/dev/null || true
    unset "SERVER_PID[$1]"
    # Its socket files stay; start_server waits for them to appear, so they go first (the next
    # server replaces stale ones itself).
    rm -f "$(sock_of "$1")" "$(ctl_of "$1")"
}
# set_version FILE N: write the state header's format version (4 bytes, little endian, at 8).
set_version() {
    $PY -c 'import struct,sys
with open(sys.argv[1], "r+b") as f:
    f.seek(8); f.write(struct.pack("<I", int(sys.argv[2])))' "$1" "$2"
}
get_version() { $PY -c 'import struct,sys; f=open(sys.argv[1],"rb"); f.seek(8); print(struct.unpack("<I", f.read(4))[0])' "$1"; }
# same_back NAME FILE: the device's first bytes equal FILE.
same_back() {
    rm -f "$WORK/back"
    nbdcopy "$(uri_of "$1")" "$WORK/back" || return 1
    cmp -s -n "$(stat -c %s "$2")" "$2" "$WORK/back"
}
# refused WHAT EXPECTED ARGS...: `uzram serve ARGS` must exit non-zero at once saying EXPECTED.
refused() {
    local what=$1 expected=$2
    shift 2
    if timeout 20 "$UZRAM" serve "$@" >"$WORK/refused.out" 2>"$WORK/refused.err"; then
        fail "$what: serve started"
    fi
    grep -qF -- "$expected" "$WORK/refused.err" || fail "$what: said '$(cat "$WORK/refused.err")', not '$expected'"
}

# --- a planned restart with a client writing ---
head -c $((16 * MiB)) /dev/urandom >"$WORK/data"
start_server r -s 64M --persist="$SHM/r.uzram"
grep -q "the data outlives this process" "$WORK/server-r.out" || fail "banner: $(cat "$WORK/server-r.out")"
nbdcopy "$WORK/data" "$(uri_of r)" || fail "nbdcopy in"
pid=${SERVER_PID[r]}
# A client keeps writing 4 KiB pages (in the second half of the disk) while the server restarts:
# its connection ends; every write it was told was done reads back after it reconnects.
$PY - "$UZRAM" "$(sock_of r)" "$WORK" <<'EOF' || fail "client across the restart"
import os, subprocess, sys, time, nbd
uzram, sock, work = sys.argv[1:]
h = nbd.NBD()
h.connect_unix(sock)
base, done, failed = 32 << 20, {}, None
restart = None
for i in range(100000):
    page = os.urandom(4096)
    try:
        h.pwrite(page, base + (i % 4096) * 4096)
        done[i % 4096] = page
    except nbd.Error as e:
        failed = e
        break
    if i == 200:
        restart = subprocess.Popen([uzram, "restart", "-u", sock], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT)
assert restart is not None and failed is not None, "the connection outlived the restart"
out = restart.communicate(timeout=120)[0].decode()
assert restart.returncode == 0, f"uzram restart: {out}"
assert "restarted" in out, out
h2 = nbd.NBD()
h2.connect_unix(sock)  # the same socket, kept across the exec
for index, page in done.items():
    assert h2.pread(4096, base + index * 4096) == page, f"page {index} written before the restart differs"
print(f"{len(done)} pages written before the restart read back", file=sys.stderr)
EOF
[[ ${SERVER_PID[r]} == "$pid" ]] && kill -0 "$pid" || fail "the server's process is gone"
same_back r "$WORK/data" || fail "data written before the restart differs after it"
"$UZRAM" restart r >/dev/null || fail "a second restart (named by its device)"
same_back r "$WORK/data" || fail "data after a second restart"
pass "uzram restart: same pid, the client reconnects, every byte and every acknowledged write back (twice)"

# --- the new program cannot read the state: refused, the old server keeps serving ---
version=$(get_version "$SHM/r.uzram")
set_version "$SHM/r.uzram" 99
if "$UZRAM" restart -S r >"$WORK/restart.out" 2>&1; then fail "restart with a state of version 99"; fi
grep -q "format version 99" "$WORK/restart.out" || fail "restart refusal says: $(cat "$WORK/restart.out")"
grep -q "restart refused, still serving" "$WORK/server-r.err" || fail "the server's log says nothing of the refusal"
kill -0 "$pid" || fail "the server stopped after a refused restart"
same_back r "$WORK/data" || fail "data after a refused restart"
set_version "$SHM/r.uzram" "$version"
pass "a state the program cannot read: restart refused with its version, the old server still serves every byte"

# --- a device without a state: restart refused ---
"$UZRAM" hot-add -S r scratch 16M --persist=no >/dev/null || fail "hot-add scratch"
if "$UZRAM" restart -S r >"$WORK/restart.out" 2>&1; then fail "restart with a device that has no state"; fi
grep -q "device scratch has no state" "$WORK/restart.out" || fail "says: $(cat "$WORK/restart.out")"
"$UZRAM" hot-remove scratch >/dev/null || fail "hot-remove scratch"
pass "a device without a state (hot-added): restart refused, naming it"

# --- server_mem_limit at run time on a server whose devices keep a state: refused as serve
# refuses --server-mem-limit with --persist (the device taken over would be outside it) ---
if "$UZRAM" attr r server_mem_limit 64M >"$WORK/attr.out" 2>&1; then fail "server_mem_limit 64M taken by a --persist server"; fi
grep -q "device r keeps its state (--persist), and --persist cannot keep a device in a --server-mem-limit group yet (serve refuses the two together): server_mem_limit stays 0" "$WORK/attr.out" ||
    fail "server_mem_limit refusal says: $(cat "$WORK/attr.out")"
[[ $("$UZRAM" attr r server_mem_limit) -eq 0 ]] || fail "server_mem_limit is $("$UZRAM" attr r server_mem_limit) after the refusal"
"$UZRAM" attr r server_mem_limit 0 || fail "server_mem_limit 0 (none, as it is) refused"
pass "server_mem_limit set at run time on a --persist server: refused as at start, still 0"

# --- the server ends during its restart: the new program exits as it starts, or is killed
# while it would take over. `uzram restart` says so at once (it waited its whole 60 s), and
# the state is taken over by the next server. The program is a copy, replaced by a script
# that answers state-check as uzram does and then fails as the server. ---
mkdir -p "$WORK/bin"
# restart_dies HOW: start server d from the copy, replace the copy (HOW: exit, or hang to be
# killed), run `uzram restart`; it must fail within 10 s saying the server ended.
restart_dies() {
    cp "$UZRAM" "$WORK/bin/uzram"
    UZRAM=$WORK/bin/uzram start_server d -s 16M --persist="$SHM/d.uzram"
    local pid=${SERVER_PID[d]} then took rc=0
    [[ $1 == exit ]] && then='exit 3' || then='exec sleep 100'
    printf '#!/bin/sh\n[ "$1" = state-check ] && exec "%s" "$@"\n%s\n' "$UZRAM" "$then" >"$WORK/bin/uzram.new"
    chmod +x "$WORK/bin/uzram.new"
    mv -f "$WORK/bin/uzram.new" "$WORK/bin/uzram"
    then=$(date +%s%N)
    timeout 100 "$UZRAM" restart -S d >"$WORK/restart.out" 2>&1 &
    local restart=$!
    if [[ $1 == killed ]]; then
        sleep 1
        [[ $(readlink "/proc/$pid/exe") == */sleep ]] || fail "$1: the server did not run the new program: $(cat "$WORK/restart.out")"
        kill -KILL "$pid"
    fi
    wait "$restart" || rc=$?
    took=$((($(date +%s%N) - then) / 1000000))
    [[ $rc -eq 1 ]] || fail "$1: uzram restart exited $rc: $(cat "$WORK/restart.out")"
    ((took < 10000)) || fail "$1: uzram restart took $took ms to see the server gone (60 s wait)"
    grep -q "the server (pid $pid) ended during its restart, before the new program answered" "$WORK/restart.out" ||
        fail "$1: uzram restart said: $(cat "$WORK/restart.out")"
    wait "$pid" 2>/dev/null || true
    unset "SERVER_PID[d]"
    rm -f "$(sock_of d)" "$(ctl_of d)"
    echo "$1: uzram restart failed after $took ms" >&2
}
head -c $((4 * MiB)) /dev/urandom >"$WORK/d-data"
cp "$UZRAM" "$WORK/bin/uzram"
UZRAM=$WORK/bin/uzram start_server d -s 16M --persist="$SHM/d.uzram"
nbdcopy "$WORK/d-data" "$(uri_of d)" || fail "nbdcopy into d"
stop_server d
restart_dies exit
restart_dies killed
start_server d -s 16M --persist="$SHM/d.uzram"
same_back d "$WORK/d-data" || fail "d's data after its restarts died"
stop_server d
rm -f "$SHM/d.uzram"
pass "the server ends during its restart (the new program exits, or is killed): uzram restart says so within 10 s, not 60; the state taken over after"

# --- a second server on the same PATH ---
refused "second server on one PATH" "is the state of a server that runs" -n r2 -s 64M --persist="$SHM/r.uzram"
pass "a second server on the same --persist PATH is refused"

# --- SIGKILL, then a new server on the same PATH ---
kill9 r
start_server r -s 64M --persist="$SHM/r.uzram"
same_back r "$WORK/data" || fail "data after SIGKILL and a new server"
pass "SIGKILL, then serve --persist=PATH again: every byte back"

# --- SIGTERM keeps the state too ---
stop_server r
grep -q "keeping in the states" "$WORK/server-r.err" || fail "the stop line: $(cat "$WORK/server-r.err")"
[[ -s $SHM/r.uzram ]] || fail "SIGTERM removed the state file"
start_server r -s 64M --persist="$SHM/r.uzram"
same_back r "$WORK/data" || fail "data after SIGTERM and a new server"
pass "SIGTERM stops and keeps the state; the next server serves every byte"

# --- a state of another version at start: refused, the file unchanged ---
kill9 r
set_version "$SHM/r.uzram" 99
head -c 65536 "$SHM/r.uzram" | sha256sum >"$WORK/before"
refused "version 99 at start" "format version 99" -n r -s 64M --persist="$SHM/r.uzram"
head -c 65536 "$SHM/r.uzram" | sha256sum | cmp -s - "$WORK/before" || fail "a refused start changed the state's header"
[[ $(get_version "$SHM/r.uzram") == 99 ]] || fail "version changed"
set_version "$SHM/r.uzram" "$version"
start_server r -s 64M --persist="$SHM/r.uzram"
same_back r "$WORK/data" || fail "data after a refused start"
pass "a state of another version at start: refused with the versions, nothing changed"

# --- a zstd dictionary trained from the pages (dict=auto), kept across SIGKILL ---
# (C headers: text ZDICT learns from; made-up word salad is too uniform for it)
find /usr/include -name '*.h' -exec cat {} + 2>/dev/null | head -c $((8 * MiB)) >"$WORK/text" || true
[[ $(stat -c %s "$WORK/text") == $((8 * MiB)) ]] || fail "8 MiB of C headers from /usr/include"
dict_args=(-s 8M --persist="$SHM/d.uzram" --recompress algo=zstd,dict=auto)
start_server d "${dict_args[@]}"
nbdcopy "$WORK/text" "$(uri_of d)" || fail "nbdcopy text"
"$UZRAM" attr d idle all >/dev/null || fail "idle all"
"$UZRAM" attr d recompress type=idle >/dev/null || fail "recompress pass"
[[ $(stat_json_field d recomp_pages) -gt 0 ]] || fail "the pass recompressed nothing"
"$UZRAM" attr d algorithm_params >"$WORK/params" || fail "algorithm_params"
grep -q "dict=auto (trained" "$WORK/params" || fail "no trained dictionary: $(cat "$WORK/params")"
dict_mem=$(stat_json_field d dict_mem)
kill9 d
start_server d "${dict_args[@]}"
same_back d "$WORK/text" || fail "pages recompressed with a trained dictionary, after SIGKILL"
"$UZRAM" attr d algorithm_params | cmp -s - "$WORK/params" ||
    fail "algorithm_params after SIGKILL: $("$UZRAM" attr d algorithm_params), was $(cat "$WORK/params")"
[[ $(stat_json_field d dict_mem) == "$dict_mem" ]] || fail "dict_mem $(stat_json_field d dict_mem), was $dict_mem"
stop_server d
pass "--recompress algo=zstd,dict=auto: pages recompressed with the trained dictionary read back after SIGKILL; the dictionary kept, not trained again"

# --- bundles (group=), kept across SIGKILL ---
bundle_args=(-s 8M --persist="$SHM/g.uzram" --recompress algo=zstd,group=8)
start_server g "${bundle_args[@]}"
nbdcopy "$WORK/text" "$(uri_of g)" || fail "nbdcopy text to g"
"$UZRAM" attr g idle all >/dev/null || fail "idle all (g)"
"$UZRAM" attr g recompress type=idle >/dev/null || fail "recompress pass (g)"
bundles=$(stat_json_field g bundles) bundled=$(stat_json_field g bundled_pages)
[[ $bundles -gt 0 ]] || fail "the pass made no bundle"
kill9 g
start_server g "${bundle_args[@]}"
same_back g "$WORK/text" || fail "pages in bundles, after SIGKILL"
[[ $(stat_json_field g bundles) == "$bundles" && $(stat_json_field g bundled_pages) == "$bundled" ]] ||
    fail "bundles $(stat_json_field g bundles), bundled_pages $(stat_json_field g bundled_pages); were $bundles, $bundled"
stop_server g
pass "--recompress algo=zstd,group=8: $bundled pages in $bundles bundles read back after SIGKILL, the bundles kept"

# --- a backing store: pages written back read back after SIGKILL; its file is the state's ---
back_args=(-s 8M --persist="$SHM/w.uzram" --backing-file "$WORK/w.back")
start_server w "${back_args[@]}"
nbdcopy "$WORK/text" "$(uri_of w)" || fail "nbdcopy text to w"
"$UZRAM" attr w idle all >/dev/null || fail "idle all (w)"
"$UZRAM" attr w writeback idle >/dev/null || fail "writeback pass"
bd_objects=$(stat_json_field w bd_objects)
[[ $bd_objects -gt 0 ]] || fail "the writeback pass wrote nothing back"
kill9 w
[[ $(stat -c %b "$WORK/w.back") -gt 0 ]] || fail "SIGKILL left an empty backing file"
start_server w "${back_args[@]}"
same_back w "$WORK/text" || fail "pages written back, after SIGKILL"
[[ $(stat_json_field w bd_objects) == "$bd_objects" ]] || fail "bd_objects $(stat_json_field w bd_objects), was $bd_objects"
[[ $(stat_json_field w bd_checksum_errors) == 0 ]] || fail "checksum errors after SIGKILL"
"$UZRAM" restart w >/dev/null || fail "a planned restart with a backing store"
same_back w "$WORK/text" || fail "pages written back, after a planned restart"
kill9 w
head -c 0 /dev/null >"$WORK/other.back"
chmod 600 "$WORK/other.back"
refused "another backing file" "give --backing-file" -n w -s 8M --persist="$SHM/w.uzram" --backing-file "$WORK/other.back"
refused "no backing file" "pages written back to" -n w -s 8M --persist="$SHM/w.uzram"
mv "$WORK/w.back" "$WORK/w.moved"
refused "backing file gone" "the backing file its pages were written back to is missing" "${back_args[@]}"
[[ ! -e $WORK/w.back ]] || fail "a refused start made the backing file again"
mv "$WORK/w.moved" "$WORK/w.back"
start_server w "${back_args[@]}"
same_back w "$WORK/text" || fail "pages written back, after refused starts"
stop_server w
pass "--backing-file: pages written back read back after SIGKILL and a planned restart (the state names its file; another file, none or a missing one refused)"

# --- dedup: the index is in the state ---
# 4 MiB of random pages written four times over: 1024 entries, three quarters of the bytes
# shared.
head -c $((4 * MiB)) /dev/urandom >"$WORK/quarter"
cat "$WORK/quarter" "$WORK/quarter" "$WORK/quarter" "$WORK/quarter" >"$WORK/dups"
start_server dd -s 64M --dedup --persist="$SHM/dd.uzram"
nbdcopy "$WORK/dups" "$(uri_of dd)" || fail "nbdcopy into the dedup device"
dedup_counts() { echo "$(stat_json_field dd dedup_entries) $(stat_json_field dd dup_data_size) $(stat_json_field dd meta_data_size)"; }
counts=$(dedup_counts)
[[ ${counts%% *} == 1024 ]] || fail "dedup device: entries, dup_data_size, meta_data_size: $counts"
"$UZRAM" restart dd >/dev/null || fail "planned restart of the dedup device"
same_back dd "$WORK/dups" || fail "dedup device: data after a planned restart"
[[ $(dedup_counts) == "$counts" ]] || fail "dedup counts $counts, after a planned restart $(dedup_counts)"
kill9 dd
start_server dd -s 64M --dedup --persist="$SHM/dd.uzram"
same_back dd "$WORK/dups" || fail "dedup device: data after SIGKILL"
[[ $(dedup_counts) == "$counts" ]] || fail "dedup counts $counts, after SIGKILL $(dedup_counts)"
kill9 dd
refused "without the state's dedup" "holds a device with dedup on, not off as asked: give --dedup=yes" \
    -n dd -s 64M --persist="$SHM/dd.uzram"
pass "--dedup: every byte and dedup_entries, dup_data_size, meta_data_size back after a planned restart and SIGKILL ($counts); without --dedup refused"

# --- other settings than the state's, and a file that is not a state ---
kill9 r
refused "another size" "holds a 64M lz4 device, not 128M lz4" -n r -s 128M --persist="$SHM/r.uzram"
refused "another algorithm" "--size 64M --algorithm lz4" -n r -s 64M -a zstd --persist="$SHM/r.uzram"
(umask 077 && head -c 8192 /dev/urandom >"$SHM/junk") # the server's own file, for it alone
cp "$SHM/junk" "$WORK/junk"
refused "not a state" "is not a uzram state" -n j -s 64M --persist="$SHM/junk"
cmp -s "$SHM/junk" "$WORK/junk" || fail "a refused start changed a file that is not a state"
pass "another size or algorithm than the state's, or a file that is not a state: refused, untouched"

# --- bad combinations ---
refused "no PATH, no manager" "give --persist=PATH" -n b -s 16M --persist
refused "relative PATH" "give an absolute path" -n b -s 16M --persist=b.uzram
refused "with a group limit" "--server-mem-limit" -n b -s 16M --server-mem-limit 64M --persist="$SHM/b.uzram"
# A swap device's state must be where its pages are never swapped out (onto the device itself,
# while no server runs: tests/vm/ublk-restart.sh swap) and have room to grow to its limit.
if grep -qE '^[^ ]+ /dev/shm tmpfs [^ ]*noswap' /proc/mounts; then
    skip_check "/dev/shm is mounted noswap here: no swappable tmpfs to refuse"
else
    refused "swap state on a swappable tmpfs" "is a tmpfs without noswap: put the state on one with it" \
        -n b -s 16M --swap --mem-limit 8M --persist="$SHM/b.uzram"
fi
NOTIFY_SOCKET=$WORK/no-manager refused "swap state in a memfd" "keeps the state of swap device b in a memfd" \
    -n b -s 16M --swap --mem-limit 8M --persist
SMALL=$WORK/noswap-small
mkdir -p "$SMALL"
if mount -t tmpfs -o noswap,size=8M,mode=0700 uzram-test "$SMALL" 2>/dev/null; then
    at_exit "umount -l '$SMALL'"
    refused "swap state on too small a tmpfs" "give the tmpfs size=9M or more" \
        -n b -s 16M --swap --mem-limit 8M --persist="$SMALL/b.uzram"
    [[ ! -e $SMALL/b.uzram ]] || fail "a refused start left $SMALL/b.uzram"
    # Right place, big enough: taken (it serves, or, where this machine does not give --swap
    # its privileges, fails on those alone; swap on it runs in the VM: ublk-restart.sh swap).
    mkdir -p "$WORK/noswap-big"
    mount -t tmpfs -o noswap,size=64M,mode=0700 uzram-test "$WORK/noswap-big" ||
        fail "mount a second noswap tmpfs"
    at_exit "umount -l '$WORK/noswap-big'"
    set +e
    timeout 5 "$UZRAM" serve -n b -s 16M --swap --mem-limit 8M --persist="$WORK/noswap-big/b.uzram" \
        -u "$WORK/b.sock" >"$WORK/big.out" 2>"$WORK/big.err"
    status=$?
    set -e
    if ((status == 124)); then
        [[ -s $WORK/noswap-big/b.uzram ]] || fail "a swap server on a noswap state made no state"
    else
        grep -q -- "--swap: " "$WORK/big.err" && ! grep -q -- "--persist" "$WORK/big.err" ||
            fail "swap state where it belongs: said '$(cat "$WORK/big.err")'"
    fi
else
    skip_check "no noswap tmpfs can be mounted here (not root, or Linux before 6.4): its size check untested"
fi
refused "two devices, one PATH" "both keep their state in" --device x:16M --device y:16M --persist="$SHM/b.uzram"
if [[ $(stat -f -c %T "$WORK") != tmpfs ]]; then
    refused "not on tmpfs" "is not on tmpfs" -n b -s 16M --persist="$WORK/b.uzram"
    [[ ! -e $WORK/b.uzram ]] || fail "a refused PATH was left behind"
else
    skip_check "$WORK is on tmpfs: no file system to refuse here"
fi
[[ ! -e $SHM/b.uzram ]] || fail "a refused start left $SHM/b.uzram"
pass "bad combinations refused with what to write, nothing left behind"

# --- systemd's descriptor store: the memfd goes to the manager, comes back in LISTEN_FDS ---
$PY - "$UZRAM" "$WORK" "$XDG_RUNTIME_DIR/uzram" <<'EOF' || fail "descriptor store"
import array, os, signal, socket, subprocess, sys, time, nbd
uzram, work, rundir = sys.argv[1:]
manager = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
address = f"{work}/notify.sock"
manager.bind(address)
manager.settimeout(20)
data = os.urandom(4 << 20)

def messages(until):
    """Datagrams until one holds the line `until`; the descriptors sent with them."""
    seen, fds = [], []
    while True:
        msg, ancillary, _, _ = manager.recvmsg(4096, socket.CMSG_SPACE(4 * 16))
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += array.array("i", payload[:len(payload) - len(payload) % 4]).tolist()
        lines = msg.decode().split("\n")
        seen.append((lines, list(fds)))
        if until in lines:
            return seen, fds

def serve(extra_env, state=None):
    """The server, as a manager starts it: with `state` on descriptor 3 (LISTEN_PID its pid)."""
    err = open(f"{work}/server-fs.err", "a")
    script = f'exec 3<&{state} {state}<&-; LISTEN_PID=$$ exec "$0" "$@"' if state else 'exec "$0" "$@"'
    return subprocess.Popen(["sh", "-c", script, uzram, "serve", "-n", "fs", "-s", "32M", "--persist"],
                            env=dict(os.environ, NOTIFY_SOCKET=address, **extra_env),
                            stdout=subprocess.DEVNULL, stderr=err, pass_fds=(state,) if state else ())

server = serve({})
seen, fds = messages("READY=1")
stored = [(lines, f) for lines, f in seen if "FDSTORE=1" in lines]
assert len(stored) == 1 and "FDNAME=state-fs" in stored[0][0] and len(fds) == 1, seen
state = fds[0]
h = nbd.NBD()
h.connect_unix(f"{rundir}/fs.sock")
h.pwrite(data, 0)
h.flush()
h.shutdown()
server.kill()  # a crash: only the manager's copy of the state is left
server.wait()
server = serve({"LISTEN_FDS": "1", "LISTEN_FDNAMES": "state-fs"}, state)
messages("READY=1")
h = nbd.NBD()
h.connect_unix(f"{rundir}/fs.sock")
assert h.pread(len(data), 0) == data, "data after a crash, from the descriptor store"
h.shutdown()
# A planned restart under the manager: RELOADING=1, then the new program stores the state again
# (the manager keeps one copy of a descriptor) and says READY=1.
out = subprocess.run([uzram, "restart", "-S", "fs"], capture_output=True, text=True, timeout=120)
assert out.returncode == 0, out.stderr
seen, fds = messages("READY=1")
lines = [l for batch, _ in seen for l in batch]
assert "RELOADING=1" in lines and "FDSTORE=1" in lines and "FDNAME=state-fs" in lines, seen
h = nbd.NBD()
h.connect_unix(f"{rundir}/fs.sock")
assert h.pread(len(data), 0) == data, "data after a planned restart under a service manager"
h.shutdown()
server.send_signal(signal.SIGTERM)
assert server.wait(timeout=30) == 0
EOF
pass "descriptor store: FDSTORE=1 FDNAME=state-NAME with the memfd; handed back after SIGKILL: every byte; planned restart under the manager"
