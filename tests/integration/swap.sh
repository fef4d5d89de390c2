#!/usr/bin/env bash
# swap.sh - integration test of `serve --swap`: refused without a memory limit or without the
# privileges it needs; where it runs, its settings read back from /proc (VmLck, oom_score_adj)
# and from the server (PR_GET_IO_FLUSHER), memory given back under mlockall, the swap recipe
# (attach --swap, mkswap, swapon, detach refused, swapoff, detach) on each /dev path, and
# attach --swapon: --priority checked (refused without --swapon and out of swapon's range),
# swapon --discard (what the device held before it is dropped), the priority in /proc/swaps,
# and the node detached again when swapon fails.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
REPO=$(cd "$(dirname "$0")/../.." && pwd)

need_tools qemu-io nbdcopy
lib_init

# --- a memory limit is required, on the command line and in a configuration file ---
if "$UZRAM" serve -n nolimit --swap >"$WORK/out" 2>"$WORK/err"; then fail "serve --swap without --mem-limit started"; fi
grep -q -- "--swap needs a memory limit: add --mem-limit SIZE" "$WORK/err" || fail "serve --swap said: $(cat "$WORK/err")"
printf '[cfg]\nsize = 64M\nswap = yes\n' >"$WORK/swap.conf"
if "$UZRAM" serve --config "$WORK/swap.conf" >"$WORK/out" 2>"$WORK/err"; then fail "swap = yes without mem-limit started"; fi
grep -q "$WORK/swap.conf:3: swap needs a memory limit: add 'mem-limit = SIZE'" "$WORK/err" ||
    fail "the configuration said: $(cat "$WORK/err")"
pass "--swap without a memory limit is refused: $(cat "$WORK/err")"

# --- --swap-stall-limit: only with --swap, only 0 to 3600 seconds, on the command line and in a file ---
for args in "--swap-stall-limit 5|uzram: --swap-stall-limit goes with --swap" \
    "--swap --mem-limit 8M --swap-stall-limit x|uzram: bad --swap-stall-limit 'x'; use seconds from 0 (never) to 3600" \
    "--swap --mem-limit 8M --swap-stall-limit 3601|uzram: bad --swap-stall-limit '3601'; use seconds from 0 (never) to 3600" \
    "--swap --mem-limit 8M --swap-stall-limit -1|uzram: bad --swap-stall-limit '-1'; use seconds from 0 (never) to 3600"; do
    read -r -a argv <<<"${args%%|*}"
    if "$UZRAM" serve -n stall -s 16M "${argv[@]}" >"$WORK/out" 2>"$WORK/err"; then fail "serve ${args%%|*} started"; fi
    grep -qxF -- "${args#*|}" "$WORK/err" || fail "serve ${args%%|*} said: $(cat "$WORK/err")"
    [[ ! -e $(sock_of stall) ]] || fail "serve ${args%%|*} left its socket"
done
printf '[cfg]\nsize = 64M\nswap-stall-limit = 10\n' >"$WORK/stall.conf"
if "$UZRAM" serve --config "$WORK/stall.conf" >"$WORK/out" 2>"$WORK/err"; then fail "swap-stall-limit without swap started"; fi
grep -q "stall.conf:3: swap-stall-limit goes with swap = yes" "$WORK/err" || fail "the configuration said: $(cat "$WORK/err")"
pass "--swap-stall-limit: refused without --swap and outside 0..3600, from the command line and a file"

# --- attach --swapon's command line: --priority only with it, only in swapon's range ---
refused() { # EXPECTED-MESSAGE ATTACH-ARGS...: exit status 2 and the message, no server asked
    local want=$1 status=0
    shift
    "$UZRAM" attach "$@" >"$WORK/out" 2>"$WORK/err" || status=$?
    [[ $status == 2 ]] || fail "attach $* exited $status: $(cat "$WORK/out" "$WORK/err")"
    grep -qF -- "$want" "$WORK/err" || fail "attach $* said: $(cat "$WORK/err")"
}
refused "uzram attach: --priority goes with --swapon" --priority 5 nosuch
refused "uzram attach: --priority goes with --swapon" --swap --priority 5 nosuch
for bad in 32768 -2 x 5x "" 99999999999999999999; do
    refused "uzram: bad --priority '$bad'; use -1 to 32767" --swapon --priority "$bad" nosuch
done
pass "attach --priority: refused without --swapon and outside -1..32767 (exit 2, before any server is asked)"

# --- the privileges: PR_SET_IO_FLUSHER and oom_score_adj -1000 need CAP_SYS_RESOURCE ---
cap_eff=$(awk '/^CapEff:/ {print $2}' /proc/self/status)
if (((0x$cap_eff >> 24) & 1)); then
    have_sys_resource=1
