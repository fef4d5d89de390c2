#!/usr/bin/env bash
# ublk-sync.sh - VM scenario: the prototype ublk driver (bench/ublk-sync, docs/design/swap.md)
# under slot reuse. The driver forwards every freed swap slot as a discard; a discard of a live
# page, or one that reached the server after a later write of its slot, would drop data. Here
# swap is a small area that memtouch's rounds fill again and again (every page read back,
# compared byte for byte, written anew: each slot is taken again several times), and the
# driver's discard_delay_ms widens the window in which a write could meet a discard not yet in
# the driver (the write cancels it) or one with the server (the write is held back). Passes
# when every page came back exact and the driver discarded pages meanwhile; prints the driver's
# counts from its log at the disk's stop. (In the runs so far no write met a live discard of
# its slot: the cancel and hold-back paths stayed unexercised; docs/design/swap.md.)
#
#   ublk-sync.sh [DELAY_MS]   (default 200)
#
# Skips without build/ublk-sync/ublk_drv.ko (bench/ublk-sync/build.sh; not built by make).
set -euo pipefail
source "$(dirname "$0")/lib.bash"

delay=${1:-200}
[[ $delay =~ ^[0-9]+$ ]] || fail "DELAY_MS must be a whole number, not '$delay'"
vm_init
[[ -r $PROTOTYPE_KO ]] || skip "no $PROTOTYPE_KO (bench/ublk-sync/build.sh builds it)"
[[ -x $MEMTOUCH ]] || fail "no $MEMTOUCH (make all builds it)"
SERVER_OWN_SESSION=1 # a deadline's signal to this group must not stop a server under swap

[[ $(awk 'NR > 1' /proc/swaps) == "" ]] || fail "swap is on already"
prototype_on discard_delay_ms="$delay"

# 192 MiB of swap under 15/16 of the guest's memory: most of the area in use, so that Linux
# takes freed slots of partly used clusters again (a first try, 256 MiB under all of it with
# a 20 ms delay, met none: Linux takes wholly free clusters first).
touch_mib=$((VM_MEM_MIB * 15 / 16))
start_server swap0 -s 192M --swap --mem-limit 128M
at_exit "timeout 60 sh -c $(printf '%q' "$(unit_command ExecStop swap0)")"
sh -ec "$(unit_command ExecStart swap0)" >"$WORK/unit.out" 2>&1 ||
    fail "the unit's ExecStart: $(cat "$WORK/unit.out")"
SWAPDEV=$("$UZRAM" status -n --raw -o attached swap0)
grep -q "^$SWAPDEV " /proc/swaps || fail "$SWAPDEV is not swap"

out_before=$(vmstat pswpout)
timeout -s KILL 900 "$MEMTOUCH" "$touch_mib" 3 "$RANDOM" >"$WORK/memtouch.out" 2>&1 ||
    fail "memtouch $touch_mib MiB: $(tail -n 5 "$WORK/memtouch.out")"
grep -q " 0 pages differed" "$WORK/memtouch.out" || fail "memtouch: $(tail -n 3 "$WORK/memtouch.out")"
swapped=$(($(vmstat pswpout) - out_before))
((swapped > 0)) || fail "no page went out to swap"

timeout 180 sh -ec "$(unit_command ExecStop swap0)" >"$WORK/unit.out" 2>&1 ||
    fail "the unit's ExecStop: $(cat "$WORK/unit.out")"
stop_server swap0
line=$(dmesg | grep -o 'ublk_sync: .*' | tail -n 1)
[[ -n $line ]] || fail "the driver logged nothing at the disk's stop"
echo "$line"
pages=$(sed -n 's/.* discards sent (\([0-9]*\) pages).*/\1/p' <<<"$line")
cancelled=$(sed -n 's/.* \([0-9]*\) cancelled by a write.*/\1/p' <<<"$line")
held=$(sed -n 's/.* \([0-9]*\) writes held back.*/\1/p' <<<"$line")
stock_ublk || fail "the stock ublk driver is not back"
((pages > 0)) || fail "the driver discarded nothing ($swapped swap-outs)"
pass "$touch_mib MiB, 3 rounds, every page exact over $swapped swap-outs and $pages pages discarded; $cancelled discards cancelled by a write, $held writes held back"
