#!/usr/bin/env bash
# swap-programs.sh - VM scenario: one run of the real-program swap benchmark (issue 40,
# bench/vm-swap-programs.sh): an unmodified program that holds real data in its heap (GNU sort
# of real text, or python3 indexing a copy of dpkg's database) at a footprint a multiple of
# the guest's memory, with swap on one backend capped at the same compressed memory; its
# output's sha256 against the host's. Measures the outcome (completed, wrong output, OOM kill,
# other exit, deadline, stalled), wall time, swap write errors, OOM kills, the device's peak
# memory, the server's peak RSS and locked memory, where the CPU went, and, after the
# program's exit, what the device still holds against what the kernel still has swapped out.
#
#   swap-programs.sh PROGRAM SIZE BACKEND
#     PROGRAM  sort | dpkg (the row of bench/vm-swap-programs.sh's sizes.tsv, with SIZE)
#     BACKEND  zram-lz4 | zram-zstd   the guest's kernel zram (comp_algorithm, mem_limit)
#              uzram-lz4 | uzram-zstd | uzram-dense  `uzram serve --swap` (zstd: --algorithm zstd;
#                dense: DENSE_OPTIONS) + the uzram-swap@ unit's commands
#              uzram-lz4-sync | uzram-dense-sync  the same on the prototype ublk driver
#                (bench/ublk-sync: synchronous swap, freed slots discarded), loaded for the
#                run in place of the stock one (it fails without it: no fallback)
#              uzram-lz4-notify | uzram-dense-notify  the prototype with synchronous=0: freed
#                slots discarded, swap-in and swap-out as on the stock driver
#
# The host script prepares everything under build/vm/swap-programs (the inputs, sizes.tsv with
# the host's checksums, settings.bash: the cap, the disk size, the deadlines and the stall
# bound, the dense options). The program is killed at its deadline (run_deadline: a multiple
# of kernel zram lz4's time in this boot), or once swap writes have failed for STALL_SECONDS on
# end (0: never). Exit status: 0 measured (whatever the program
# did: the result line says it); 75 not run, the guest was not clean (swap on, a server left)
# after an earlier run; 1 the harness failed, or the guest could not be cleaned after the run
# (its result line is written first).
set -euo pipefail
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/swap-series.bash"

program=${1:?PROGRAM} size=${2:?SIZE} backend=${3:?BACKEND}
SP_DIR=$REPO/build/vm/swap-programs
TEST_NAME=$TEST_NAME-$program-$size-$backend # vm.sh's name of the run: its results, its peaks
vm_init
[[ -r $SP_DIR/settings.bash && -r $SP_DIR/sizes.tsv ]] ||
    fail "no $SP_DIR/settings.bash or sizes.tsv (bench/vm-swap-programs.sh writes them)"
# shellcheck source=/dev/null
# CAP DISKSIZE RUN_DEADLINE DEADLINE_RATIO DEADLINE_MIN STALL_SECONDS DENSE_OPTIONS
source "$SP_DIR/settings.bash"
read -r _ _ factor param rss_kib expected < <(awk -v p="$program" -v s="$size" \
    '$1 == p && $2 == s' "$SP_DIR/sizes.tsv") || fail "no row $program $size in sizes.tsv"
# Peaks sampled while the program runs, written where the host finds them even if the guest
# stops during the run.
PEAKS=$VM_OUT/$TEST_NAME.peaks
SERVER_OWN_SESSION=1 # a deadline's signal to this group must not stop a server under swap

# A run starts from a clean guest: no swap, no server, zram0 unused, the stock ublk driver.
guest_clean() {
    [[ $(awk 'NR > 1' /proc/swaps) == "" ]] && ! pgrep -x uzram >/dev/null &&
        [[ ! -e /sys/block/zram0/disksize || $(cat /sys/block/zram0/disksize) == 0 ]] &&
        ! prototype_loaded
}
if ! guest_clean; then
    echo "not run: the guest is not clean: $(awk 'NR > 1 {print $1}' /proc/swaps | paste -sd ' ') $(pgrep -ax uzram | head -n 3 | paste -sd ' ')"
    exit 75
fi

