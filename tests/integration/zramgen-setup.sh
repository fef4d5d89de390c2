#!/usr/bin/env bash
# zramgen-setup.sh - integration test of `uzram zram-generator --setup-device` and
# `--reset-device` (issue 28), what uzram-zram-setup@NAME runs: as root with FUSE and loop
# devices, a swap made and undone (priority, discard: what was on the device goes at swapon;
# serve --swap needs CAP_SYS_RESOURCE) and an ext2
# mount (mkfs, mount options, data reaching the device; umount, detach, empty). Apart from
# zramgen.sh so that make check's VM, where none of these checks skips, runs only these
# (tests/vm/vm.sh CHECK_SET). Skips and fails as tests/integration/lib.bash says (exit 0/1/77).
set -euo pipefail

. "$(dirname "$0")/lib.bash"
lib_init

# --- setup and reset: a swap and an ext2 mount (root, FUSE, loop devices; swap: ublk, and
# serve --swap, which needs CAP_SYS_RESOURCE) ---
if [[ $(id -u) -ne 0 || ! -c /dev/fuse || ! -e /dev/loop-control ]]; then
    skip "--setup-device and --reset-device: need root, /dev/fuse and loop devices"
fi
cap_eff=$(awk '/^CapEff:/ {print $2}' /proc/self/status)
cat >"$WORK/zram.conf" <<EOF
[zram6]
zram-size = 64
swap-priority = 7
options = nofail
[zram8]
zram-size = 64
mount-point = $WORK/mnt
options = noatime
EOF
serve_zram() { # NAME
    "$UZRAM" zram-generator --config "$WORK/zram.conf" --serve "$1" >"$WORK/server-$1.out" 2>"$WORK/server-$1.err" &
    SERVER_PID[$1]=$!
    for _ in $(seq 100); do [[ -S $(ctl_of "$1") ]] && break; sleep 0.1; done
    [[ -S $(ctl_of "$1") ]] || fail "--serve $1 did not start: $(cat "$WORK/server-$1.err")"
    at_exit "'$UZRAM' zram-generator --config '$WORK/zram.conf' --reset-device $1"
}
zg_conf() { "$UZRAM" zram-generator --config "$WORK/zram.conf" "$@"; }

if [[ ! -e /dev/ublk-control ]] && ! modprobe -q ublk_drv 2>/dev/null; then
    # A kernel without ublk (Debian 12's own 6.1): swap through nbd or loop fails under memory
    # pressure, so the swap's setup refuses before it asks any server, saying why; the unit
    # fails with that in its journal instead of making an unsafe swap (uzram(1), KERNELS).
    if zg_conf --setup-device zram6 >"$WORK/setup.out" 2>&1; then
        fail "--setup-device zram6 made a swap on a kernel without ublk: $(cat "$WORK/setup.out")"
    fi
    grep -q "cannot attach zram6 for swap: this kernel has no ublk driver" "$WORK/setup.out" ||
        fail "--setup-device zram6 without ublk said: $(cat "$WORK/setup.out")"
    grep -q "Debian 12's backports" "$WORK/setup.out" || fail "the refusal does not say where a kernel with ublk is: $(cat "$WORK/setup.out")"
    pass "swap on a kernel without ublk: --setup-device refuses at once: $(head -c 120 "$WORK/setup.out")..."
elif ! (((0x$cap_eff >> 24) & 1)); then
    skip_check "swap --setup-device and --reset-device: serve --swap needs CAP_SYS_RESOURCE, which this process lacks (CapEff $cap_eff)"
else
    serve_zram zram6
    # Pages there before swapon: the swap's discard (uzram's one swap setup adds it to the
    # section's options) must reach the server, as a swap slot's page will when it is freed.
    head -c $((16 * MiB)) /dev/urandom >"$WORK/old-pages"
    nbdcopy "$WORK/old-pages" "$(uri_of zram6)" || fail "nbdcopy into zram6"
    zg_conf --setup-device zram6 >"$WORK/setup.out" 2>&1 || fail "--setup-device zram6: $(cat "$WORK/setup.out")"
    node=$("$UZRAM" status -n --raw -o attached zram6)
    grep -qx "zram6: swap on $node, priority 7" "$WORK/setup.out" || fail "setup said: $(cat "$WORK/setup.out")"
    awk -v n="$node" '$1 == n {print $5}' /proc/swaps | grep -qx 7 || fail "$node is not swap of priority 7: $(cat /proc/swaps)"
    # swapon --discard discards the area at once, all but mkswap's header page
    orig=$(mm_stat_field zram6 0)
    ((orig <= 64 * 1024)) || fail "16 MiB written before swapon still held after it ($orig bytes): swapon without --discard?"
    zg_conf --reset-device zram6 >"$WORK/reset.out" 2>&1 || fail "--reset-device zram6: $(cat "$WORK/reset.out")"
    if grep -q "^$node " /proc/swaps; then fail "$node still swap after --reset-device"; fi
    [[ $("$UZRAM" status -n --raw -o attached zram6) == - ]] || fail "zram6 still attached after --reset-device"
    [[ $(mm_stat_field zram6 0) -eq 0 ]] || fail "zram6 not emptied by --reset-device: $("$UZRAM" attr zram6 mm_stat)"
    stop_server zram6
    pass "swap: --setup-device attaches, mkswap, swapon --discard (orig_data_size $orig after 16 MiB) priority 7; --reset-device swapoff, detach, empty"
fi

serve_zram zram8
zg_conf --setup-device zram8 >"$WORK/setup.out" 2>&1 || fail "--setup-device zram8: $(cat "$WORK/setup.out")"
findmnt -n -o FSTYPE,OPTIONS "$WORK/mnt" >"$WORK/mount" || fail "nothing mounted on $WORK/mnt: $(cat "$WORK/setup.out")"
grep -q "^ext2 .*noatime" "$WORK/mount" || fail "mount: $(cat "$WORK/mount")"
head -c 4M /dev/urandom >"$WORK/mnt/file"
sync "$WORK/mnt/file"
[[ $(mm_stat_field zram8 0) -ge $((4 * MiB)) ]] || fail "the file did not reach zram8: $("$UZRAM" attr zram8 mm_stat)"
zg_conf --reset-device zram8 >"$WORK/reset.out" 2>&1 || fail "--reset-device zram8: $(cat "$WORK/reset.out")"
if findmnt "$WORK/mnt" >/dev/null; then fail "$WORK/mnt still mounted after --reset-device"; fi
[[ $("$UZRAM" status -n --raw -o attached zram8) == - ]] || fail "zram8 still attached after --reset-device"
[[ $(mm_stat_field zram8 0) -eq 0 ]] || fail "zram8 not emptied by --reset-device: $("$UZRAM" attr zram8 mm_stat)"
stop_server zram8
pass "file system: --setup-device mkfs ext2, mounts with noatime, data reaches it; --reset-device umount, detach, empty"

echo "PASS: zramgen-setup.sh"
