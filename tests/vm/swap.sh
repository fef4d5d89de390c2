#!/usr/bin/env bash
# swap.sh - VM scenario (b): swap on uzram under memory pressure, with the kernel's own swap
# code as the client. `uzram serve --swap` and the commands of systemd/uzram-swap@.service
# (attach --swap, which takes ublk where the kernel has it, mkswap, swapon), then memtouch
# touches 1.5 times the guest's memory in compressible pages, every page compared byte for
# byte when it comes back. Passes when every page verified, pages went out (pswpout) and are
# in the server (mm_stat), the server is the same process (not OOM-killed) and the kernel
# reported no blocked task (tests/vm/guest.sh watches the log).
#
#   swap.sh [--quick|--full][=PERCENT] [VIA]
#                          one round of 1.2 times the memory (make check), or two of 1.5
#                          (the default); =PERCENT touches that many percent of the memory
#                          instead (--quick=110 hung when each write waited 2 s for a dry pool
#                          reserve); with VIA (nbd, loop, ublk), attach --via VIA --swap
#                          --swapon instead of the unit's commands. After the workload the
#                          device must hold no more than 32 MiB beyond the kernel's swap in
#                          use (the freed slots' pages dropped by swapon --discard: 11 MiB
#                          held measured, 415 MiB without discard)
#   swap.sh --soak N [VIA] the two-round run N times (make vm-swap-soak), each with a new
#                          server; every run's outcome is printed (RESULT soak_run)
#   swap.sh --compare N    N rounds each, interleaved, of uzram and the guest's kernel zram as
#                          swap with the same workload: the time ratio (bench/vm-swap.sh)
#   swap.sh --writeback    --mem-limit 48M with --writeback-when-full to the VM's scratch disk:
#                          the pages that do not fit go to the backing device (bd_stat), no
#                          swap write error, and every page still comes back exact
#   swap.sh --limit        the server's --mem-limit far below what is swapped: the kernel
#                          gets write errors, the guest must not hang, the workload must end
#                          (done, or OOM-killed) before 180 s, the server lives on and what
#                          it stored reads back; then the guest's kernel zram at the same
#                          mem_limit; what the workload did in each is reported
set -euo pipefail
source "$(dirname "$0")/lib.bash"

mode=${1:---full}
count=${2:-1}
percent=
if [[ $mode == --quick=* || $mode == --full=* ]]; then
    percent=${mode#*=} mode=${mode%%=*}
    [[ $percent =~ ^[1-9][0-9]*$ ]] || fail "not a percentage: $percent"
fi
via=
[[ $mode == --quick || $mode == --full ]] && via=${2:-}
[[ $mode == --soak ]] && via=${3:-}
[[ -z $via || $via =~ ^(nbd|loop|ublk)$ ]] || fail "VIA is nbd, loop or ublk, not '$via'"
vm_init
# What the path needs from the kernel: without VIA the unit's attach --swap, which takes
# ublk and refuses a kernel without it (uzram(1), KERNELS).
case ${via:-ublk} in
ublk) need_module ublk_drv ;;
nbd) need_module nbd; need_tools nbd-client ;;
loop) need_module loop fuse ;;
esac
[[ -x $MEMTOUCH ]] || fail "no $MEMTOUCH (make all builds it)"
total_kib=$(meminfo_kib MemTotal)
touch_mib=$((total_kib * 3 / 2 / 1024))
# make check: 1.2 times the memory, one round (the full run is make vm-swap-soak)
[[ $mode == --quick ]] && touch_mib=$((total_kib * 6 / 5 / 1024))
[[ -z $percent ]] || touch_mib=$((total_kib * percent / 100 / 1024))
rounds=2
[[ $mode == --quick ]] && rounds=1
# A deadline (tests/vm/guest.sh: timeout signals the scenario's process group) must reach
# memtouch and this script but not the servers: with a server gone while its device is still
# swap, every process with a page there is killed, the guest's init among them, and the
# scenarios after this one never run. The cleanup runs swapoff, then stops the server.
SERVER_OWN_SESSION=1