SERVER='' SWAPDEV=''
swap_on() {
    case $backend in
    zram-lz4 | zram-zstd)
        modprobe zram num_devices=1 2>/dev/null || [[ -e /sys/block/zram0 ]] || fail "no zram module"
        echo "${backend#zram-}" >/sys/block/zram0/comp_algorithm
        echo "$CAP" >/sys/block/zram0/mem_limit
        echo "$DISKSIZE" >/sys/block/zram0/disksize
        at_exit "timeout 60 swapoff /dev/zram0; echo 1 >/sys/block/zram0/reset"
        mkswap /dev/zram0 >/dev/null && swapon -p 100 /dev/zram0 || fail "mkswap/swapon /dev/zram0"
        SWAPDEV=/dev/zram0
        ;;
    uzram-lz4 | uzram-zstd | uzram-dense | uzram-lz4-sync | uzram-dense-sync | uzram-lz4-notify | uzram-dense-notify)
        if [[ $backend == *-sync || $backend == *-notify ]]; then
            [[ -r $PROTOTYPE_KO ]] || fail "no $PROTOTYPE_KO (bench/ublk-sync/build.sh builds it)"
            prototype_on synchronous=$([[ $backend == *-sync ]] && echo 1 || echo 0)
            echo "ublk_drv: $(modinfo -F description "$PROTOTYPE_KO")"
        else
            need_module ublk_drv
        fi
        local options=()
        [[ $backend != uzram-dense* ]] || options=("${DENSE_OPTIONS[@]}")
        [[ $backend != uzram-zstd ]] || options=(--algorithm zstd)
        start_server swap0 -s "$DISKSIZE" --swap --mem-limit "$CAP" "${options[@]}"
        SERVER=${SERVER_PID[swap0]}
        at_exit "timeout 60 sh -c $(printf '%q' "$(unit_command ExecStop swap0)")"
        sh -ec "$(unit_command ExecStart swap0)" >"$WORK/unit.out" 2>&1 ||
            fail "the unit's ExecStart: $(cat "$WORK/unit.out")"
        SWAPDEV=$("$UZRAM" status -n --raw -o attached swap0)
        ;;
    *) fail "unknown backend $backend" ;;
    esac
    grep -q "^$SWAPDEV " /proc/swaps || fail "$SWAPDEV is not swap"
}

dev_attr() { # NAME: the device's attribute (mm_stat, io_stat)
    if [[ $backend == zram-* ]]; then cat "/sys/block/zram0/$1"; else timeout 10 "$UZRAM" attr swap0 "$1"; fi
}
swap_used_kib() { echo $(($(meminfo_kib SwapTotal) - $(meminfo_kib SwapFree))); }
status_kib() { awk -v key="$2:" '$1 == key {print $2}' "/proc/$1/status" 2>/dev/null || echo -; }

# Every second: the peaks of the server's VmRSS, VmLck (what its locked mappings span: with
# MCL_ONFAULT far more than it has touched) and Locked (smaps_rollup: its resident pages that
# are locked), and of the swap in use, to PEAKS. Builtins only: no fork under memory pressure.
sampler() {
    local fd key value lck=0 rss=0 locked=0 swap=0 total=0 free=0 used
    # the last values written whole when it is stopped (a kill between the truncation and the
    # write of the loop's echo left the file empty)
    trap 'echo "rss_peak_kib=$rss locked_peak_kib=$locked vmlck_peak_kib=$lck swap_peak_kib=$swap" >"$PEAKS"; exit 0' TERM
    exec {fd}<> <(:)
    while :; do
        if [[ -n $SERVER ]]; then
            while read -r key value _; do
                [[ $key == VmLck: ]] && ((value > lck)) && lck=$value
                [[ $key == VmRSS: ]] && ((value > rss)) && rss=$value
            done <"/proc/$SERVER/status" 2>/dev/null || true
            while read -r key value _; do
                [[ $key == Locked: ]] && ((value > locked)) && locked=$value
            done <"/proc/$SERVER/smaps_rollup" 2>/dev/null || true
        fi
        while read -r key value _; do
            [[ $key == SwapTotal: ]] && total=$value
            [[ $key == SwapFree: ]] && free=$value
        done </proc/meminfo
        used=$((total - free))
        ((used > swap)) && swap=$used
        echo "rss_peak_kib=$rss locked_peak_kib=$locked vmlck_peak_kib=$lck swap_peak_kib=$swap" >"$PEAKS"
        read -r -t 1 -u "$fd" _ || true
    done
}

