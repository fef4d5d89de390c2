#!/usr/bin/env bash
# attach.sh - integration test of `uzram attach` / `uzram detach`: the server shows its disk as
# a FUSE file with a loop device on it (and, where the kernel has nbd, nbd-client on its
# socket); mkfs.ext4, mount, copy, detach refused while mounted, fstrim reaching the server,
# data equal after a detach and a new attach; what a SIGTERM does to an attached device.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

need_tools losetup mount umount mkfs.ext4 e2fsck fstrim mountpoint
[[ -c /dev/fuse ]] || skip "/dev/fuse is not available"
[[ $(id -u) -eq 0 ]] || skip "loop devices and mount need root"
[[ -e /dev/loop-control ]] || skip "no loop devices (/dev/loop-control missing)"
lib_init

# The tree to copy: real files of many sizes, ~20-100 MB.
SRC=
for dir in /usr/include /usr/share/doc /usr/lib/python3; do
    [[ -d $dir ]] || continue
    kb=$(du -sk "$dir" | cut -f1)
    if [[ $kb -ge 20000 ]]; then SRC=$dir; break; fi
done
[[ -n $SRC ]] || skip "no directory tree of at least 20 MB to copy (tried /usr/include, /usr/share/doc)"

MNT=$WORK/mnt
mkdir "$MNT"
# Undo everything even after a failure: the filesystem first, then the device.
at_exit 'for n in att gone busy nbd; do "$UZRAM" detach "$n"; done'
at_exit 'mountpoint -q "$MNT" && { umount "$MNT" || umount -l "$MNT"; }'

attached_of() { # NAME: the ATTACHED value of `uzram status --json`, "null" when none
    "$UZRAM" status --json "$1" | $PY -c 'import json, sys; print(json.load(sys.stdin)[0]["attached"])'
}
# The loop device whose backing file is FILE, if any.
loop_of_file() { losetup -n -O NAME -j "$1" 2>/dev/null | head -1; }

# The loop device of a just-unmounted filesystem, free to be claimed (O_EXCL). Another test
# that made a mount namespace (unshare -m) while ours was mounted keeps a copy of the mount,
# and the device busy, until that namespace ends: wait for that, as a user would.
wait_unclaimed() {
    $PY -c '
import os, sys, time
for _ in range(600):
    try:
        os.close(os.open(sys.argv[1], os.O_RDONLY | os.O_EXCL))
        sys.exit(0)
    except OSError:
        time.sleep(0.1)
sys.exit(1)' "$1" || fail "$1 is still claimed 60 s after its filesystem was unmounted"
}

start_server att -s 512M
FILE=$XDG_RUNTIME_DIR/uzram/att.disk

# --- attach --swap without ublk: refused, saying why and what to do (uzram(1), SWAP) ---
if [[ -e /dev/ublk-control ]] || modprobe -n -q ublk_drv 2>/dev/null; then
    skip_check "attach --swap's refusal on a kernel without ublk: this kernel has ublk"
else
    out=$("$UZRAM" attach --swap att 2>&1) && fail "attach --swap without ublk attached: $out"
    [[ $out == *"this kernel has no ublk driver"*"CONFIG_BLK_DEV_UBLK"*"Debian 12's backports"*"fails under memory pressure"*"kernel zram"* ]] ||
        fail "attach --swap without ublk said: $out"
    [[ $(attached_of att) == - ]] || fail "the refused attach --swap left att attached"
    pass "attach --swap on a kernel without ublk is refused: ${out:0:90}..."
fi

