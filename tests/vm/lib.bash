# lib.bash - helpers of the VM scenarios (sourced by tests/vm/*.sh, which run inside the guest
# that tests/vm/vm.sh boots): the integration tests' helpers (tests/integration/lib.bash:
# servers started and stopped with bounded waits, fail/skip/pass, cleanup hooks) plus what a
# kernel client needs: modules, nbd devices, waits with deadlines, kernel counters.
#
# (Named .bash so that vm.sh, which takes tests/vm/NAME.sh as scenario NAME, never runs it.)
# A scenario exits 0 pass, 77 skip (with "SKIP: reason"), anything else fail; it must clean up
# after itself (at_exit) so the next scenario of the boot starts from a clean guest.

VM_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=${REPO:-$(cd "$VM_LIB_DIR/../.." && pwd)}
MEMTOUCH=${MEMTOUCH:-$(dirname "$UZRAM")/tests/vm/memtouch}
# shellcheck source=../integration/lib.bash
source "$REPO/tests/integration/lib.bash"

# A scenario runs only in the guest: it loads modules, makes swap and mounts.
vm_init() {
    [[ -n ${VM_OUT:-} && -d $VM_OUT ]] || fail "run it in the VM: tests/vm/vm.sh $TEST_NAME"
    lib_init
}

need_module() { # MODULE...
    local module
    for module; do
        modprobe "$module" 2>/dev/null || [[ -e /sys/module/$module ]] ||
            skip "the guest kernel ($(uname -r)) has no $module module"
    done
}

# The prototype ublk driver of bench/ublk-sync (docs/design/swap.md), for the scenarios that
# load it in place of the stock one: it is out of tree, so its taint has an O.
PROTOTYPE_KO=$REPO/build/ublk-sync/ublk_drv.ko
prototype_loaded() { [[ $(cat /sys/module/ublk_drv/taint 2>/dev/null) == *O* ]]; }

# prototype_on [PARAM=VALUE...]: the prototype in place of the stock driver (unused between
# scenarios); stock_ublk puts the stock one back, once no device is left (the last device's
# release may trail its deletion by a moment). No fallback: it fails when it cannot.
prototype_on() {
    if [[ -e /sys/module/ublk_drv ]]; then
        rmmod ublk_drv 2>"$WORK/rmmod.out" || fail "rmmod of the stock ublk_drv: $(cat "$WORK/rmmod.out")"
    fi
    at_exit stock_ublk
    insmod "$PROTOTYPE_KO" "$@" 2>"$WORK/insmod.out" || fail "insmod $PROTOTYPE_KO: $(cat "$WORK/insmod.out")"
    prototype_loaded || fail "insmod $PROTOTYPE_KO: ublk_drv loaded, but not the prototype"
}
stock_ublk() {
    local tries=0
    while prototype_loaded && ! rmmod ublk_drv 2>/dev/null; do
        ((++tries < 20)) || return 1
        sleep 0.5
    done
    modprobe ublk_drv
}

# wait_for SECONDS DESCRIPTION COMMAND...: run COMMAND every 0.2 s until it succeeds; fail the
# scenario with DESCRIPTION after SECONDS.
wait_for() {
    local seconds=$1 what=$2 deadline
    shift 2
    deadline=$(($(date +%s) + seconds))
    until "$@" >/dev/null 2>&1; do
        (($(date +%s) < deadline)) || fail "$what did not happen within $seconds s"
        sleep 0.2
    done
}

# unit_command KEY NAME: the uzram-swap@ unit's ExecStart or ExecStop as sh runs it, for the
# device NAME (tests/vm/swap.sh and swap-programs.sh set swap up exactly as the unit does).
unit_command() {
    sed -n "s/^$1=//p" "$REPO/systemd/uzram-swap@.service.in" |
        sed -e "s|@bindir@/uzram|$UZRAM|g" -e "s/%i/$2/g" -e 's/\$\$/$/g'
}

vmstat() { awk -v key="$1" '$1 == key {print $2}' /proc/vmstat; }
meminfo_kib() { awk -v key="$1:" '$1 == key {print $2}' /proc/meminfo; }

# In the kernel log since the scenario began (guest.sh clears it before each scenario).
kernel_log_has() { dmesg | grep -qE "$1"; }