# Every 30 s: the device's orig_data_size / mem_used_total and compr_data_size / mem_used_total
# (hundredths), to SERIES as "SECONDS RATIO FILL HELD PRESSURE" lines: the densest mode's
# density while the program runs, not only after (issue 43), and how much of the memory holds
# objects (the rest: holes and span tails); what the device stores beyond the swap in use
# (MiB: pages of slots the kernel freed that it was not told of) and PSI's memory "some"
# avg10 (percent: what the server's stall guard weighs). SECONDS is when the sample was read, counted from just before the
# program started: under memory pressure the sampler runs late, and a sample stamped "30 s" by
# count was once read after the program's OOM kill, showing a pool far below its cap.
# uzram's attribute is read by a process: a fork every 30 s, apart from the sampler above.
SERIES=$VM_OUT/$TEST_NAME.series
series_sampler() {
    local fd start=$SECONDS mm held psi
    exec {fd}<> <(:)
    while :; do
        read -r -t 30 -u "$fd" _ || true
        read -r -a mm <<<"$(dev_attr mm_stat 2>/dev/null)" || continue
        held=$(((mm[0] / 1024 - $(swap_used_kib)) / 1024))
        psi=$(sed -n 's/^some avg10=\([0-9]*\).*/\1/p' /proc/pressure/memory 2>/dev/null)
        ((${mm[2]:-0} > 0)) &&
            echo "$((SECONDS - start)) $((mm[0] * 100 / mm[2])) $((mm[1] * 100 / mm[2])) $held ${psi:--}" >>"$SERIES"
    done
}

# Where the guest's CPU went while the program ran, in ticks of USER_HZ (100 a second): the
# guest's user, system (irq and softirq with it) and idle+iowait time; the server's process and
# its recompression thread; kswapd (kernel zram compresses in reclaim: there, or in the
# program's own system time). Printed as one line of numbers; fields_delta subtracts two.
task_ticks() { # STAT_FILE: utime + stime (the fields after the comm's closing bracket)
    local stat
    stat=$(cat "$1" 2>/dev/null) || { echo 0; return; }
    awk '{print $12 + $13}' <<<"${stat##*) }"
}
cpu_now() {
    local guest server=0 recomp=0 task kswapd=0 pid
    guest=$(awk '$1 == "cpu" {print $2 + $3, $4 + $7 + $8, $5 + $6}' /proc/stat)
    if [[ -n $SERVER && -d /proc/$SERVER ]]; then
        server=$(task_ticks "/proc/$SERVER/stat")
        for task in /proc/"$SERVER"/task/*; do
            [[ $(cat "$task/comm" 2>/dev/null) == uzram-recomp ]] && recomp=$((recomp + $(task_ticks "$task/stat")))
        done
    fi
    for pid in $(pgrep -x 'kswapd[0-9]*'); do kswapd=$((kswapd + $(task_ticks "/proc/$pid/stat"))); done
    echo "$guest $server $recomp $kswapd"
}
# fields_delta "NAME ..." BEFORE AFTER: NAME=after-before for each column, for the result line
fields_delta() {
    local -a names a b
    local i out=()
    read -r -a names <<<"$1"
    read -r -a a <<<"$2"
    read -r -a b <<<"$3"
    for i in "${!names[@]}"; do out+=("${names[i]}=$((b[i] - a[i]))"); done
    echo "${out[*]}"
}

# The block layer's requests to the swap device (reads, writes, discards completed: fields 1, 5
# and 12 of its stat): a ublk request is a round trip to the server, whatever its size, and
# swap I/Os per request show what the queue's limits let the kernel merge.
device_requests() { awk '{print $1, $5, $12}' "/sys/block/${SWAPDEV#/dev/}/stat"; }

# The failed swap-outs the kernel logged since the run began: its ratelimited lines plus the
# ones it says it suppressed. From the kernel, not the device: a server too busy to answer
# must not hide them. Counted in KMSG, what a follower of the kernel's log (dmesg -W, started
# before the program) wrote, not in the log read back: that is a ring (128 KiB in Debian's
# kernel), and once a stall's lines had filled it, a count read back stopped growing and the
# stall was never seen (sort at 2.5x on the dense mode: writes failing for 300 s, past the
# 180 s bound, until the host ended the boot).
KMSG=$WORK/kmsg
log_write_errors() {
    awk '/Write-error on swap-device/ {n++}
        /__end_swap_bio_write: [0-9]+ callbacks suppressed/ {for (i = 1; i < NF; i++) if ($(i + 1) == "callbacks") n += $i}
        END {print n + 0}' "$KMSG"
}

# The run's deadline: DEADLINE_RATIO times kernel zram lz4's time for the same program and size
# in this boot (it runs first of each size's backends), at least DEADLINE_MIN, at most
# RUN_DEADLINE; RUN_DEADLINE without such a time (zram lz4 itself, or it did not complete).
run_deadline() {
    local ref
    ref=$(sed -n 's/.* outcome=completed seconds=\([0-9.]*\) .*/\1/p' \
        "$VM_OUT/swap-programs-$program-$size-zram-lz4.results" 2>/dev/null | head -n 1)
    if [[ -z $ref || $backend == zram-lz4 ]]; then
        echo "$RUN_DEADLINE"
        return
    fi
    awk -v r="$ref" -v k="$DEADLINE_RATIO" -v lo="$DEADLINE_MIN" -v hi="$RUN_DEADLINE" \
        'BEGIN {d = int(r * k + 0.5); if (d < lo) d = lo; if (d > hi) d = hi; print d}'
}