# swap_on NAME SIZE LIMIT [serve options]: a --swap server and the unit's ExecStart.
swap_on() {
    local name=$1 size=$2 limit=$3
    shift 3
    start_server "$name" -s "$size" --swap --mem-limit "$limit" "$@"
    at_exit "sh -c $(printf '%q' "$(unit_command ExecStop "$name")")"
    local start
    start=$(unit_command ExecStart "$name")
    [[ -z $via ]] || start="$UZRAM attach --via $via --swap --swapon $name"
    [[ $via != loop ]] || modprobe -q loop
    sh -ec "$start" >"$WORK/unit.out" 2>&1 || fail "attach, mkswap, swapon: $(cat "$WORK/unit.out")"
    SWAPDEV=$("$UZRAM" status -n --raw -o attached "$name")
    grep -q "^$SWAPDEV " /proc/swaps || fail "$SWAPDEV is not swap after the unit's ExecStart"
    reserve_below_requests "$name"
}

# serve --swap runs its threads SCHED_FIFO at priority 2 and the reserve's and the heap keeper's
# (src/attach/swap.c) at 1: at the same
# priority its page faults spun in reclaim and kept the thread that completes swap-outs off
# the one CPU of a guest for minutes (lib/pool/pool_reserve.c).
reserve_below_requests() { # NAME
    local task policy others=0 reserve=
    for task in /proc/"${SERVER_PID[$1]}"/task/*; do
        policy=$(chrt -p "${task##*/}" | sed -n 's/.*scheduling policy: //p; s/.*scheduling priority: / /p' | paste -sd '')
        if [[ $(cat "$task/comm") == uzram-reserve ]]; then
            reserve=$policy
        elif [[ $(cat "$task/comm") == uzram-heap ]]; then # the heap's keeper, as the reserve's
            [[ $policy == "SCHED_FIFO 1" ]] || fail "the heap keeper's thread runs $policy (SCHED_FIFO 1 expected)"
        else
            [[ $policy == "SCHED_FIFO 2" ]] || fail "thread ${task##*/} ($(cat "$task/comm")) runs $policy (SCHED_FIFO 2 expected)"
            others=$((others + 1))
        fi
    done
    [[ $reserve == "SCHED_FIFO 1" ]] || fail "the reserve's thread runs ${reserve:-nowhere} (SCHED_FIFO 1 expected)"
    ((others > 0)) || fail "the --swap server has no other thread"
}

swap_off() { # NAME
    sh -ec "$(unit_command ExecStop "$1")" >"$WORK/unit.out" 2>&1 ||
        fail "the unit's ExecStop: $(cat "$WORK/unit.out")"
    ! grep -q "^$SWAPDEV " /proc/swaps || fail "$SWAPDEV is still swap after the unit's ExecStop"
}

# How swap went since the scenario began (guest.sh clears the kernel log before it).
swap_errors() { dmesg | grep -c "Write-error on swap-device" || true; }
oom_kills() { dmesg | grep -cE "Out of memory: Killed process" || true; }
# The kernel's NBD client gave up its connection to the server: every swap-out from then
# on fails (on 6.1, a send under memory pressure failed with EAGAIN).
NBD_DEAD='Dead connection|shutting down sockets|Receive control failed'

elapsed() { awk -v start="$1" -v end="$(date +%s.%N)" 'BEGIN {printf "%.1f", end - start}'; }