# --- attach through FUSE + loop ---
DEV=$("$UZRAM" attach --via loop att 2>"$WORK/attach.err") || fail "attach --via loop: $(cat "$WORK/attach.err")"
[[ $DEV =~ ^/dev/loop[0-9]+$ ]] || fail "attach printed '$DEV', not a /dev/loopN path"
[[ -b $DEV ]] || fail "$DEV is not a block device"
[[ $(blockdev --getsize64 "$DEV") -eq $((512 * MiB)) ]] || fail "$DEV is not 512 MiB"
[[ $(losetup -n -O DIO "$DEV" | tr -d ' ') == 1 ]] || fail "$DEV does not use direct I/O"
[[ $(losetup -n -O LOG-SEC "$DEV" | tr -d ' ') == 4096 ]] || fail "$DEV does not have 4 KiB blocks"
[[ $(loop_of_file "$FILE") == "$DEV" ]] || fail "$DEV is not backed by $FILE"
[[ $(stat -f -c %T "$FILE") == fuse* ]] || fail "$FILE is not a FUSE mount ($(stat -f -c %T "$FILE"))"
[[ $(attached_of att) == "$DEV" ]] || fail "status does not show $DEV as attached: $(attached_of att)"
"$UZRAM" status | grep -q "^att .* $DEV\$" || fail "the status table does not show $DEV"
pass "attach --via loop: $DEV, 512 MiB, direct I/O, 4 KiB blocks, on the FUSE file $FILE; status shows it"

if "$UZRAM" attach --via loop att 2>"$WORK/again.err"; then fail "a second attach succeeded"; fi
grep -q "already attached as $DEV" "$WORK/again.err" || fail "second attach: $(cat "$WORK/again.err")"
if "$UZRAM" attach --swap --via loop att 2>"$WORK/swap.err"; then fail "attach --swap succeeded on a server without --swap"; fi
pass "a second attach is refused ($(cat "$WORK/again.err"))"

mkfs.ext4 -q -F "$DEV" >"$WORK/mkfs.log" 2>&1 || fail "mkfs.ext4 on $DEV: $(cat "$WORK/mkfs.log")"
mount -t ext4 "$DEV" "$MNT" 2>"$WORK/mount.err" || skip "cannot mount ext4 here: $(cat "$WORK/mount.err")"
cp -a "$SRC" "$MNT/tree" || fail "copying $SRC into the filesystem"
{ yes 'uzram keeps pages compressed in RAM; this line repeats.' | head -c $((8 * MiB)) >"$MNT/text"; } || true
head -c $((8 * MiB)) /dev/urandom >"$MNT/random"
cp "$MNT/random" "$WORK/random.ref"
sync
pass "mkfs.ext4, mount, $SRC copied in ($(du -sh "$SRC" | cut -f1))"

# --- detach refused while mounted, and while open in a program ---
if "$UZRAM" detach att 2>"$WORK/detach.err"; then fail "detach succeeded while $DEV is mounted"; fi
grep -q "$DEV is mounted on $MNT; unmount it first: umount $MNT" "$WORK/detach.err" ||
    fail "detach while mounted said: $(cat "$WORK/detach.err")"
[[ $(attached_of att) == "$DEV" && $(loop_of_file "$FILE") == "$DEV" ]] ||
    fail "the refused detach changed the attachment"
cmp -s "$WORK/random.ref" "$MNT/random" || fail "the file changed after the refused detach"
pass "detach refused while mounted: $(cat "$WORK/detach.err")"

umount "$MNT" || fail "umount"
wait_unclaimed "$DEV"
sleep 30 <"$DEV" &
holder=$!
# the child opens the device and becomes sleep after the fork: wait for both (else detach may
# find nothing open yet, as a loaded make check once did)
for _ in $(seq 200); do
    [[ $(cat "/proc/$holder/comm" 2>/dev/null) == sleep &&
        $(readlink "/proc/$holder/fd/0" 2>/dev/null) == "$DEV" ]] && break
    sleep 0.05
done
[[ $(readlink "/proc/$holder/fd/0" 2>/dev/null) == "$DEV" ]] || fail "the holder did not open $DEV in 10 s"
if "$UZRAM" detach att 2>"$WORK/detach.err"; then fail "detach succeeded while $DEV is open in a program"; fi
kill "$holder"
wait "$holder" 2>/dev/null || true
grep -q "$DEV is open in process $holder (sleep)" "$WORK/detach.err" ||
    fail "detach while open said: $(cat "$WORK/detach.err")"
pass "detach refused while open in a program: $(cat "$WORK/detach.err")"

e2fsck -fn "$DEV" >"$WORK/fsck.log" 2>&1 || fail "e2fsck -fn is not clean: $(tail -20 "$WORK/fsck.log")"
"$UZRAM" detach att 2>"$WORK/detach.err" || fail "detach after umount: $(cat "$WORK/detach.err")"
[[ -z $(loop_of_file "$FILE") ]] || fail "a loop device still has $FILE after detach"
grep -q " $FILE " /proc/self/mountinfo && fail "$FILE is still mounted after detach"
[[ ! -e $FILE ]] || fail "detach left $FILE behind"
[[ $(attached_of att) == - ]] || fail "status still shows an attached device: $(attached_of att)"
pass "umount, e2fsck clean, detach: loop device gone, FUSE file unmounted and removed, status clear"