# watch PID: every 10 s, until it kills the program's session PID: at DEADLINE, or once the
# kernel's swap writes have failed between every two checks for STALL_SECONDS (a device full
# at its cap, or a server that cannot store: tests/vm/swap.sh --limit saw the kernel retry
# them for 8 minutes without progress or an OOM kill); says which in $WORK/ended.
watch() {
    local pid=$1 start=$SECONDS last=-1 now failing=0
    while sleep 10; do
        if ((SECONDS - start >= DEADLINE)); then
            echo deadline >"$WORK/ended"
            break
        fi
        now=$(log_write_errors) || now=
        if [[ -n $now ]] && ((last >= 0 && now > last)); then failing=$((failing + 10)); else failing=0; fi
        last=${now:--1}
        if ((STALL_SECONDS > 0 && failing >= STALL_SECONDS)); then
            echo stalled >"$WORK/ended"
            break
        fi
    done
    kill -KILL -- "-$pid"
}

# The program, its output piped into sha256sum, in a session of its own (watch kills the
# whole of it); sets STATUS, SECONDS_TAKEN, ENDED (deadline, stalled or nothing) and SHA.
run_program() {
    local cmd pid watcher start
    case $program in
    sort) cmd="LC_ALL=C sort -S $((3 * $(stat -c %s "$SP_DIR/$param")))b --parallel=1 $(printf %q "$SP_DIR/$param")" ;;
    dpkg) cmd="python3 $(printf %q "$REPO/bench/swap-programs-dpkg.py") $(printf %q "$SP_DIR/dpkg") $param" ;;
    *) fail "unknown program $program" ;;
    esac
    echo "$cmd | sha256sum"
    sync
    echo 3 >/proc/sys/vm/drop_caches
    start=$(date +%s.%N)
    setsid bash -c "set -o pipefail; $cmd | sha256sum >$WORK/sha" </dev/null >"$WORK/program.out" 2>&1 &
    pid=$!
    watch "$pid" >/dev/null 2>&1 &
    watcher=$!
    set +e
    wait "$pid"
    STATUS=$?
    set -e
    SECONDS_TAKEN=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}')
    kill "$watcher" 2>/dev/null || true
    wait "$watcher" 2>/dev/null || true
    ENDED=$(cat "$WORK/ended" 2>/dev/null || true)
    # Its processes gone (a task in the kernel's swap-in leaves at its next return).
    kill -KILL -- "-$pid" 2>/dev/null || true
    local waited=0
    while pgrep -s "$pid" >/dev/null && ((waited < 120)); do
        sleep 1
        waited=$((waited + 1))
    done
    ! pgrep -s "$pid" >/dev/null || GONE_LATE="the program's processes outlived SIGKILL by 120 s"
    SHA=$(cut -d' ' -f1 "$WORK/sha" 2>/dev/null || true)
}

outcome() {
    local ooms=$1
    if ((STATUS == 0)) && [[ $SHA == "$expected" ]]; then
        echo completed
    elif [[ -n $ENDED ]]; then
        echo "$ENDED"
    elif ((STATUS == 0)); then
        echo wrong-output
    elif ((ooms > 0)); then
        echo oom-killed
    else
        echo "exit-$STATUS"
    fi
}