# held_freed NAME: once the workload has exited, what the device NAME still holds beyond the
# kernel's swap in use (KiB): pages of slots the kernel freed that the device never heard of.
# The kernel tells uzram of freed slots only by discards (swapon --discard), issued from a
# work item once a whole 2 MiB cluster is free: waits up to 30 s for them to arrive. What
# stays is the freed slots of clusters that still hold a page in use (the guest's other
# processes') or a slot in a CPU's slot cache: HELD_FREED_MAX_KIB, 32 such clusters. How many
# there are depends on where those pages landed: a fresh clone's make check at 8d03101 found
# 17 (34 MiB; the bound was 16 then). Without discard the device keeps hundreds of MiB.
HELD_FREED_MAX_KIB=$((64 << 10))
held_freed() {
    local mm held waited=0
    while :; do
        read -r -a mm <<<"$("$UZRAM" attr "$1" mm_stat)"
        held=$((mm[0] / 1024 - ($(meminfo_kib SwapTotal) - $(meminfo_kib SwapFree))))
        ((held > HELD_FREED_MAX_KIB && waited < 30)) || break
        sleep 1
        waited=$((waited + 1))
    done
    echo "$held"
}

# One pressure run on the current swap: memtouch, then the checks. Prints its seconds.
pressure_run() { # NAME (a uzram server, or "zram") ROUNDS
    local name=$1 rounds=$2 out_before start took pid touch seconds first
    out_before=$(vmstat pswpout)
    [[ $name == zram ]] || pid=${SERVER_PID[$name]}
    start=$(date +%s.%N)
    "$MEMTOUCH" "$touch_mib" "$rounds" "$RANDOM" >"$WORK/memtouch.out" 2>&1 &
    touch=$!
    while :; do
        if [[ $via == nbd ]] && kernel_log_has "$NBD_DEAD"; then
            kill -KILL "$touch" 2>/dev/null
            wait "$touch" || true
            seconds=$(elapsed "$start")
            first=$(dmesg | grep -m 1 -E "block nbd|$NBD_DEAD" | sed 's/^[][ 0-9.]*//')
            fail "the kernel's NBD client lost its connection to the server after $seconds s: $first; $(swap_errors) swap write errors logged"
        fi
        kill -0 "$touch" 2>/dev/null || break
        sleep 2
    done
    wait "$touch" ||
        fail "memtouch on $name swap: $(tail -n 5 "$WORK/memtouch.out"); $(oom_kills) OOM kills, $(swap_errors) swap write errors logged"
    took=$(elapsed "$start")
    grep -q " 0 pages differed" "$WORK/memtouch.out" || fail "memtouch: $(tail -n 3 "$WORK/memtouch.out")"
    [[ $(vmstat pswpout) -gt $out_before ]] || fail "no page went out to swap (pswpout stayed $out_before)"
    if [[ $name != zram ]]; then
        [[ $(cat /proc/"$pid"/comm 2>/dev/null) == uzram ]] || fail "the server (pid $pid) is gone"
        ! kernel_log_has "Killed process $pid " || fail "the OOM killer killed the server"
    fi
    echo "$took"
}

