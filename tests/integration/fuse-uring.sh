#!/usr/bin/env bash
# fuse-uring.sh - integration test of FUSE over io_uring (Linux 6.14+): with the fuse module's
# enable_uring on, the FUSE file of `uzram attach --via loop` is served over io_uring rings.
# fio's random writes and reads through the loop device verify (crc32c), requests larger than
# a ring entry's buffer arrive split and verify too, `uzram status` counts the ring's requests,
# an ext4 made on the device checks clean, detach and SIGTERM (idle, and under a mount) end
# as over /dev/fuse; with enable_uring off the same server uses /dev/fuse. The parameter is
# put back as it was.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

PARAM=/sys/module/fuse/parameters/enable_uring
need_tools fio losetup mount umount mkfs.ext4 e2fsck mountpoint
[[ -c /dev/fuse ]] || skip "/dev/fuse is not available"
[[ $(id -u) -eq 0 ]] || skip "loop devices, mount and $PARAM need root"
[[ -e /dev/loop-control ]] || skip "no loop devices (/dev/loop-control missing)"
[[ -w $PARAM ]] || skip "this kernel has no FUSE over io_uring ($PARAM: Linux 6.14+ with CONFIG_FUSE_IO_URING)"
lib_init

OLD=$(cat "$PARAM")
at_exit "echo $OLD >$PARAM"
MNT=$WORK/mnt
mkdir "$MNT"
at_exit 'for n in ring plain busy; do "$UZRAM" detach "$n"; done'
at_exit 'mountpoint -q "$MNT" && { umount "$MNT" || umount -l "$MNT"; }'

status_field() { # NAME KEY
    "$UZRAM" status --json "$1" | $PY -c 'import json, sys; print(json.load(sys.stdin)[0][sys.argv[1]])' "$2"
}
# The rings start once the kernel has taken the INIT reply: wait for the server to say so.
wait_rings() { # NAME
    for _ in $(seq 100); do
        grep -q "FUSE requests over io_uring" "$WORK/server-$1.err" && return 0
        sleep 0.05
    done
    fail "server $1 did not serve over io_uring: $(cat "$WORK/server-$1.err")"
}
# Writes that do not cover whole sectors, through the FUSE file itself (the loop device never
# sends them): the server reads the sectors around, patches and writes back; the bytes read
# back must be the model's.
unaligned_check() { # FILE LABEL
    $PY - "$1" <<'EOF' || fail "$2: unaligned writes through the FUSE file read back wrong"
import os, random, sys
path = sys.argv[1]
rng = random.Random(7)
model = bytearray(1 << 20)
fd = os.open(path, os.O_RDWR)
os.pwrite(fd, bytes(model), 0)
for _ in range(300):
    off, n = rng.randrange(0, len(model) - 70000), rng.choice([1, 7, 100, 511, 513, 4095, 4097, 65537])
    data = rng.randbytes(n)
    os.pwrite(fd, data, off)
    model[off:off + n] = data
got = os.pread(fd, len(model), 0)
os.close(fd)
sys.exit(0 if got == bytes(model) else 1)
EOF
}
fio_verify() { # DEV LABEL [fio options...]: write, then read back and verify every block
    local dev=$1 label=$2
    shift 2
    fio --name="$label" --filename="$dev" --ioengine=libaio --direct=1 --size=64M \
        --verify=crc32c --do_verify=1 --verify_fatal=1 --buffer_compress_percentage=50 \
        --refill_buffers --verify_state_save=0 --output="$WORK/fio-$label.out" "$@" ||
        fail "fio $label on $dev: $(tail -5 "$WORK/fio-$label.out")"
    grep -q "err= 0" "$WORK/fio-$label.out" || fail "fio $label reported errors"
}

