#!/usr/bin/env bash
# features.sh - VM scenario: what uzram does on a kernel that lacks what a path needs (uzram(1),
# KERNELS). Each missing feature must be named, with the kernel that has it, never met with a
# hang or a silent fallback:
#   no ublk:  attach --swap refuses (the driver, CONFIG_BLK_DEV_UBLK, where a kernel with it is,
#             kernel zram); attach --via ublk names the driver; plain attach takes nbd; under a
#             real systemd (tests/vm/lib.bash, systemd_namespace) the uzram-swap@ unit and
#             zram-generator's uzram-zram-setup@ unit for a swap device fail at once with the
#             refusal in their journal, well within their TimeoutStartSec, nothing attached;
#   no nbd:   plain attach takes loop; attach --via nbd names the NBD client;
#   no /dev/fuse: attach --via loop names the FUSE module;
#   FUSE over io_uring (Linux 6.14): where the kernel has none, the loop path's server log says so.
# On a kernel that has the module (6.12's ublk_drv and nbd) it is hidden for the scenario:
# unloaded, and `install MODULE /bin/false` in the guest's /etc/modprobe.d (its overlay), which
# is how a kernel built without it looks to uzram (modprobe fails, no /dev node); /dev/fuse (fuse
# is built into 6.12) is removed and made again afterwards. Debian 12's 6.1 lacks ublk itself.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

vm_init
need_tools nbd-client losetup
BIN=/usr/local/bin/uzram # the installed program, in the systemd namespace
HIDDEN=/etc/modprobe.d/uzram-vm-hidden.conf
at_exit "rm -f $HIDDEN"

hide_module() { # MODULE: unloaded and refused by modprobe from now on
    echo "install $1 /bin/false" >>"$HIDDEN"
    if [[ -e /sys/module/$1 ]]; then
        [[ -e /sys/module/$1/refcnt ]] || fail "$1 is built into this kernel: it cannot be hidden"
        rmmod "$1" || fail "cannot unload $1 (in use by an earlier scenario?)"
    fi
    ! modprobe -q "$1" 2>/dev/null || fail "modprobe $1 still works after hiding it"
}
refused() { # EXPECTED COMMAND...: COMMAND fails and says EXPECTED; prints what it said
    local out
    if out=$("${@:2}" 2>&1); then fail "$* succeeded: $out"; fi
    [[ $out == *"$1"* ]] || fail "$* said: $out (expected: $1)"
    echo "$out"
}

# --- no ublk ---
if [[ -e /dev/ublk-control ]] || modprobe -q ublk_drv 2>/dev/null; then
    hide_module ublk_drv
    ublk="ublk_drv hidden"
else
    ublk="no ublk_drv in this kernel"
fi
start_server plain -s 64M
start_server swapdev -s 64M --swap --mem-limit 32M
out=$(refused "cannot attach swapdev for swap: this kernel has no ublk driver (ublk_drv, CONFIG_BLK_DEV_UBLK" \
    "$UZRAM" attach --swap swapdev)
for what in "Debian 12's backports" "Debian 13" "kernel zram" "fails under memory pressure"; do
    [[ $out == *"$what"* ]] || fail "the refusal of attach --swap does not say '$what': $out"
done
[[ $("$UZRAM" status -n --raw -o attached swapdev) == - ]] || fail "the refused attach --swap left a node"
pass "$ublk: attach --swap refuses: $out"
out=$(refused "the kernel has no ublk driver (ublk_drv, CONFIG_BLK_DEV_UBLK: Linux 6.0" "$UZRAM" attach --via ublk plain)
pass "$ublk: attach --via ublk: $out"
modprobe -q nbd || fail "no nbd module"
dev=$("$UZRAM" attach plain) || fail "attach without --via"
[[ $dev == /dev/nbd* ]] || fail "attach without --via and without ublk took $dev, not nbd"
"$UZRAM" detach plain || fail "detach $dev"
pass "$ublk: attach without --via takes nbd ($dev)"