# One run of memtouch at a mem_limit far below what it swaps out, on WHO (uzram or zram),
# bounded by LIMIT_S: it finishes, the OOM killer takes it, or it makes no progress and is
# killed at the bound. Each is an outcome to report for zram; uzram must not reach the bound
# (its guard asks for an OOM kill after 30 s of failed swap-outs under memory stall: uzram(1),
# SWAP). A hung task (guest.sh), a dead server or a swapoff that cannot read everything back
# fails.
LIMIT_S=180
limit_run() { # WHO
    local who=$1 pid status outcome errors_before errors out_before ooms_before ooms
    errors_before=$(dmesg | grep -c "Write-error on swap-device" || true)
    ooms_before=$(dmesg | grep -cE "Killed process [0-9]+ \(memtouch\)" || true)
    out_before=$(vmstat pswpout)
    if [[ $who == uzram ]]; then
        swap_on lim 2G 24M
        pid=${SERVER_PID[lim]}
    else
        echo 1 >/sys/block/zram0/reset
        echo lz4 >/sys/block/zram0/comp_algorithm
        echo 24M >/sys/block/zram0/mem_limit
        echo 2G >/sys/block/zram0/disksize
        mkswap /dev/zram0 >/dev/null && swapon -p 100 /dev/zram0
        at_exit "swapoff /dev/zram0; echo 1 >/sys/block/zram0/reset"
        SWAPDEV=/dev/zram0
    fi
    set +e
    local start
    start=$(date +%s.%N)
    timeout -s KILL "$LIMIT_S" "$MEMTOUCH" "$touch_mib" 1 >"$WORK/memtouch.out" 2>&1
    status=$?
    set -e
    local took
    took=$(elapsed "$start")
    errors=$(($(dmesg | grep -c "Write-error on swap-device" || true) - errors_before))
    ooms=$(($(dmesg | grep -cE "Killed process [0-9]+ \(memtouch\)" || true) - ooms_before))
    case $status in
    0) outcome="memtouch finished" ;;
    137) outcome="memtouch killed $( ((ooms > 0)) && echo "by the OOM killer" || echo "at the ${LIMIT_S} s bound, no OOM kill")" ;;
    *) fail "$who: memtouch ended with status $status: $(tail -n 3 "$WORK/memtouch.out")" ;;
    esac
    local failed=
    if [[ $who == uzram ]]; then
        [[ $(cat /proc/"$pid"/comm 2>/dev/null) == uzram ]] || fail "the server is gone"
        read -r -a mm <<<"$("$UZRAM" attr lim mm_stat)"
        read -r -a io <<<"$("$UZRAM" attr lim io_stat)"
        failed=", failed_writes ${io[1]}"
        ((mm[2] <= 24 << 20)) || fail "mem_used_total ${mm[2]} passed the 24 MiB limit"
        [[ $outcome != *"at the ${LIMIT_S} s bound"* ]] ||
            fail "uzram at mem_limit 24M: no progress and no OOM kill in $LIMIT_S s ($errors swap write errors, failed_writes ${io[1]}): a livelock"
        # the kill the server asked for, and said so
        [[ $outcome != *"by the OOM killer"* ]] ||
            grep -q "asked the kernel's OOM killer to end a task" "$WORK/server-lim.err" ||
            fail "memtouch was OOM-killed but the server's log does not say it asked: $(tail -n 3 "$WORK/server-lim.err")"
        swap_off lim # every page still swapped out comes back from the server
        stop_server lim
    else
        read -r -a mm </sys/block/zram0/mm_stat
        swapoff /dev/zram0 || fail "swapoff /dev/zram0"
        echo 1 >/sys/block/zram0/reset
    fi
    pass "$who at mem_limit 24M: $outcome after $took s, $errors swap write errors$failed, pswpout +$(($(vmstat pswpout) - out_before)), mem_used_max ${mm[4]}, swapoff read everything back"
    result limit_outcome "$who" "$status" "$errors" "$took"
}

case $mode in
--quick | --full)
    swap_on sw 2G 320M
    took=$(pressure_run sw "$rounds")
    read -r -a mm <<<"$("$UZRAM" attr sw mm_stat)"
    read -r -a io <<<"$("$UZRAM" attr sw io_stat)"
    ((mm[4] > 0)) || fail "mm_stat shows no page ever in the server: ${mm[*]}"
    empty=$("$UZRAM" attr sw debug_stat | sed -n 's/^reserve_empty: //p')
    errors=$(swap_errors)
    held=$(held_freed sw)
    ((held <= HELD_FREED_MAX_KIB)) || fail "after the workload the device holds $held KiB beyond the swap in use: pages of freed slots (mm_stat $("$UZRAM" attr sw mm_stat), io_stat $("$UZRAM" attr sw io_stat))"
    read -r -a io <<<"$("$UZRAM" attr sw io_stat)"
    pass "$touch_mib MiB touched $rounds time(s) in $((total_kib / 1024)) MiB on $SWAPDEV: every page verified, pswpout $(vmstat pswpout), mm_stat ${mm[*]}, failed_writes ${io[1]}, reserve_empty $empty, swap write errors logged $errors, $took s; after it $held KiB held beyond the swap in use, notify_free ${io[3]}"
    # What the server holds beyond its pool and page table, within uzram(1) SWAP's budget for
    # these options (16 MiB; tests/vm/swap-memory.sh measures the dense mode too).
    server_memory sw
    ((MEM_OVERHEAD_KIB <= 16 << 10)) || fail "the server holds $MEM_OVERHEAD_KIB KiB beyond its pool and page table, over the 16 MiB budget"
    result swap_run "$touch_mib" "$rounds" "$took" "${mm[0]}" "${mm[2]}"
    swap_off sw
    stop_server sw
    ;;