# A result line the host collects (tests/vm/vm.sh prints OUT/NAME.results; docs scripts read it).
result() { # KEY VALUE...
    echo "RESULT $*"
    echo "$*" >>"$VM_OUT/$TEST_NAME.results"
}

# make_tree: sets TREE, a few MiB of sources, headers and random bytes to copy onto a device.
# vm.sh makes it on the host (VM_TREE, read-only here); it must hold the 4 MiB random file,
# which fs_round_trip removes to see fstrim reach the engine.
make_tree() {
    TREE=${VM_TREE:-}
    [[ -d $TREE && -f $TREE/random ]] || fail "no tree to copy at '$TREE' (vm.sh makes it: VM_TREE)"
}

# fs_round_trip DEV NAME MNT: ext4 on DEV (of device NAME), $TREE copied, caches dropped, compared
# byte for byte; then rm + fstrim must lower NAME's orig_data_size by the 4 MiB file at least.
# Leaves DEV mounted on MNT.
fs_round_trip() {
    local dev=$1 name=$2 mnt=$3 before after
    mkfs.ext4 -q "$dev" || fail "mkfs.ext4 $dev"
    mount "$dev" "$mnt" || fail "mount $dev"
    cp -a "$TREE" "$mnt/tree"
    sync
    echo 3 >/proc/sys/vm/drop_caches
    diff -r "$TREE" "$mnt/tree" >"$WORK/diff" || fail "the tree read back differs: $(head -n 5 "$WORK/diff")"
    pass "ext4 on $dev: a $(du -sh "$TREE" | cut -f1) tree copied, caches dropped, equal byte for byte"
    before=$(mm_stat_field "$name" 0)
    rm -rf "$mnt/tree/include-linux" "$mnt/tree/random"
    sync
    fstrim "$mnt" || fail "fstrim $mnt"
    after=$(mm_stat_field "$name" 0)
    ((after < before - (4 << 20))) || fail "fstrim: orig_data_size $before -> $after, not down by the 4 MiB file at least"
    pass "rm + fstrim: orig_data_size $before -> $after"
}

# mounted_then_clean NAME DEV MNT: detach of device NAME is refused while DEV is mounted on MNT,
# saying so; then umount, and e2fsck finds DEV clean.
mounted_then_clean() {
    local name=$1 dev=$2 mnt=$3
    if "$UZRAM" detach "$name" 2>"$WORK/detach.err"; then fail "detach succeeded while $dev is mounted"; fi
    grep -q "mounted" "$WORK/detach.err" || fail "detach while mounted said: $(cat "$WORK/detach.err")"
    pass "detach refused while mounted: $(cat "$WORK/detach.err")"
    umount "$mnt"
    e2fsck -fn "$dev" >"$WORK/fsck" 2>&1 || fail "e2fsck: $(tail -n 5 "$WORK/fsck")"
}

# stop_under_mount SIGNAL VIA BOUND MNT: a server (srvSIGNAL) whose device is attached --via VIA,
# ext4 mounted on MNT with a writer busy, gets SIGSIGNAL: the server must be gone within 20 s,
# the writer's requests in flight and a write after it must fail within BOUND s (no hang of
# the journal), and umount must work. Sets STOPPED_DEV (the node) and STOPPED_AFTER (seconds
# until the write failed, and how) for the caller's recovery and report.
stop_under_mount() {
    local signal=$1 via=$2 bound=$3 mnt=$4 name=srv$1 start status busy
    start_server "$name" -s 256M
    STOPPED_DEV=$("$UZRAM" attach --via "$via" "$name") || fail "attach --via $via $name"
    mkfs.ext4 -q "$STOPPED_DEV" && mount "$STOPPED_DEV" "$mnt" || fail "mkfs/mount $STOPPED_DEV"
    head -c $((1 << 20)) /dev/urandom >"$mnt/before"
    sync
    dd if=/dev/zero of="$mnt/busy" bs=64k count=100000 oflag=direct 2>/dev/null &
    busy=$!
    sleep 1
    start=$(date +%s)
    kill "-$signal" "${SERVER_PID[$name]}"
    timeout 20 tail --pid="${SERVER_PID[$name]}" -f /dev/null ||
        fail "the server lived on 20 s after SIG$signal with $STOPPED_DEV mounted"
    unset "SERVER_PID[$name]"
    timeout "$bound" tail --pid="$busy" -f /dev/null || fail "the writer busy at SIG$signal still runs after $bound s"
    wait "$busy" && fail "the writer busy at SIG$signal succeeded"
    set +e
    timeout "$bound" dd if=/dev/urandom of="$mnt/after" bs=1M count=4 oflag=direct,sync 2>"$WORK/dd.err"
    status=$?
    set -e
    (($(date +%s) - start < bound)) || fail "a write after SIG$signal took $bound s or more (status $status)"
    ((status != 0)) || fail "a write after SIG$signal succeeded"
    STOPPED_AFTER="$(($(date +%s) - start)) s ($(tail -n 1 "$WORK/dd.err"))"
    timeout "$bound" umount "$mnt" || timeout "$bound" umount -l "$mnt" || fail "umount after SIG$signal"
}