else
    have_sys_resource=0
    if "$UZRAM" serve -n nocap -s 64M --swap --mem-limit 32M >"$WORK/out" 2>"$WORK/err"; then
        fail "serve --swap started without CAP_SYS_RESOURCE"
    fi
    grep -q "PR_SET_IO_FLUSHER refused: Operation not permitted; it needs CAP_SYS_RESOURCE" "$WORK/err" ||
        fail "serve --swap without CAP_SYS_RESOURCE said: $(cat "$WORK/err")"
    [[ ! -e $(sock_of nocap) ]] || fail "the refused server left its socket"
    pass "without CAP_SYS_RESOURCE, serve --swap refuses to start: $(cat "$WORK/err")"
    skip_check "serve --swap settings read back (VmLck, oom_score_adj, PR_GET_IO_FLUSHER), memory under mlockall, swapon recipe: this process has no CAP_SYS_RESOURCE (CapEff $cap_eff), which --swap needs; checked above that it refuses"
fi
[[ $have_sys_resource == 1 ]] || { echo "PASS: swap.sh"; exit 0; }

# --- the settings, read back ---
start_server sw -s 256M --swap --mem-limit 160M
pid=${SERVER_PID[sw]}
locked_kib=$(awk '/^VmLck:/ {print $2}' "/proc/$pid/status")
[[ $locked_kib -gt 0 ]] || fail "VmLck of the server is $locked_kib kB: memory not locked"
[[ $(cat "/proc/$pid/oom_score_adj") == -1000 ]] || fail "oom_score_adj is $(cat "/proc/$pid/oom_score_adj")"
status_field() { "$UZRAM" status --json sw | $PY -c 'import json, sys; print(json.load(sys.stdin)[0][sys.argv[1]])' "$1"; }
[[ $(status_field swap) == 1 ]] || fail "status does not say swap 1"
[[ $(status_field io_flusher) == 1 ]] || fail "the server's PR_GET_IO_FLUSHER is not 1"
[[ $(status_field mem_locked) -gt 0 ]] || fail "status says no memory is locked"
pass "serve --swap: VmLck $locked_kib kB, oom_score_adj -1000, PR_GET_IO_FLUSHER 1 in a server thread"

# --- memory goes back to the system when pages are discarded, though it is locked ---
rss() { awk '/^VmRSS:/ {print $2}' "/proc/$pid/status"; }
head -c $((96 * MiB)) /dev/urandom >"$WORK/random"
rss_before=$(rss)
nbdcopy "$WORK/random" "$(uri_of sw)" || fail "nbdcopy into the swap server"
rss_full=$(rss)
qemu-io -f raw -c "discard 0 $((96 * MiB))" "$(uri_of sw)" >"$WORK/qio.out" 2>&1 || fail "discard: $(cat "$WORK/qio.out")"
rss_empty=$(rss)
[[ $((rss_full - rss_before)) -ge $((80 * 1024)) ]] ||
    fail "96 MiB of random data grew VmRSS only from $rss_before to $rss_full kB"
# Under --swap the pool keeps up to 32 MiB of emptied spans resident (its span cache and its
# reserve for swap-outs, lib/pool/pool.h): the rest must go back.
[[ $((rss_full - rss_empty)) -ge $((56 * 1024)) ]] ||
    fail "discarding 96 MiB took VmRSS only from $rss_full to $rss_empty kB: locked memory not given back"
pass "VmRSS $rss_before -> $rss_full kB after 96 MiB written, -> $rss_empty kB after discarding it"

# --- the swap recipe, on each /dev path this machine has ---
swap_recipe() { # VIA
    local via=$1 dev
    dev=$("$UZRAM" attach --via "$via" --swap sw 2>"$WORK/attach.err") || fail "attach --via $via --swap: $(cat "$WORK/attach.err")"
    grep -q "mkswap $dev && swapon --discard --priority 100 $dev" "$WORK/attach.err" ||
        fail "attach --swap did not print the recipe: $(cat "$WORK/attach.err")"
    at_exit "swapoff $dev"
    mkswap "$dev" >/dev/null 2>&1 || fail "mkswap $dev"
    if ! swapon -p 0 "$dev" 2>"$WORK/swapon.err"; then
        skip_check "swapon on $dev (--via $via): $(cat "$WORK/swapon.err")"
        "$UZRAM" detach sw || fail "detach after a failed swapon"
        return 0
    fi
    grep -q "^$dev " /proc/swaps || fail "$dev is not in /proc/swaps after swapon"
    if "$UZRAM" detach sw 2>"$WORK/detach.err"; then fail "detach succeeded while $dev is swap"; fi
    grep -q "$dev is in use as swap; first: swapoff $dev" "$WORK/detach.err" ||
        fail "detach of swap said: $(cat "$WORK/detach.err")"
    swapoff "$dev" || fail "swapoff $dev"
    "$UZRAM" detach sw || fail "detach $dev after swapoff"
    pass "swap recipe --via $via: attach --swap, mkswap, swapon $dev, detach refused, swapoff, detach"
}
swap_recipe loop