--soak)
    for ((run = 1; run <= count; run++)); do
        swap_on "sw$run" 2G 320M
        took=$(pressure_run "sw$run" 2)
        swap_off "sw$run"
        stop_server "sw$run"
        pass "soak run $run of $count: $touch_mib MiB touched twice on $SWAPDEV, every page verified, $(swap_errors) swap write errors logged so far, $took s"
        result soak_run "$run" "$touch_mib" "$took"
    done
    ;;
--compare)
    modprobe zram num_devices=1 2>/dev/null || [[ -e /sys/block/zram0 ]] || skip "no zram module"
    for ((round = 1; round <= count; round++)); do
        swap_on "sw$round" 2G 320M
        uz=$(pressure_run "sw$round" 2)
        swap_off "sw$round"
        stop_server "sw$round"
        echo 1 >/sys/block/zram0/reset
        echo lz4 >/sys/block/zram0/comp_algorithm
        echo 320M >/sys/block/zram0/mem_limit
        echo 2G >/sys/block/zram0/disksize
        mkswap /dev/zram0 >/dev/null && swapon -p 100 /dev/zram0
        at_exit "swapoff /dev/zram0; echo 1 >/sys/block/zram0/reset"
        kz=$(pressure_run zram 2)
        swapoff /dev/zram0 && echo 1 >/sys/block/zram0/reset
        pass "round $round: uzram $uz s, kernel zram $kz s"
        result compare_round "$round" "$touch_mib" "$uz" "$kz"
    done
    ;;
--writeback)
    [[ -b $VM_SCRATCH ]] || skip "no scratch disk for the backing device"
    swap_on wb 2G 48M --backing-file "$VM_SCRATCH" --writeback-when-full
    errors_before=$(dmesg | grep -c "Write-error on swap-device" || true)
    took=$(pressure_run wb 1)
    # at the limit a write makes room on the backing device: the kernel sees no error
    errors=$(($(dmesg | grep -c "Write-error on swap-device" || true) - errors_before))
    ((errors == 0)) || fail "$errors swap write errors with room on the backing device"
    read -r -a bd <<<"$("$UZRAM" attr wb bd_stat)"
    read -r -a mm <<<"$("$UZRAM" attr wb mm_stat)"
    ((bd[0] > 0)) || fail "bd_stat shows nothing written back: ${bd[*]}"
    ((mm[2] <= 48 << 20)) || fail "mem_used_total ${mm[2]} passed the 48 MiB limit"
    swap_off wb
    stop_server wb
    pass "--writeback-when-full: $touch_mib MiB touched, every page verified, bd_stat ${bd[*]}, mm_stat ${mm[*]}, $took s"
    result writeback_run "$touch_mib" "$took" "${bd[*]}"
    ;;
--limit)
    # 24 MiB of memory for what needs about ten times that: swap-outs fail. The same with the
    # guest's kernel zram at the same mem_limit, for the record (docs/uzram.1, SWAP).
    limit_run uzram
    modprobe zram num_devices=1 2>/dev/null || [[ -e /sys/block/zram0 ]] || skip "no zram module"
    limit_run zram
    ;;
*) fail "unknown mode $mode" ;;
esac
echo "PASS: swap.sh $mode"
