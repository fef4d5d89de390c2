#!/usr/bin/env bash
# ublk-restart.sh - VM scenario of issue 29: the data of a ublk device outlive its server.
# Needs `uzram serve --persist=PATH` (the device's state in a file that a new server adopts) and
# `uzram restart` (a planned restart in place); without them it FAILS, saying so (it is not in
# make check's VM stage: `make vm-restart` runs it).
#
#   ublk-restart.sh [ext4 [KILLS]] [swap] [planned] [dedup] [bundles]
#                                                       (default: ext4 with 20 kills, planned)
#
# ext4:    ext4 on the device, a tree copied on it; fio random writes verified (crc32c) in rounds
#          in a file on it while the server is SIGKILLed KILLS times at random moments and started
#          again with the same state each time (it adopts the state and recovers the device);
#          every fio round verifies, the tree reads back equal after dropping caches, e2fsck
#          finds nothing.
# swap:    swap on the device under memory pressure (memtouch, 6/5 of the guest's memory, every
#          page verified), its state on a tmpfs mounted noswap; in the middle the server is
#          SIGKILLed and started again (by locked_restart, which is locked in memory: this
#          shell's own pages may be on the device), later `uzram restart`; every page verified,
#          no OOM kill, swapoff reads everything back. It hung the guest before: after the
#          SIGKILL the successor filled its heap (serve --swap's 24 MiB memset) from free memory
#          that memtouch had taken, and waited in reclaim for swap-out to its own device (sysrq-t:
#          one single-threaded uzram, after memtouch's pid, RAX=RSI=0x5a, 1.7 MiB short). Now the
#          state keeps 32 MiB for the successor besides the reserve (uzram(1), SWAP). Run by
#          name (ublk-restart:swap), not among make vm-restart's default parts (minutes more).
# planned: `uzram restart` under fio's verified random writes: no I/O error, every round verifies.
# dedup: the servers of ext4 and planned with --dedup (the index in the state too).
# bundles: the ext4 and planned servers pack idle pages into bundles (--recompress
#          algo=zstd,level=3,group=8 --recompress-idle 1), which their states keep: each part
#          says how many bundles the server held before its last kill or restart.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

PARTS=()
KILLS=20
SERVE=() # what the servers of ext4 and planned are given besides size and state (dedup, bundles)
BUNDLES=0
while (($#)); do
    case $1 in
    ext4 | swap | planned) PARTS+=("$1") ;;
    bundles) SERVE+=(--recompress algo=zstd,level=3,group=8 --recompress-idle 1) BUNDLES=1 ;;
    [0-9]*) KILLS=$1 ;;
    dedup) SERVE+=(--dedup) ;;
    *) fail "unknown argument $1 (ext4 [KILLS], swap, planned, dedup, bundles)" ;;
    esac
    shift