# --- attach --swapon: mkswap and swapon --discard with the priority, or nothing attached ---
# Pages the device held before swapon are dead to swap: swapon --discard drops them (and the
# kernel discards each swap cluster it frees later, the only news of freed slots a ublk, nbd
# or loop device gets).
head -c $((16 * MiB)) /dev/urandom >"$WORK/old-pages"
nbdcopy "$WORK/old-pages" "$(uri_of sw)" || fail "nbdcopy into sw"
status=0
dev=$("$UZRAM" attach --via loop --swapon --priority 7 sw 2>"$WORK/attach.err") || status=$?
if [[ $status == 1 ]] && grep -q "swapon failed" "$WORK/attach.err"; then
    # (as swap_recipe: swapon may refuse a loop device on FUSE)
    skip_check "attach --swapon: swapon does not take a loop device on FUSE here: $(cat "$WORK/attach.err")"
else
    [[ $status == 0 ]] || fail "attach --swapon --priority 7 exited $status: $(cat "$WORK/attach.err")"
    at_exit "swapoff $dev"
    [[ $dev == "$("$UZRAM" status -n --raw -o attached sw)" ]] || fail "attach --swapon printed '$dev'"
    awk -v n="$dev" '$1 == n {print $5}' /proc/swaps | grep -qx 7 || fail "$dev is not swap of priority 7: $(cat /proc/swaps)"
    orig=$(mm_stat_field sw 0)
    ((orig <= 64 * 1024)) || fail "16 MiB written before attach --swapon still held after it ($orig bytes): no discard"
    swapoff "$dev" || fail "swapoff $dev"
    "$UZRAM" detach sw || fail "detach $dev"
    pass "attach --swapon --priority 7: $dev swap of priority 7, the 16 MiB it held before discarded (orig_data_size $orig)"
fi
# a swapon that fails: its message, exit status 1, and the node taken away again
mkdir -p "$WORK/bin"
printf '#!/bin/sh\necho "swapon: refused by this test" >&2\nexit 1\n' >"$WORK/bin/swapon"
chmod +x "$WORK/bin/swapon"
status=0
PATH="$WORK/bin:$PATH" "$UZRAM" attach --via loop --swapon sw >"$WORK/out" 2>"$WORK/err" || status=$?
[[ $status == 1 ]] || fail "attach --swapon with a failing swapon exited $status: $(cat "$WORK/out" "$WORK/err")"
grep -q "swapon failed: swapon: refused by this test" "$WORK/err" || fail "attach --swapon said: $(cat "$WORK/err")"
[[ ! -s $WORK/out ]] || fail "attach --swapon printed a node though swapon failed: $(cat "$WORK/out")"
[[ $("$UZRAM" status -n --raw -o attached sw) == - ]] || fail "the node stayed attached after swapon failed"
pass "attach --swapon whose swapon fails: exit 1, swapon's message, node detached again"

# --- the same recipe as the shipped unit runs it (systemd/uzram-swap@.service.in) ---
unit_command() { # KEY: the unit's ExecStart or ExecStop as sh would run it for device sw
    sed -n "s/^$1=//p" "$REPO/systemd/uzram-swap@.service.in" |
        sed -e "s|@bindir@/uzram|$UZRAM|g" -e 's/%i/sw/g' -e 's/\$\$/$/g'
}
eval "$(unit_command ExecStart)" >"$WORK/unit.out" 2>&1 || fail "the unit's ExecStart: $(cat "$WORK/unit.out")"
dev=$("$UZRAM" status -n --raw -o attached sw)
at_exit "swapoff $dev"
if grep -q "^$dev " /proc/swaps; then
    eval "$(unit_command ExecStop)" >"$WORK/unit.out" 2>&1 || fail "the unit's ExecStop: $(cat "$WORK/unit.out")"
    grep -q "^$dev " /proc/swaps && fail "$dev is still swap after the unit's ExecStop"
    [[ $("$UZRAM" status -n --raw -o attached sw) == - ]] || fail "the unit's ExecStop did not detach $dev"
    pass "uzram-swap@.service's ExecStart made $dev swap, its ExecStop swapped off and detached it"
else
    skip_check "the unit's swap recipe: swapon did not take $dev here: $(cat "$WORK/unit.out")"
fi
if [[ -e /sys/module/nbd ]] || modprobe -q nbd 2>/dev/null; then
    if command -v nbd-client >/dev/null; then
        swap_recipe nbd
    else
        skip_check "swap recipe --via nbd: nbd-client is not installed"
    fi
else
    skip_check "swap recipe --via nbd: the kernel has no nbd module here"
fi

stop_server sw
echo "PASS: swap.sh"