# --- over the rings: data verified, status counts the requests ---
echo Y >"$PARAM"
start_server ring -s 256M
DEV=$("$UZRAM" attach --via loop ring 2>"$WORK/attach.err") || fail "attach --via loop: $(cat "$WORK/attach.err")"
wait_rings ring
before=$(status_field ring fuse_uring_requests)
fio_verify "$DEV" rand4k --rw=randwrite --bs=4k --iodepth=16
after=$(status_field ring fuse_uring_requests)
# 16384 writes and 16384 verifying reads, all through the rings.
[[ $((after - before)) -ge 32768 ]] || fail "status counts $((after - before)) ring requests for 32768 fio requests"
pass "FUSE over io_uring: 64 MiB of random 4 KiB writes verified through $DEV; status counts $((after - before)) ring requests"
fio_verify "$DEV" seq1m --rw=write --bs=1M --iodepth=4 --offset=128M
pass "1 MiB requests (split at the ring entries' 128 KiB) verified"
unaligned_check "$XDG_RUNTIME_DIR/uzram/ring.disk" ring
pass "300 writes not on sector boundaries, through the FUSE file over the rings, read back as written"

# --- a file system on it ---
mkfs.ext4 -q -F "$DEV" >/dev/null 2>&1 || fail "mkfs.ext4 on $DEV"
mount -t ext4 "$DEV" "$MNT" || fail "mount $DEV"
cp -a /usr/include/linux "$MNT/" || fail "copy into the file system"
umount "$MNT"
e2fsck -fn "$DEV" >"$WORK/fsck.out" 2>&1 || fail "e2fsck: $(tail -5 "$WORK/fsck.out")"
mount -t ext4 "$DEV" "$MNT" || fail "mount $DEV again"
diff -r /usr/include/linux "$MNT/linux" >/dev/null || fail "the copy differs after a remount"
umount "$MNT"
pass "ext4 over the rings: copied, e2fsck clean, equal after a remount"

"$UZRAM" detach ring >/dev/null || fail "detach ring"
stop_server ring
pass "detach and SIGTERM over the rings: the server exited 0"

# --- SIGTERM under a mount: the device stays, fails its I/O, goes with its user ---
start_server busy -s 64M
DEV=$("$UZRAM" attach --via loop busy) || fail "attach busy"
wait_rings busy
mkfs.ext4 -q -F "$DEV" >/dev/null 2>&1 || fail "mkfs.ext4 on $DEV"
mount -t ext4 "$DEV" "$MNT" || fail "mount $DEV"
stop_server busy
grep -q "$DEV stays attached" "$WORK/server-busy.err" ||
    fail "the server did not say that $DEV stays: $(cat "$WORK/server-busy.err")"
if [[ $(timeout 20 dd if="$DEV" bs=4k count=1 iflag=direct 2>/dev/null | wc -c) -gt 0 ]]; then
    fail "$DEV still reads data after its server stopped"
fi
umount "$MNT" 2>/dev/null || umount -l "$MNT"
pass "SIGTERM with $DEV mounted over the rings: the server exited 0, I/O on $DEV fails"

# --- enable_uring off: /dev/fuse, nothing counted ---
echo N >"$PARAM"
start_server plain -s 64M
DEV=$("$UZRAM" attach --via loop plain) || fail "attach plain"
fio_verify "$DEV" plain --rw=randwrite --bs=4k --iodepth=16 --size=16M
unaligned_check "$XDG_RUNTIME_DIR/uzram/plain.disk" plain
[[ $(status_field plain fuse_uring_requests) == 0 ]] || fail "requests counted over io_uring with enable_uring off"
grep -q "FUSE requests over io_uring" "$WORK/server-plain.err" && fail "the server says io_uring with enable_uring off"
grep -q "FUSE requests go through /dev/fuse; FUSE over io_uring takes less CPU: echo Y > $PARAM" \
    "$WORK/server-plain.err" || fail "the server's log does not say how to turn io_uring on"
"$UZRAM" detach plain >/dev/null || fail "detach plain"
stop_server plain
pass "enable_uring off: the same server serves /dev/fuse, verified, and its log says how to turn io_uring on"
echo "PASS: fuse-uring.sh"