# server_memory NAME: where the memory of server NAME (one device) is, from its /proc/PID
# (status, smaps) and its own report (uzram status --json: mm_stat, debug_stat, mallinfo2).
# Prints one line of parts in KiB and sets MEM_OVERHEAD_KIB: VmRSS less the pool
# (mem_used_total) and the page table (table_mem), what uzram(1) SWAP budgets. Under --swap
# every resident page is locked (mlockall), so VmRSS is the locked memory; VmLck counts the
# address space of locked mappings, touched or not (MCL_ONFAULT), and says nothing here.
server_memory() { # NAME
    local name=$1 pid
    pid=${SERVER_PID[$name]}
    local -a status smaps engine
    read -r -a status < <(awk '$1 == "VmRSS:" {r = $2} $1 == "VmHWM:" {h = $2}
        $1 == "VmPTE:" {p = $2} $1 == "Threads:" {t = $2} END {print r, h, p, t}' /proc/"$pid"/status)
    # Rss by kind of mapping: the heap, the main stack, files (program, libraries), the ublk
    # driver's and io_uring's kernel buffers, anonymous mappings (pool, table, thread stacks,
    # allocations mapped on their own).
    read -r -a smaps < <(awk '
        /^[0-9a-f]+-[0-9a-f]+ / {
            name = $6
            if (name == "") kind = "anon"
            else if (name == "[heap]") kind = "heap"
            else if (name == "[stack]") kind = "stack"
            else if (name ~ /^\/dev\/|^anon_inode:/) kind = "kernel"
            else if (name ~ /^\//) kind = "file"
            else kind = "other"
        }
        $1 == "Rss:" {rss[kind] += $2}
        END {print rss["heap"] + 0, rss["stack"] + 0, rss["file"] + 0, rss["kernel"] + 0,
                   rss["anon"] + 0, rss["other"] + 0}' /proc/"$pid"/smaps)
    read -r -a engine < <("$UZRAM" status --json "$name" | python3 -c '
import json, sys
d = json.load(sys.stdin)[0]
print(*(d.get(k, 0) // 1024 for k in ("mem_used_total", "table_mem", "cached_mem", "dict_mem",
      "heap_size", "heap_used", "heap_mapped", "meta_data_size")))')
    local rss=${status[0]} pool=${engine[0]} table=${engine[1]} cached=${engine[2]} dict=${engine[3]}
    # anonymous memory that is neither the pool's (its objects and what it keeps cached) nor
    # the table: thread stacks, blocks mapped on their own, the dedup index, bundle records
    local other_anon=$((smaps[4] - (pool - dict) - cached - table))
    MEM_OVERHEAD_KIB=$((rss - pool - table))
    echo "server $name (pid $pid, ${status[3]} threads), KiB: VmRSS $rss VmHWM ${status[1]} VmPTE ${status[2]};" \
        "pool $pool (dict $dict), table $table; beyond them $MEM_OVERHEAD_KIB:" \
        "cached pool (reserve, emptied spans) $cached, heap ${smaps[0]} (in use ${engine[5]}, arena ${engine[4]}," \
        "mapped blocks ${engine[6]}), other anonymous $other_anon (stacks, mapped blocks, meta ${engine[7]})," \
        "main stack ${smaps[1]}, files ${smaps[2]}, kernel buffers ${smaps[3]}, other ${smaps[5]}"
}

# systemd_namespace: Debian's systemd (/lib/systemd/systemd) as PID 1 of a new PID + mount
# namespace, running this build's units as `make install` writes them. Its /usr/local is the
# `make install DESTDIR=$WORK/root prefix=/usr/local sysconfdir=/usr/local/etc` tree (the
# units in /usr/local/lib/systemd/system, where systemd looks; the configuration in
# $SD_ROOT/usr/local/etc/uzram); the host's unit folders and generators are hidden behind the
# few units a service's default dependencies need (sysinit, basic, sockets and shutdown
# targets, all empty) and journald, so nothing of the host's starts. Sets SD_ROOT, SD_PID and
# SD_VERSION; sd COMMAND... runs COMMAND in the manager's namespaces (its /run, /usr/local,
# pids).
systemd_namespace() {
    local systemd=/lib/systemd/systemd units=$WORK/units unit unshare_pid _
    need_tools unshare nsenter make
    [[ -x $systemd ]] || skip "no $systemd (Debian's systemd package)"
    SD_ROOT=$WORK/root
    # make install would build what is not up to date, for minutes under emulation: refused.
    make -s -q -C "$REPO" O="$(dirname "$UZRAM")" lib programs ||
        fail "the build in $(dirname "$UZRAM") is not up to date: make lib programs first"
    make -s -C "$REPO" O="$(dirname "$UZRAM")" install DESTDIR="$SD_ROOT" prefix=/usr/local \
        sysconfdir=/usr/local/etc >"$WORK/install.log" 2>&1 || fail "make install: $(tail -n 5 "$WORK/install.log")"
    mkdir -p "$SD_ROOT/usr/local/etc/uzram" "$units" "$WORK/empty"
    for unit in systemd-journald.service systemd-journald.socket systemd-journald-dev-log.socket; do
        cp "/usr/lib/systemd/system/$unit" "$units/"
    done
    printf '[Unit]\n%s\n' "Description=System Initialization (the VM test's: nothing of the host's)" \
        "Wants=systemd-journald.service systemd-journald.socket" "After=systemd-journald.socket" \
        >"$units/sysinit.target"
    printf '[Unit]\n%s\n' "Description=Basic System (the VM test's)" "Requires=sysinit.target" \
        "After=sysinit.target sockets.target" >"$units/basic.target"
    printf '[Unit]\n%s\n' "Description=Sockets (the VM test's)" >"$units/sockets.target"
    printf '[Unit]\n%s\n' "Description=Shutdown (the VM test's)" "DefaultDependencies=no" \
        >"$units/shutdown.target"
    printf '[Unit]\n%s\n' "Description=uzram VM test" "Requires=basic.target" "After=basic.target" \
        >"$units/uzram-vm.target"
    cat >"$WORK/pid1.sh" <<PID1
set -e
mount -t tmpfs -o mode=755 tmpfs /run
mount --bind "$units" /usr/lib/systemd/system
mount -t tmpfs tmpfs /etc/systemd/system
mount --bind "$WORK/empty" /usr/lib/systemd/system-generators
mount --bind "$SD_ROOT/usr/local" /usr/local
exec env -i container=uzram-vm PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin \
    $systemd --system --unit=uzram-vm.target --log-target=console --log-level=info
PID1
    unshare --pid --fork --mount --mount-proc --propagation private bash "$WORK/pid1.sh" \
        </dev/null >"$WORK/pid1.log" 2>&1 &
    unshare_pid=$!
    SD_PID=
    at_exit "kill -KILL \${SD_PID:-$unshare_pid}; wait $unshare_pid"
    for _ in $(seq 150); do
        SD_PID=$(pgrep -P "$unshare_pid" || true)
        [[ -n $SD_PID && $(cat /proc/"$SD_PID"/comm 2>/dev/null) == systemd ]] && break
        sleep 0.2
    done
    [[ $(cat /proc/"$SD_PID"/comm 2>/dev/null) == systemd ]] || fail "systemd did not start: $(tail -n 20 "$WORK/pid1.log")"
    wait_for 60 "systemd reaching uzram-vm.target" sd systemctl is-active -q uzram-vm.target
    SD_VERSION=$($systemd --version | head -n 1 | cut -d' ' -f2)
}
sd() { nsenter -t "$SD_PID" -m -p -- env -u XDG_RUNTIME_DIR "$@"; }
