#!/usr/bin/env bash
# ublk-recovery.sh - VM scenario: ublk user recovery's handshake (issue 29), through the
# program's own ublk code (src/attach/ublk.c) in a stand-in server, build/tests/vm/ublk_handover
# (`serve --persist` is the serve side's; ublk-restart.sh tests it). A recoverable device
# (UBLK_F_USER_RECOVERY | REISSUE) with fio's random reads and writes on it at QD 16; its server
# SIGKILLed KILLS times at random moments: each time the node stays, the I/O waits (fio still
# runs, no I/O error in the kernel log), the device is listed as recoverable, a new server takes
# it over (ublk_recover) and fio goes on; then a planned restart (ublk_leave + execve, the same
# pid); fio ends without an error. The stand-in's pages do not outlive it, so no data is compared
# across a death here: what is checked is that every request completed without an error (data
# across deaths: ublk-restart.sh, once the state survives the server). Also: a recovery is
# refused while the server runs and for another size (the device unchanged); a quiesced device
# is left alone by a new server's leftover cleanup (uzram attach) and deleted for good by
# ublk_delete, whose held I/O then fails.
#
#   ublk-recovery.sh [KILLS]     (default 3: make check's VM stage)
set -euo pipefail
source "$(dirname "$0")/lib.bash"

KILLS=${1:-3}
SIZE_MIB=256
BOUND=40 # s: a takeover (its 30 s wait for the driver, and a start under TCG)
vm_init
need_module ublk_drv
need_tools fio dd cmp
HANDOVER=$(dirname "$UZRAM")/tests/vm/ublk_handover
[[ -x $HANDOVER ]] || fail "no $HANDOVER (make $HANDOVER)"
HPID="" FIO="" DEV_ID=""
# start_handover ARGS...: the stand-in in the background; waits for the device number it prints
# (a new line of $WORK/handover.out) and sets DEV_ID, HPID.
start_handover() {
    local lines
    lines=$(wc -l <"$WORK/handover.out" 2>/dev/null || echo 0)
    "$HANDOVER" "$@" >>"$WORK/handover.out" 2>"$WORK/handover.err" &
    HPID=$!
    wait_for_line "$lines" "ublk_handover $*"
}
wait_for_line() { # LINES_BEFORE WHAT
    local deadline=$(($(date +%s) + BOUND))
    until (($(wc -l <"$WORK/handover.out") > $1)); do
        kill -0 "$HPID" 2>/dev/null || fail "$2 exited: $(cat "$WORK/handover.err")"
        (($(date +%s) < deadline)) || fail "$2 printed no device within $BOUND s"
        sleep 0.1
    done
    DEV_ID=$(tail -n 1 "$WORK/handover.out")
}
# Whatever a failure leaves: fio, the stand-in (SIGTERM deletes its device), a quiesced device.
at_exit 'kill -KILL $FIO; kill -TERM $HPID && timeout 20 tail --pid=$HPID -f /dev/null; [[ -z $DEV_ID ]] || "$HANDOVER" delete $DEV_ID'

listed() { "$HANDOVER" list | awk -v id="$1" -v state="$2" '$1 == id && $4 == state {found=1} END {exit !found}'; }
no_io_errors() { ! dmesg | grep -E "I/O error, dev ublkb$1|Buffer I/O error on dev ublkb$1"; }

: >"$WORK/handover.out"
start_handover serve $SIZE_MIB
DEV=/dev/ublkb$DEV_ID
[[ -b $DEV ]] || fail "no $DEV after the stand-in printed $DEV_ID"
! listed "$DEV_ID" quiesced && ! listed "$DEV_ID" live || fail "$DEV is listed as recoverable while its server runs"
if "$HANDOVER" recover "$DEV_ID" $SIZE_MIB 2>"$WORK/refused"; then fail "a recovery of $DEV succeeded while its server runs"; fi
grep -q "its server is running" "$WORK/refused" || fail "recovery while the server runs said: $(cat "$WORK/refused")"
head -c $((8 << 20)) /dev/urandom >"$WORK/r"
dd if="$WORK/r" of="$DEV" bs=1M oflag=direct status=none
cmp -n $((8 << 20)) "$WORK/r" "$DEV" || fail "8 MiB through $DEV read back differ"
pass "$DEV made recoverable; a recovery while its server runs refused: $(cat "$WORK/refused")"

fio --name=load --filename="$DEV" --ioengine=libaio --direct=1 --rw=randrw --bsrange=4k-128k \
    --iodepth=16 --size=128M --time_based --runtime=3600 --output="$WORK/fio.out" >/dev/null 2>&1 &
FIO=$!
sleep 2
kill -0 $FIO || fail "fio ended at once: $(tail -n 5 "$WORK/fio.out")"