# --- a new attach sees the same data: nothing was kept in a page cache on this side ---
DEV=$("$UZRAM" attach --via loop att) || fail "attach again"
mount -t ext4 "$DEV" "$MNT" || fail "mounting after the new attach"
diff -r --no-dereference "$SRC" "$MNT/tree" >"$WORK/diff.log" 2>&1 ||
    fail "diff -r after detach and attach: $(head -20 "$WORK/diff.log")"
cmp -s "$WORK/random.ref" "$MNT/random" || fail "random file differs after detach and attach"
[[ $(sha256sum <"$MNT/text" | cut -d' ' -f1) == $({ yes 'uzram keeps pages compressed in RAM; this line repeats.' | head -c $((8 * MiB)); } | sha256sum | cut -d' ' -f1) ]] ||
    fail "text file differs after detach and attach"
pass "attached again as $DEV: tree and files equal byte for byte"

# --- rm + fstrim reach the server as discards ---
before=$(mm_stat_field att 0)
rm -rf "$MNT/tree" "$MNT/random"
sync
fstrim -v "$MNT" >"$WORK/fstrim.log" 2>&1 || fail "fstrim: $(cat "$WORK/fstrim.log")"
after=$(mm_stat_field att 0)
freed=$((before - after))
[[ $freed -ge $((16 * MiB)) ]] ||
    fail "orig_data_size went from $before to $after after rm + fstrim: discards did not reach the server"
pass "rm + fstrim freed $((freed / MiB)) MiB on the server ($(cat "$WORK/fstrim.log"))"
umount "$MNT" || fail "final umount"
wait_unclaimed "$DEV"
"$UZRAM" detach att || fail "final detach"
stop_server att
[[ ! -e $FILE ]] || fail "the server left $FILE behind"
pass "detached and stopped cleanly"

# --- SIGTERM with an unused attached device: detached on the way out ---
start_server gone -s 64M
DEV=$("$UZRAM" attach --via loop gone) || fail "attach gone"
stop_server gone
grep -q "$DEV detached" "$WORK/server-gone.err" || fail "the server did not say it detached $DEV"
[[ -z $(loop_of_file "$XDG_RUNTIME_DIR/uzram/gone.disk") ]] || fail "$DEV still attached after the server stopped"
pass "SIGTERM with $DEV attached and unused: detached, server exited 0"

# --- SIGTERM with a mounted attached device: it stays, fails its I/O, goes with its user ---
start_server busy -s 64M
DEV=$("$UZRAM" attach --via loop busy) || fail "attach busy"
mkfs.ext4 -q -F "$DEV" >/dev/null 2>&1 || fail "mkfs.ext4 on $DEV"
mount -t ext4 "$DEV" "$MNT" || fail "mount $DEV"
stop_server busy
grep -q "$DEV stays attached: $DEV is mounted on $MNT" "$WORK/server-busy.err" ||
    fail "the server did not say that $DEV stays: $(cat "$WORK/server-busy.err")"
if dd if="$DEV" of=/dev/null bs=4k count=1 iflag=direct 2>/dev/null && [[ $(dd if="$DEV" bs=4k count=1 iflag=direct 2>/dev/null | wc -c) -gt 0 ]]; then
    fail "$DEV still reads data after its server stopped"
fi
umount "$MNT" 2>/dev/null || umount -l "$MNT"
# Gone once its last user let go: no longer configured, or (taken at once by someone else)
# with another backing file than ours, which the lazy unmount turned into "/".
still_ours() {
    local back
    back=$(losetup -n -O BACK-FILE "$DEV" 2>/dev/null) || return 1
    [[ $back == / || $back == "$XDG_RUNTIME_DIR/uzram/busy.disk" ]]
}
for _ in $(seq 50); do
    still_ours || break
    sleep 0.1
