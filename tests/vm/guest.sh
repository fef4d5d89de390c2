#!/bin/bash
# guest.sh - PID 1 of the VM tests' guest (tests/vm/init switched root into the host's file
# system with a tmpfs overlay): mounts what a system has, arms the kernel's hang detectors,
# runs each scenario of /vm/plan.bash with its deadline under a watchdog, writes its status
# and kernel log to /vm (the host's output folder), and powers off.
#
# A scenario fails when it exits non-zero, outlives its deadline, or when the kernel reports
# a blocked task, an oops, a BUG or a warning, or the OOM killer kills a uzram process while
# it runs. After a hang or an oops the kernel's state is not trusted: the remaining scenarios
# do not run (the host reports them as not run).
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8
OUT=/vm

power_off() {
    sync
    /bin/busybox poweroff -f
    echo o >/proc/sysrq-trigger
    sleep 60
}

mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=755 tmpfs /run
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
ip link set lo up 2>/dev/null || /bin/busybox ip link set lo up
hostname uzram-vm 2>/dev/null
modprobe -q virtio_blk # the scratch disk, /dev/vda
# shellcheck source=/dev/null
source "$OUT/plan.bash" || { echo "uzram-vm: no plan in $OUT"; power_off; }

# Blocked tasks are reported after HUNG_SECONDS (the kernel's default is 120) and every time,
# and sysrq-w can print the blocked tasks' stacks.
sysctl -q -w kernel.hung_task_timeout_secs="$HUNG_SECONDS" kernel.hung_task_warnings=-1 \
    kernel.hung_task_check_interval_secs=5 kernel.sysrq=1 kernel.panic_on_oops=1 2>/dev/null

# What fails a scenario in the kernel's log.
KERNEL_FAILURE='blocked for more than|Oops|BUG:|cut here|Kernel panic|Out of memory: Killed process [0-9]+ \(uzram\)|oom-kill:.*task=uzram'

# The state at a hang: the blocked tasks (sysrq-w, to the kernel log), every uzram thread's
# kernel stack, memory.
dump_state() { # FILE
    {
        echo "=== /proc/meminfo"
        cat /proc/meminfo
        echo "=== /proc/vmstat (swap, reclaim, oom)"
        grep -E '^(pswp|pgscan|pgsteal|oom|allocstall|nr_free|nr_writeback|workingset)' /proc/vmstat
        echo "=== uzram threads"
        local task
        for task in /proc/[0-9]*/task/*; do
            [[ $(cat "$task/comm" 2>/dev/null) == uzram* || $(readlink "${task%/task/*}/exe" 2>/dev/null) == */uzram ]] ||
                continue
            echo "--- $task $(cat "$task/comm" 2>/dev/null) state $(awk '/^State:/ {print $2}' "$task/status" 2>/dev/null) wchan $(cat "$task/wchan" 2>/dev/null)"
            cat "$task/stack" 2>/dev/null
        done
    } >"$1" 2>&1
    echo w >/proc/sysrq-trigger
}

# Runs while a scenario runs: a kernel failure in the log stops it (its process group).
watchdog() { # NAME PGID
    local name=$1 pgid=$2
    while sleep 2; do
        if dmesg | grep -qE "$KERNEL_FAILURE"; then
            echo "=== uzram-vm: kernel failure during $name: $(dmesg | grep -E "$KERNEL_FAILURE" | head -n 1)"
            dump_state "$OUT/$name.state"
            echo kernel >"$OUT/$name.failure"
            sleep 5 # the sysrq-w output reaches the console
            kill -KILL -- "-$pgid" 2>/dev/null
            return
        fi
    done
}

# Only the first N CPUs online (vm.sh's NAME@N; all by default): CPU 0 has no switch.
cpus_online() { # N
    local cpu want
    for cpu in /sys/devices/system/cpu/cpu[0-9]*; do
        [[ -w $cpu/online ]] || continue
        want=$((${cpu##*cpu} < $1 ? 1 : 0))
        [[ $(<"$cpu/online") == "$want" ]] || echo "$want" >"$cpu/online" ||
            echo "=== uzram-vm: cannot set ${cpu##*/} online=$want"
    done
}

run_scenario() { # NAME
    local name=$1 status start
    cpus_online "${ONLINE[$name]:-$(nproc --all)}"
    dmesg -C
    echo "=== uzram-vm: begin $name (deadline ${DEADLINE[$name]} s)"
    start=$(date +%s)
    setsid bash -c 'exec timeout -k 10 "$@"' _ "${DEADLINE[$name]}" bash -c "${COMMAND[$name]}" \
        </dev/null > >(tee "$OUT/$name.log") 2>&1 &
    local pid=$!
    watchdog "$name" "$pid" &
    local watcher=$!
    wait "$pid"
    status=$?
    kill "$watcher" 2>/dev/null
    wait "$watcher" 2>/dev/null
    [[ $status -eq 124 || $status -eq 137 ]] && [[ ! -e $OUT/$name.failure ]] && echo deadline >"$OUT/$name.failure"
    # A failure the watchdog had no time to see.
    if [[ ! -e $OUT/$name.failure ]] && dmesg | grep -qE "$KERNEL_FAILURE"; then
        dump_state "$OUT/$name.state"
        echo kernel >"$OUT/$name.failure"
    fi
    dmesg >"$OUT/$name.dmesg"
    echo "$status $(($(date +%s) - start))" >"$OUT/$name.status"
    echo "=== uzram-vm: end $name status $status"
    [[ $(cat "$OUT/$name.failure" 2>/dev/null) != kernel ]]
}

exec </dev/null >/dev/console 2>&1
cd /
echo "=== uzram-vm: guest up after $(cut -d' ' -f1 /proc/uptime) s"
if [[ ${SHELL_MODE:-0} == 1 ]]; then
    echo "uzram-vm: a shell in the guest; the host's root is read-only under a tmpfs overlay,"
    echo "uzram-vm: $OUT is the host's $HOST_OUT. 'exit' powers off."
    cpus_online "$(nproc --all)"
    setsid -c bash -l <>/dev/ttyS0 >&0 2>&1
    power_off
fi
for name in "${SCENARIOS[@]}"; do
    run_scenario "$name" || break
done
power_off