total=0 worst=0 worst_inner=0
for ((kill = 1; kill <= KILLS; kill++)); do
    sleep "$((RANDOM % 3)).$((RANDOM % 10))"
    old=$HPID
    kill -KILL "$old"
    wait "$old" 2>/dev/null || true
    [[ -b $DEV ]] || fail "kill $kill: $DEV went with its server"
    wait_for 20 "kill $kill: $DEV quiesced and listed as recoverable" listed "$DEV_ID" quiesced
    sleep 1
    kill -0 $FIO || fail "kill $kill: fio ended while the device waited: $(grep -m 3 -iE 'error|err=' "$WORK/fio.out")"
    no_io_errors "$DEV_ID" || fail "kill $kill: the kernel logged I/O errors on $DEV"
    start=$(date +%s%N)
    start_handover recover "$DEV_ID" $SIZE_MIB
    took=$((($(date +%s%N) - start) / 1000000))
    total=$((total + took))
    ((took > worst)) && worst=$took
    inner=$(sed -n 's/.*took over .* in \([0-9]*\) ms$/\1/p' "$WORK/handover.err")
    ((inner > worst_inner)) && worst_inner=$inner
    [[ $DEV_ID == "${DEV#/dev/ublkb}" ]] || fail "kill $kill: the successor serves ublkb$DEV_ID, not $DEV"
    sleep 1
    kill -0 $FIO || fail "kill $kill: fio ended after the takeover: $(grep -m 3 -iE 'error|err=' "$WORK/fio.out")"
done
pass "$KILLS SIGKILLs under fio: each time $DEV stayed, I/O waited without an error, a new server took it over (at most $worst ms, $((total / KILLS)) ms on average from its start; ublk_recover itself at most $worst_inner ms)"
result ublk_recovery_kills "$KILLS"
result ublk_recovery_worst_ms "$worst"
result ublk_recover_call_worst_ms "$worst_inner"

# A planned restart: the server leaves the device and executes itself again (the same pid).
lines=$(wc -l <"$WORK/handover.out")
kill -USR1 "$HPID"
wait_for_line "$lines" "the planned restart"
kill -0 $FIO || fail "fio ended at the planned restart: $(grep -m 3 -iE 'error|err=' "$WORK/fio.out")"
sleep 1
no_io_errors "$DEV_ID" || fail "the planned restart: the kernel logged I/O errors on $DEV"
pass "planned restart (ublk_leave + execve, pid $HPID kept): $DEV taken over, fio goes on"

kill -INT $FIO
status=0
timeout 60 tail --pid=$FIO -f /dev/null || fail "fio did not end within 60 s of SIGINT"
wait $FIO || status=$?
FIO=
# fio ends with 128 after SIGINT when nothing else went wrong; an I/O error ends it before.
((status == 0 || status == 128)) || fail "fio exited $status: $(grep -m 3 -iE 'error|err=' "$WORK/fio.out")"
grep -q "err= 0" "$WORK/fio.out" && ! grep -qE "err= *[1-9]|io_u error" "$WORK/fio.out" ||
    fail "fio reported errors: $(grep -m 3 -iE 'error|err=' "$WORK/fio.out")"
no_io_errors "$DEV_ID" || fail "the kernel logged I/O errors on $DEV"
dd if="$WORK/r" of="$DEV" bs=1M oflag=direct status=none
cmp -n $((8 << 20)) "$WORK/r" "$DEV" || fail "8 MiB written after the takeovers read back differ"
pass "fio ended without an error ($(grep -m 1 -oE 'read: IOPS=[^,]*' "$WORK/fio.out"), $(grep -m 1 -oE 'write: IOPS=[^,]*' "$WORK/fio.out")); 8 MiB round trip through the last server"

# Another size: refused, and the device still recoverable after it.
kill -KILL "$HPID"
wait "$HPID" 2>/dev/null || true
wait_for 20 "$DEV quiesced" listed "$DEV_ID" quiesced
if "$HANDOVER" recover "$DEV_ID" $((SIZE_MIB * 2)) 2>"$WORK/refused"; then fail "a recovery of $DEV as $((SIZE_MIB * 2)) MiB succeeded"; fi
listed "$DEV_ID" quiesced || fail "$DEV is no longer recoverable after a refused recovery"
pass "a recovery as another size refused ($(cat "$WORK/refused")), $DEV still recoverable"

# A new uzram server's attach deletes the devices dead servers left, but not a recoverable one.
start_server other -s 64M
other=$("$UZRAM" attach --via ublk other) || fail "attach other"
"$UZRAM" detach other
stop_server other
listed "$DEV_ID" quiesced || fail "a new server's attach ($other) took $DEV away"
pass "a new server's attach ($other) left the quiesced $DEV alone"

# A stop for good: the I/O held on the quiesced device fails, the node goes.
dd if=/dev/zero of="$DEV" bs=64k count=16 oflag=direct 2>"$WORK/held.err" &
held=$!
sleep 1
kill -0 $held || fail "a write to the quiesced $DEV did not wait: $(cat "$WORK/held.err")"
"$HANDOVER" delete "$DEV_ID" || fail "ublk_delete of the quiesced $DEV"
timeout 20 tail --pid=$held -f /dev/null || fail "the held write still waits 20 s after the delete"
if wait $held; then fail "the held write succeeded on a deleted device"; fi
wait_for 20 "$DEV removed" bash -c "! [[ -e $DEV || -e /sys/class/ublk-char/ublkc$DEV_ID ]]"
HPID=
pass "ublk_delete of the quiesced $DEV: the held write failed ($(tail -n 1 "$WORK/held.err")), the node is gone"
echo "PASS: ublk-recovery.sh"
