#!/usr/bin/env bash
# swap-memory.sh - VM scenario: the memory a `serve --swap` server holds beyond its pool and
# page table, against the budget uzram(1) SWAP gives (issue 40): memtouch pushes 1.2 times
# the guest's memory through swap on the server (2 GiB disk, 320 MiB limit), every page
# compared when it comes back; the server's memory is sampled during the run and read by part
# after it (tests/vm/lib.bash's server_memory). Fails when VmRSS less mem_used_total and
# table_mem passes the budget after the run, or during it in the lz4 mode (the dense mode's
# dictionary training holds its samples and zstd's tables for a few seconds: reported).
#
#   swap-memory.sh [MODE]...   MODE: lz4 (the default options; budget 16 MiB) or dense
#                              (the densest swap mode's, swap-dense.bash; budget 32 MiB);
#                              both by default
set -euo pipefail
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/swap-dense.bash"

modes=("$@")
((${#modes[@]} > 0)) || modes=(lz4 dense)
vm_init
need_module ublk_drv
[[ -x $MEMTOUCH ]] || fail "no $MEMTOUCH (make all builds it)"
total_kib=$(meminfo_kib MemTotal)
touch_mib=$((total_kib * 6 / 5 / 1024))
# As tests/vm/swap.sh: a deadline's signal must not stop a server whose device is swap.
SERVER_OWN_SESSION=1

# sample NAME: every 2 s until memtouch ends, the most VmRSS less the pool and the table.
sample() { # NAME TABLE_KIB
    local pid=${SERVER_PID[$1]} table=$2 most=0 rss pool
    while [[ ! -e $WORK/done ]]; do
        rss=$(awk '$1 == "VmRSS:" {print $2}' /proc/"$pid"/status)
        pool=$("$UZRAM" attr "$1" mm_stat | awk '{print int($3 / 1024)}')
        ((rss - pool - table <= most)) || most=$((rss - pool - table))
        echo "$most" >"$WORK/most"
        sleep 2
    done
}

over=()
for mode in "${modes[@]}"; do
    case $mode in
    lz4) options=() budget_mib=16 during=1 ;;
    dense)
        options=("${SWAP_DENSE_OPTIONS[@]}")
        budget_mib=32 during=0
        ;;
    *) fail "unknown mode $mode (lz4, dense)" ;;
    esac
    name=mem$mode
    start_server "$name" -s 2G --swap --mem-limit 320M "${options[@]}"
    dev=$("$UZRAM" attach --swap "$name") || fail "attach --swap $name"
    at_exit "swapoff $dev 2>/dev/null; $UZRAM detach $name"
    mkswap "$dev" >/dev/null && swapon -p 100 "$dev" || fail "mkswap, swapon $dev"
    server_memory "$name"
    table_kib=$(("$("$UZRAM" attr "$name" debug_stat | sed -n 's/^table_mem: //p')" / 1024))
    rm -f "$WORK/done" "$WORK/most"
    sample "$name" "$table_kib" &
    sampler=$!
    out_before=$(vmstat pswpout)
    "$MEMTOUCH" "$touch_mib" 1 "$RANDOM" >"$WORK/memtouch.out" 2>&1 ||
        fail "memtouch ($mode): $(tail -n 5 "$WORK/memtouch.out")"
    touch "$WORK/done"
    wait "$sampler"
    grep -q " 0 pages differed" "$WORK/memtouch.out" || fail "memtouch: $(tail -n 3 "$WORK/memtouch.out")"
    (($(vmstat pswpout) > out_before)) || fail "no page went out to swap"
    [[ $(cat /proc/"${SERVER_PID[$name]}"/comm 2>/dev/null) == uzram ]] || fail "the server is gone"
    most=$(cat "$WORK/most")
    # The idle recompressor of the dense mode: a few seconds for it to pack what stayed out.
    [[ $mode == lz4 ]] || sleep 5
    cp /proc/"${SERVER_PID[$name]}"/smaps "$VM_OUT/swap-memory-$mode.smaps"
    server_memory "$name"
    read -r -a io <<<"$("$UZRAM" attr "$name" io_stat)"
    budget=$((budget_mib << 10))
    line="$mode: $touch_mib MiB touched, every page verified, failed_writes ${io[1]}; beyond pool and table: $most KiB at most during the run, $MEM_OVERHEAD_KIB KiB after (budget $budget_mib MiB)"
    result swap_memory "$mode" "$most" "$MEM_OVERHEAD_KIB" "$budget"
    swapoff "$dev" || fail "swapoff $dev"
    "$UZRAM" detach "$name"
    stop_server "$name"
    # Every mode is measured before the verdict: the figures of each are the report.
    if (((during == 0 || most <= budget) && MEM_OVERHEAD_KIB <= budget)); then
        pass "$line"
    else
        echo "over budget: $line"
        over+=("$mode")
    fi
done
((${#over[@]} == 0)) || fail "over the budget of uzram(1) SWAP: ${over[*]}"
echo "PASS: swap-memory.sh ${modes[*]}"