GONE_LATE=
DEADLINE=$(run_deadline)
swap_on
echo "$program size $size (${factor}x, $((rss_kib / 1024)) MiB on the host) on $backend ($SWAPDEV): cap $CAP, disksize $DISKSIZE, deadline $DEADLINE s, stall bound $STALL_SECONDS s"
stdbuf -oL dmesg -W >"$KMSG" &
kmsg_pid=$!
at_exit "kill $kmsg_pid"
oom_before=$(vmstat oom_kill) in_before=$(vmstat pswpin) out_before=$(vmstat pswpout)
ra_before=$(vmstat swap_ra) ra_hit_before=$(vmstat swap_ra_hit)
cpu_before=$(cpu_now)
requests_before=$(device_requests)
sampler &
sampler_pid=$!
at_exit "kill $sampler_pid"
: >"$SERIES"
series_sampler &
series_pid=$!
at_exit "kill $series_pid"
run_program
cpu=$(fields_delta "cpu_user cpu_system cpu_idle cpu_server cpu_recomp cpu_kswapd" "$cpu_before" "$(cpu_now)")
requests=$(fields_delta "dev_reads dev_writes dev_discards" "$requests_before" "$(device_requests)")
# What the device holds once the program's pages are free: zram hears of every freed slot,
# a ublk device only of discards (swapon --discard: of each 2 MiB cluster once all of it is
# free).
sleep 5
swap_after=$(swap_used_kib)
# (a server that died answers nothing: zeroes, and server_alive=0 below)
read -r -a mm <<<"$(dev_attr mm_stat 2>/dev/null || echo 0 0 0 0 0)"
read -r -a io <<<"$(dev_attr io_stat 2>/dev/null || echo 0 0)"
kill -TERM "$sampler_pid" "$series_pid" 2>/dev/null || true
wait "$sampler_pid" "$series_pid" 2>/dev/null || true
ooms=$(($(vmstat oom_kill) - oom_before))
victims=$(sed -n 's/.*Killed process [0-9]* (\([^)]*\)).*/\1/p' "$KMSG" | sort | uniq -c | awk '{printf "%s%s:%s", (NR > 1 ? "," : ""), $2, $1}')
log_errors=$(log_write_errors)
server=
if [[ -n $SERVER ]]; then
    alive=0
    [[ $(cat "/proc/$SERVER/comm" 2>/dev/null) == uzram ]] && alive=1
    empty=$("$UZRAM" attr swap0 debug_stat 2>/dev/null | sed -n 's/^reserve_empty: //p')
    server="server_alive=$alive server_hwm_kib=$(status_kib "$SERVER" VmHWM) server_lck_kib=$(status_kib "$SERVER" VmLck) reserve_empty=${empty:--}"
fi
held_freed=$((mm[0] / 1024 - swap_after))
((held_freed > 0)) || held_freed=0
line="$program $size $backend outcome=$(outcome "$ooms") seconds=$SECONDS_TAKEN deadline=$DEADLINE exit=$STATUS"
line+=" sha_ok=$([[ $SHA == "$expected" ]] && echo 1 || echo 0) oom_kills=$ooms victims=${victims:--}"
line+=" failed_writes=${io[1]} log_write_errors=$log_errors mem_used_max=${mm[4]} orig_after=${mm[0]}"
line+=" swap_used_after_kib=$swap_after held_freed_kib=$held_freed pswpin=$(($(vmstat pswpin) - in_before))"
line+=" pswpout=$(($(vmstat pswpout) - out_before)) swap_ra=$(($(vmstat swap_ra) - ra_before))"
line+=" swap_ra_hit=$(($(vmstat swap_ra_hit) - ra_hit_before)) $(series_fields "$SERIES")"
line+=" pages_compacted=${mm[6]:-0} huge_pages=${mm[7]:-0} $cpu $requests $(cat "$PEAKS") $server"
result run "$line"

# Back to a clean guest, bounded: swapoff reads back what is still swapped out. If it cannot
# be done, the guest is left as it is (no second swapoff without a bound, no server killed
# under swap: every process with a page there would crash, the guest's init among them); the
# runs after this one find it unclean and exit 75, and the host runs them in another boot.
unclean() {
    unset "SERVER_PID[swap0]"
    CLEANUP_HOOKS=()
    fail "$* (the guest is left unclean)"
}
[[ -z $GONE_LATE ]] || unclean "$GONE_LATE"
[[ ${alive:-1} == 1 ]] || unclean "the server died during the run"
if [[ $backend == zram-* ]]; then
    timeout 180 swapoff /dev/zram0 || unclean "swapoff /dev/zram0 did not finish within 180 s"
    echo 1 >/sys/block/zram0/reset
else
    timeout 180 sh -ec "$(unit_command ExecStop swap0)" >"$WORK/unit.out" 2>&1 ||
        unclean "the unit's ExecStop did not finish within 180 s: $(cat "$WORK/unit.out")"
    stop_server swap0
    if [[ $backend == *-sync || $backend == *-notify ]]; then stock_ublk || fail "the stock ublk driver is not back"; fi
fi
guest_clean || fail "the guest is not clean after the run"
pass "$program size $size on $backend: $(outcome "$ooms") in $SECONDS_TAKEN s"
