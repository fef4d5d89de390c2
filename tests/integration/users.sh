#!/usr/bin/env bash
# users.sh - data is never dropped under a user of the device (issue 23): a reset (and a
# hot-remove) is refused while an NBD client is connected or while `uzram attach` has the
# device as a /dev node, mounted or not, as kernel zram refuses a reset of an open device; and
# the check and the reset are one step: clients that connect, write and read back while resets
# are sent never see an acknowledged write vanish. Each check failed against the code before.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

need_python_nbd
lib_init

# --- the race: connect + write + read back, against resets, on one device ---
start_server race -s 64M
$PY "$(dirname "$0")/reset_race.py" "$(sock_of race)" "$(ctl_of race)" 8 >"$WORK/race.out" 2>&1 ||
    fail "reset race: $(cat "$WORK/race.out")"
read -r _ connections _ accepted _ refused <"$WORK/race.out"
[[ $accepted -gt 0 && $refused -gt 0 && $connections -gt 100 ]] ||
    fail "the race was not run both ways: $(cat "$WORK/race.out")"
server_alive race || fail "the server died in the reset race"
stop_server race
pass "reset race: $connections connections wrote and read back their page, $accepted resets went through between them and $refused were refused: no acknowledged write lost"

# --- an attached device: reset and hot-remove refused, mounted or not ---
if [[ $(id -u) -ne 0 || ! -c /dev/fuse || ! -e /dev/loop-control ]]; then
    skip_check "reset of an attached device: needs root, /dev/fuse and loop devices"
    echo "PASS: users.sh"
    exit 0
fi
need_tools mkfs.ext4 mount umount mountpoint
MNT=$WORK/mnt
mkdir "$MNT"
at_exit '"$UZRAM" detach used'
at_exit 'mountpoint -q "$MNT" && { umount "$MNT" || umount -l "$MNT"; }'

start_server pool --device used:256M --device other:64M
DEV=$("$UZRAM" attach --via loop used 2>"$WORK/attach.err") || fail "attach: $(cat "$WORK/attach.err")"
mkfs.ext4 -q -F "$DEV" >"$WORK/mkfs.log" 2>&1 || fail "mkfs.ext4 on $DEV: $(cat "$WORK/mkfs.log")"
mount -t ext4 "$DEV" "$MNT" 2>"$WORK/mount.err" || skip "cannot mount ext4 here: $(cat "$WORK/mount.err")"
for i in $(seq 200); do head -c 16384 /dev/urandom >"$MNT/file$i"; done
sync
(cd "$MNT" && sha256sum file*) >"$WORK/sums"
before=$(mm_stat_field used 0)

refused() { # WHAT: reset and hot-remove of `used` are refused, naming the node
    if "$UZRAM" attr used reset 1 2>"$WORK/reset.err"; then fail "reset accepted while $1"; fi
    grep -q "used is attached as $DEV; stop using it (umount, swapoff) and run uzram detach used first, then reset again" \
        "$WORK/reset.err" || fail "reset while $1 said: $(cat "$WORK/reset.err")"
    if "$UZRAM" hot-remove used 2>"$WORK/remove.err"; then fail "hot-remove accepted while $1"; fi
    grep -q "used is attached as $DEV" "$WORK/remove.err" ||
        fail "hot-remove while $1 said: $(cat "$WORK/remove.err")"
    [[ $(mm_stat_field used 0) -eq $before ]] || fail "the data changed while $1"
}
refused "mounted"
umount "$MNT"
refused "attached and not mounted"
mount -t ext4 "$DEV" "$MNT" || fail "mounting again"
(cd "$MNT" && sha256sum --quiet -c "$WORK/sums") >"$WORK/check.log" 2>&1 ||
    fail "files changed: $(head -5 "$WORK/check.log")"
umount "$MNT"
pass "reset and hot-remove refused while $DEV is mounted and while it is attached unmounted: $(cat "$WORK/reset.err"); 200 files intact"

# The other device of the server is nobody's: its reset goes through.
"$UZRAM" attr other reset 1 || fail "reset of an unused device of the same server"
"$UZRAM" detach used 2>"$WORK/detach.err" || fail "detach: $(cat "$WORK/detach.err")"
"$UZRAM" attr used reset 1 2>"$WORK/reset.err" || fail "reset after detach: $(cat "$WORK/reset.err")"
[[ $(mm_stat_field used 0) -eq 0 ]] || fail "orig_data_size is not 0 after the reset"
stop_server pool
pass "after detach the reset goes through (orig_data_size 0); an unused device resets while another is attached"

echo "PASS: users.sh"