done
((${#PARTS[@]})) || PARTS=(ext4 planned)
vm_init
need_module ublk_drv
need_tools mkfs.ext4 e2fsck fio
LOCKED_RESTART=$(dirname "$UZRAM")/tests/vm/locked_restart
# The help read whole first: grep -q ends at the first match, and under pipefail the writer's
# SIGPIPE would fail the pipeline.
[[ $("$UZRAM" serve --help 2>&1) == *--persist* ]] ||
    fail "this uzram's serve has no --persist: the state file (i29-state) and serve --persist (i29-serve) are not in this build; this scenario cannot run without them"
MNT=$WORK/mnt
mkdir -p "$MNT"
at_exit "umount -l $MNT"
STOP=$WORK/stop-load
LOAD_PID=""

# restart_after_kill NAME STATE DEV ARGS...: SIGKILL the server NAME, start it again on the same
# state; it must serve DEV again (recovered, not a new node) within 30 s.
restart_after_kill() {
    local name=$1 state=$2 dev=$3 pid
    shift 3
    pid=${SERVER_PID[$name]}
    kill -KILL "$pid"
    wait "$pid" 2>/dev/null || true
    unset "SERVER_PID[$name]"
    [[ -b $dev ]] || fail "$dev went with its server"
    # The dead server's sockets: a crash leaves them (the new server's own cleanup is not what
    # is tested here, and start_server waits for them to appear).
    rm -f "$(sock_of "$name")" "$(ctl_of "$name")"
    start_server "$name" --persist="$state" "$@"
    wait_for 30 "$name serving $dev again" bash -c "'$UZRAM' status | grep -qE '^$name .*$dev( |\$)'"
}

# load_rounds DIR SEED: fio rounds of verified random writes in DIR until $STOP exists; the
# first failure's output in $WORK/load.failed.
load_rounds() {
    local dir=$1 seed=$2 round=0
    while [[ ! -e $STOP ]]; do
        round=$((round + 1))
        if ! fio --name=v --directory="$dir" --size=32M --ioengine=libaio --direct=1 \
            --rw=randwrite --bsrange=4k-64k --iodepth=16 --verify=crc32c --do_verify=1 \
            --verify_fatal=1 --randseed=$((seed + round)) --output="$WORK/load.out" >/dev/null 2>&1; then
            cp "$WORK/load.out" "$WORK/load.failed"
            return 1
        fi
        echo "$round" >"$WORK/load.rounds"
    done
}
start_load() { # DIR
    rm -f "$STOP" "$WORK/load.failed" "$WORK/load.rounds"
    load_rounds "$1" "$RANDOM" &
    LOAD_PID=$!
    at_exit "touch $STOP; kill \$LOAD_PID"
}
stop_load() {
    touch "$STOP"
    timeout 300 tail --pid="$LOAD_PID" -f /dev/null || fail "the fio rounds did not end within 300 s"
    wait "$LOAD_PID" || fail "a fio round failed: $(grep -m 5 -iE 'error|bad|verify|err=' "$WORK/load.failed")"
    LOAD_PID=""
}
load_alive() { kill -0 "$LOAD_PID" 2>/dev/null || fail "$1: the fio rounds ended: $(grep -m 5 -iE 'error|bad|verify|err=' "$WORK/load.failed" 2>/dev/null)"; }
# bundles_of NAME: the bundles server NAME holds (debug_stat's bundles), for the pass lines.
bundles_of() { "$UZRAM" attr "$1" debug_stat | awk '$1 == "bundles:" {print $2}'; }

part_ext4() {
    local state=/dev/shm/rx.state dev
    make_tree
    start_server rx -s 512M --persist="$state" "${SERVE[@]}"
    at_exit "rm -f $state"
    dev=$("$UZRAM" attach --via ublk rx) || fail "attach rx"
    mkfs.ext4 -q "$dev" && mount "$dev" "$MNT" || fail "mkfs/mount $dev"
    cp -a "$TREE" "$MNT/tree"
    mkdir "$MNT/load"
    sync
    start_load "$MNT/load"
    local kill bundles=0
    for ((kill = 1; kill <= KILLS; kill++)); do
        sleep "$((1 + RANDOM % 4)).$((RANDOM % 10))"
        load_alive "before kill $kill"
        bundles=$(bundles_of rx)
        restart_after_kill rx "$state" "$dev" -s 512M "${SERVE[@]}"
        load_alive "after kill $kill"
    done
    stop_load
    echo 3 >/proc/sys/vm/drop_caches
    diff -r "$TREE" "$MNT/tree" >"$WORK/diff" || fail "the tree differs after $KILLS kills: $(head -n 5 "$WORK/diff")"
    umount "$MNT"
    e2fsck -fn "$dev" >"$WORK/fsck" 2>&1 || fail "e2fsck after $KILLS kills: $(tail -n 5 "$WORK/fsck")"
    ! kernel_log_has "I/O error, dev ${dev#/dev/}" || fail "the kernel logged I/O errors on $dev"
    pass "ext4 on $dev${SERVE[*]:+ (${SERVE[*]})}: $KILLS SIGKILLs, each time a new server took the state and the device over; $(cat "$WORK/load.rounds" 2>/dev/null) fio rounds verified, the tree equal, e2fsck clean$( ((BUNDLES)) && echo "; $bundles bundles before the last kill")"
    result ublk_restart_kills "$KILLS"
    "$UZRAM" detach rx
    stop_server rx
}

# restart_locked NAME DEV ARGS...: restart_after_kill for a server whose device is swap. Once
# the server is dead, a page swapped out onto DEV waits for a new one, this shell's pages too:
# the kill and the new start are locked_restart's, which is locked in memory and becomes the
# new server (this shell's child, as the old one was); this shell reaps the old one when it
# can run again.
restart_locked() {
    local name=$1 dev=$2 old
    shift 2
    old=${SERVER_PID[$name]}
    rm -f "$(sock_of "$name")" "$(ctl_of "$name")"
    "$LOCKED_RESTART" "$old" "$UZRAM" serve -n "$name" "$@" >"$WORK/server-$name.out" 2>"$WORK/server-$name.err" &
    SERVER_PID[$name]=$!
    wait "$old" 2>/dev/null || true
    wait_for 60 "$name serving $dev again" bash -c "'$UZRAM' status | grep -qE '^$name .*$dev( |\$)'"
    server_alive "$name" || fail "the new server $name is gone"
}

swapped_out_mib() { echo $(($(vmstat pswpout) * 4096 >> 20)); }

part_swap() {
    [[ -x $MEMTOUCH ]] || fail "no $MEMTOUCH (make all builds it)"
    [[ -x $LOCKED_RESTART ]] || fail "no $LOCKED_RESTART (make all builds it)"
    local dir=$WORK/state dev touch_mib pid args start kill_at planned_at
    # serve refuses the state of a swap device anywhere its pages could be swapped out.
    mkdir -p "$dir"
    mount -t tmpfs -o noswap,size=512M,mode=0700 uzram-state "$dir" ||
        fail "mount -t tmpfs -o noswap (Linux 6.4+) on $dir"
    at_exit "umount -l $dir"
    # The server's output there too: a page of a log file on the guest's /tmp swapped out onto
    # the device hung the new server's first write to it (shmem_swapin_folio), as it would
    # hang any write of the server's while no server serves the device.
    ln -sf "$dir/server-rs.out" "$WORK/server-rs.out"
    ln -sf "$dir/server-rs.err" "$WORK/server-rs.err"
    args=(-s 2G --swap --mem-limit 320M --persist="$dir/rs.state")
    touch_mib=$(($(meminfo_kib MemTotal) * 6 / 5 / 1024))
    start_server rs "${args[@]}"
    at_exit "swapoff -a"
    dev=$("$UZRAM" attach --via ublk --swap rs) || fail "attach --swap rs"
    mkswap "$dev" >/dev/null && swapon -p 100 "$dev" || fail "mkswap/swapon $dev"
    start=$(swapped_out_mib)
    kill_at=$((start + touch_mib / 4)) planned_at=$((start + touch_mib / 2))
    "$MEMTOUCH" "$touch_mib" 2 "$RANDOM" >"$WORK/memtouch.out" 2>&1 &
    pid=$!
    wait_for 300 "$((touch_mib / 4)) MiB swapped out" bash -c "(( \$(awk '\$1 == \"pswpout\" {print \$2}' /proc/vmstat) * 4096 >> 20 >= $kill_at ))"
    kill -0 "$pid" 2>/dev/null || fail "memtouch ended before the SIGKILL: $(tail -n 3 "$WORK/memtouch.out")"
    restart_locked rs "$dev" "${args[@]}"
    wait_for 300 "$((touch_mib / 2)) MiB swapped out" bash -c "(( \$(awk '\$1 == \"pswpout\" {print \$2}' /proc/vmstat) * 4096 >> 20 >= $planned_at ))"
    kill -0 "$pid" 2>/dev/null || fail "memtouch ended before the planned restart: $(tail -n 3 "$WORK/memtouch.out")"
    timeout 120 "$UZRAM" restart rs >"$WORK/restart.out" 2>&1 || fail "uzram restart rs: $(cat "$WORK/restart.out")"
    timeout 900 tail --pid=$pid -f /dev/null || fail "memtouch still runs 900 s after the restarts"
    wait $pid || fail "memtouch: $(tail -n 5 "$WORK/memtouch.out")"
    grep -q " 0 pages differed" "$WORK/memtouch.out" || fail "memtouch: $(tail -n 3 "$WORK/memtouch.out")"
    server_alive rs || fail "the server rs is gone after the planned restart"
    timeout 600 swapoff "$dev" || fail "swapoff $dev after the restarts"
    ! kernel_log_has "I/O error, dev ${dev#/dev/}" || fail "the kernel logged I/O errors on $dev"
    # Swap-outs the server refused for want of memory (ENOMEM: "kernel resource error"; the
    # kernel kept those pages), as the kernel logged them (rate-limited) and as the last
    # server counted them since its start.
    local refused empty
    refused=$(dmesg | grep -c "kernel resource error, dev ${dev#/dev/}" || true)
    empty=$("$UZRAM" attr rs debug_stat | sed -n 's/^reserve_empty: //p')
    pass "swap on $dev under pressure ($touch_mib MiB touched twice, $(($(swapped_out_mib) - start)) MiB swapped out): the server SIGKILLed at $((touch_mib / 4)) MiB and started again on its state, \`uzram restart\` at $((touch_mib / 2)) MiB; every page verified, swapoff read everything back; $refused refused writes logged, reserve_empty $empty since the last start"
    "$UZRAM" detach rs
    stop_server rs
    # Now, not at exit: the state kept what swap stored (up to --mem-limit), and on a noswap
    # tmpfs that memory is unevictable; the next part starved without it (jbd2 hung).
    umount "$dir" || fail "umount $dir (the state of rs)"
}

part_planned() {
    local state=/dev/shm/rp.state dev pid
    start_server rp -s 512M --persist="$state" "${SERVE[@]}"
    at_exit "rm -f $state"
    dev=$("$UZRAM" attach --via ublk rp) || fail "attach rp"
    mkfs.ext4 -q "$dev" && mount "$dev" "$MNT" || fail "mkfs/mount $dev"
    start_load "$MNT"
    sleep 3
    pid=${SERVER_PID[rp]}
    local bundles
    bundles=$(bundles_of rp)
    "$UZRAM" restart rp >"$WORK/restart.out" 2>&1 || fail "uzram restart rp: $(cat "$WORK/restart.out")"
    sleep 3
    kill -0 "$pid" || fail "the server's pid $pid is gone after a planned restart"
    "$UZRAM" status | grep -qE "^rp .*$dev( |$)" || fail "rp does not serve $dev after the restart: $("$UZRAM" status)"
    load_alive "after the planned restart"
    stop_load
    umount "$MNT"
    e2fsck -fn "$dev" >"$WORK/fsck" 2>&1 || fail "e2fsck after the planned restart: $(tail -n 5 "$WORK/fsck")"
    ! kernel_log_has "I/O error, dev ${dev#/dev/}" || fail "the kernel logged I/O errors on $dev"
    pass "uzram restart under fio${SERVE[*]:+ (${SERVE[*]})}: pid $pid kept, $dev served again, $(cat "$WORK/load.rounds" 2>/dev/null) fio rounds verified, e2fsck clean$( ((BUNDLES)) && echo "; $bundles bundles before the restart")"
    "$UZRAM" detach rp
    stop_server rp
}

for part in "${PARTS[@]}"; do
    "part_$part"
done
echo "PASS: ublk-restart.sh"
