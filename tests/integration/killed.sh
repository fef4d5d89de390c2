#!/usr/bin/env bash
# killed.sh - a server killed (SIGKILL) while its device is attached (issue 23): the loop
# device clears itself once nothing uses it (autoclear: at once when unmounted, at the umount
# when mounted), a restarted server's attach takes away the dead FUSE mount and works, and
# `uzram detach NAME` with no server cleans up the dead mount, NAME.disk and the stale
# sockets, or says what is still mounted. Each check failed against the code before.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

need_tools losetup mount umount mkfs.ext4 mountpoint
[[ -c /dev/fuse ]] || skip "/dev/fuse is not available"
[[ $(id -u) -eq 0 ]] || skip "loop devices and mount need root"
[[ -e /dev/loop-control ]] || skip "no loop devices (/dev/loop-control missing)"
lib_init

MNT=$WORK/mnt
mkdir "$MNT"
DIR=$XDG_RUNTIME_DIR/uzram
FILE=$DIR/k.disk
at_exit 'mountpoint -q "$MNT" && umount -l "$MNT"'
at_exit 'for l in $(losetup -n -O NAME -j "$FILE" 2>/dev/null); do losetup -d "$l"; done'
at_exit 'umount -l "$FILE"'

kill9() { # NAME: SIGKILL the server and wait for it
    local pid=${SERVER_PID[$1]}
    kill -KILL "$pid"
    wait "$pid" 2>/dev/null || true
    unset "SERVER_PID[$1]"
}
bound() { losetup -n -O NAME -j "$FILE" 2>/dev/null | head -1; } # the loop device on k.disk
# gone DEVICE: the loop device lets go of its file within 5 s
gone() {
    for _ in $(seq 50); do
        [[ -z $(losetup -n -O BACK-FILE "$1" 2>/dev/null) ]] && return 0
        sleep 0.1
    done
    return 1
}
dead_mount() { grep -q " $FILE fuse.uzram " <(sed 's/ - / /' /proc/self/mountinfo | awk '{print " " $5 " " $7 " "}'); }

# --- killed while mounted: I/O fails, the loop device goes with the umount ---
start_server k -s 128M
DEV=$("$UZRAM" attach --via loop k 2>"$WORK/attach.err") || fail "attach: $(cat "$WORK/attach.err")"
[[ $(losetup -n -O AUTOCLEAR "$DEV" | tr -d ' ') == 1 ]] || fail "$DEV is not set to clear itself (autoclear)"
mkfs.ext4 -q -F "$DEV" >/dev/null 2>&1 || fail "mkfs.ext4"
mount -t ext4 "$DEV" "$MNT" 2>"$WORK/mount.err" || skip "cannot mount ext4 here: $(cat "$WORK/mount.err")"
echo data >"$MNT/file"
sync
kill9 k
if dd if="$DEV" of=/dev/null bs=4k count=1 iflag=direct 2>/dev/null; then fail "I/O on $DEV works after the server was killed"; fi
dead_mount || fail "no dead FUSE mount on $FILE after the kill"
if "$UZRAM" detach k 2>"$WORK/detach.err"; then fail "detach with $DEV still mounted succeeded"; fi
grep -q "$DEV is mounted on $MNT; unmount it first: umount $MNT (its data went with the server" "$WORK/detach.err" ||
    fail "detach with the node mounted said: $(cat "$WORK/detach.err")"
umount "$MNT" 2>/dev/null || umount -l "$MNT"
gone "$DEV" || fail "$DEV still has its file after the umount: $(losetup "$DEV")"
pass "killed while mounted: I/O on $DEV fails, detach names the mount ($(tail -1 "$WORK/detach.err")), $DEV goes with the umount (autoclear)"

# --- a restarted server's attach takes the dead mount away ---
dead_mount || fail "the dead FUSE mount went away by itself"
start_server k -s 128M
DEV=$("$UZRAM" attach --via loop k 2>"$WORK/attach.err") || fail "attach by a restarted server: $(cat "$WORK/attach.err")"
grep -q "unmounted the dead FUSE mount a stopped server left" "$WORK/server-k.err" ||
    fail "the restarted server did not say it took the dead mount away: $(cat "$WORK/server-k.err")"
head -c $MiB /dev/urandom >"$WORK/page"
dd if="$WORK/page" of="$DEV" bs=1M oflag=direct status=none || fail "writing to the new $DEV"
cmp -n $MiB "$WORK/page" "$DEV" || fail "the new $DEV does not read back"
pass "a restarted server's attach takes the dead mount away and works ($DEV)"

# --- killed while attached, unused: the loop device goes at once; detach cleans the rest ---
kill9 k
gone "$DEV" || fail "$DEV (unused) still has its file after the server was killed"
[[ -S $DIR/k.sock && -S $DIR/k.ctl ]] || fail "the killed server's sockets are not there to clean"
"$UZRAM" detach k 2>"$WORK/detach.err" || fail "detach of a killed server's leftovers: $(cat "$WORK/detach.err")"
cp "$WORK/detach.err" "$WORK/cleaned"
grep -q "no server serves k; cleaned up what a stopped one left: the dead FUSE mount on $FILE unmounted; $FILE removed; stale socket k.ctl removed; stale socket k.sock removed\|no server serves k; cleaned up what a stopped one left: the dead FUSE mount on $FILE unmounted; $FILE removed; stale socket k.sock removed; stale socket k.ctl removed" \
    "$WORK/detach.err" || fail "detach said: $(cat "$WORK/detach.err")"
dead_mount && fail "the dead FUSE mount is still there"
[[ ! -e $FILE && ! -e $DIR/k.sock && ! -e $DIR/k.ctl ]] || fail "left: $(ls -la "$DIR")"
if "$UZRAM" detach k 2>"$WORK/detach.err"; then fail "a second detach with nothing left succeeded"; fi
grep -q "no device k is running" "$WORK/detach.err" || fail "detach with nothing left said: $(cat "$WORK/detach.err")"
start_server k -s 16M
DEV=$("$UZRAM" attach --via loop k) || fail "attach after the clean-up"
"$UZRAM" detach k || fail "detach"
stop_server k
pass "killed while attached and unused: the loop device went at once; detach cleaned up ($(cat "$WORK/cleaned")); a new server attaches"

echo "PASS: killed.sh"