# --- the units, under systemd: they fail at once, saying why ---
systemd_namespace
printf '[sw0]\nsize = 64M\nswap = yes\nmem-limit = 32M\n' >"$SD_ROOT/usr/local/etc/uzram/uzram.conf"
at_exit "sd systemctl stop uzram-swap@sw0.service uzram@sw0.service uzram-zram-setup@zram0.service uzram-zram@zram0.service"
unit_fails() { # UNIT: started, it fails within a minute, its journal says why, nothing attached
    local unit=$1 start took bound
    bound=$(sd systemctl show -p TimeoutStartUSec --value "$unit")
    [[ $bound != infinity ]] || fail "$unit has no start timeout: a hang would hold the boot"
    start=$SECONDS
    if timeout 60 nsenter -t "$SD_PID" -m -p -- env -u XDG_RUNTIME_DIR systemctl start "$unit" 2>/dev/null; then
        fail "$unit started on a kernel without ublk"
    fi
    took=$((SECONDS - start))
    ((took < 60)) || fail "$unit took $took s to fail (its bound: $bound)"
    [[ $(sd systemctl show -p ActiveState --value "$unit") == failed ]] ||
        fail "$unit is $(sd systemctl show -p ActiveState --value "$unit"), not failed"
    sd journalctl --no-pager -o cat -u "$unit" >"$WORK/journal" 2>&1
    grep -q "for swap: this kernel has no ublk driver" "$WORK/journal" ||
        fail "the journal of $unit does not say why: $(tail -n 5 "$WORK/journal")"
    UNIT_SAID="failed in $took s (bound $bound): $(grep -m 1 "no ublk driver" "$WORK/journal" | cut -c1-100)..."
}
unit_fails uzram-swap@sw0.service
[[ $(sd "$BIN" status -n --raw -o attached sw0) == - ]] || fail "the failed uzram-swap@sw0 left sw0 attached"
pass "systemd $SD_VERSION: uzram-swap@sw0 $UNIT_SAID"
sd systemctl stop uzram@sw0.service
sd sh -c 'mkdir -p /run/systemd && printf "[zram0]\nzram-size = 64\n" >/run/systemd/zram-generator.conf'
unit_fails uzram-zram-setup@zram0.service
pass "systemd $SD_VERSION: zram-generator's uzram-zram-setup@zram0 (a swap device) $UNIT_SAID"
sd systemctl stop uzram-zram@zram0.service

# --- no nbd either: loop ---
hide_module nbd
modprobe -q loop
dev=$("$UZRAM" attach plain) || fail "attach without --via, ublk and nbd"
[[ $dev == /dev/loop* ]] || fail "attach without ublk and nbd took $dev, not loop"
"$UZRAM" detach plain || fail "detach $dev"
pass "no ublk, nbd hidden: attach without --via takes loop ($dev)"
out=$(refused "the kernel has no NBD client (nbd, CONFIG_BLK_DEV_NBD" "$UZRAM" attach --via nbd plain)
pass "nbd hidden: attach --via nbd: $out"

# --- FUSE over io_uring: the log says which path the FUSE file takes, and why ---
grep -q "FUSE" "$WORK/server-plain.err" || fail "the server's log says nothing of the FUSE path: $(tail -n 3 "$WORK/server-plain.err")"
if [[ -e /sys/module/fuse/parameters/enable_uring ]]; then
    said=$(grep -m 1 "FUSE" "$WORK/server-plain.err")
else
    said=$(grep -m 1 "this kernel has no FUSE over io_uring (CONFIG_FUSE_IO_URING, Linux 6.14 and later)" \
        "$WORK/server-plain.err") || fail "the server's log does not say that the kernel has no FUSE over io_uring: $(grep FUSE "$WORK/server-plain.err")"
fi
pass "FUSE over io_uring on $(uname -r): $said"

# --- no /dev/fuse: loop names the module ---
if [[ -c /dev/fuse ]]; then
    rm /dev/fuse
    at_exit "[[ -e /dev/fuse ]] || mknod -m 666 /dev/fuse c 10 229"
fi
echo "install fuse /bin/false" >>"$HIDDEN"
out=$(refused "no /dev/fuse: the kernel's FUSE module is not loaded (fuse, CONFIG_FUSE_FS" "$UZRAM" attach --via loop plain)
[[ $("$UZRAM" status -n --raw -o attached plain) == - ]] || fail "the refused loop attach left a node"
pass "no /dev/fuse: attach --via loop: $out"
stop_server plain
stop_server swapdev
echo "PASS: features.sh"