done
still_ours && fail "$DEV is still attached 5 s after its last user let go"
pass "SIGTERM with $DEV mounted: the server exited 0 and said so, I/O on $DEV fails, it went away after umount"

# --- the kernel's ublk driver: refused with what to do where the kernel has none (the VM
# tests attach through it for real: tests/vm/swap.sh, oracle.sh) ---
if [[ ! -e /dev/ublk-control ]] && ! modprobe -q ublk_drv 2>/dev/null; then
    start_server ublk -s 64M
    if "$UZRAM" attach --via ublk ublk 2>"$WORK/ublk.err"; then fail "attach --via ublk succeeded without the ublk driver"; fi
    grep -q "the kernel has no ublk driver (ublk_drv, CONFIG_BLK_DEV_UBLK: Linux 6.0 and later where the distribution builds it; modprobe ublk_drv); or use --via nbd or --via loop" "$WORK/ublk.err" ||
        fail "attach --via ublk without the driver said: $(cat "$WORK/ublk.err")"
    [[ $("$UZRAM" status -n --raw -o attached ublk) == - ]] || fail "a refused ublk attach left a node in status"
    stop_server ublk
    pass "without the ublk driver, attach --via ublk says so: $(cat "$WORK/ublk.err")"
fi

# --- the kernel's NBD client, where the kernel has it ---
start_server nbd -s 256M
if [[ ! -e /sys/module/nbd ]] && ! modprobe -q nbd 2>/dev/null; then
    if "$UZRAM" attach --via nbd nbd 2>"$WORK/nbd.err"; then fail "attach --via nbd succeeded without the nbd module"; fi
    grep -q "the kernel has no NBD client (nbd, CONFIG_BLK_DEV_NBD: modprobe nbd); or use --via loop" "$WORK/nbd.err" ||
        fail "attach --via nbd without the module said: $(cat "$WORK/nbd.err")"
    pass "without the nbd module, attach --via nbd says so: $(cat "$WORK/nbd.err")"
    skip_check "attach --via nbd: the kernel has no nbd module here (modprobe nbd failed); its nbd-client command line is checked by tests/test_attach.c"
elif ! command -v nbd-client >/dev/null; then
    skip_check "attach --via nbd: nbd-client is not installed"
else
    DEV=$("$UZRAM" attach --via nbd nbd 2>"$WORK/nbd.err") || fail "attach --via nbd: $(cat "$WORK/nbd.err")"
    [[ $DEV =~ ^/dev/nbd[0-9]+$ ]] || fail "attach --via nbd printed '$DEV'"
    [[ $(attached_of nbd) == "$DEV" ]] || fail "status does not show $DEV"
    [[ $(blockdev --getsize64 "$DEV") -eq $((256 * MiB)) ]] || fail "$DEV is not 256 MiB"
    mkfs.ext4 -q -F "$DEV" >/dev/null 2>&1 || fail "mkfs.ext4 on $DEV"
    mount -t ext4 "$DEV" "$MNT" || fail "mount $DEV"
    head -c $((8 * MiB)) /dev/urandom >"$MNT/random"
    cp "$MNT/random" "$WORK/random.ref"
    sync
    if "$UZRAM" detach nbd 2>"$WORK/detach.err"; then fail "detach of $DEV succeeded while mounted"; fi
    grep -q "$DEV is mounted on $MNT" "$WORK/detach.err" || fail "detach said: $(cat "$WORK/detach.err")"
    umount "$MNT"
    wait_unclaimed "$DEV"
    "$UZRAM" detach nbd 2>"$WORK/detach.err" || fail "detach of $DEV: $(cat "$WORK/detach.err")"
    [[ $(attached_of nbd) == - ]] || fail "status still shows $DEV after detach"
    DEV=$("$UZRAM" attach --via nbd nbd) || fail "attach --via nbd again"
    mount -t ext4 "$DEV" "$MNT" || fail "mount $DEV again"
    cmp -s "$WORK/random.ref" "$MNT/random" || fail "data differs after detach and attach through nbd"
    umount "$MNT"
    wait_unclaimed "$DEV"
    "$UZRAM" detach nbd || fail "second detach of $DEV"
    pass "attach --via nbd: $DEV, ext4, detach refused while mounted, data kept across attaches"
fi
stop_server nbd

echo "PASS: attach.sh"
