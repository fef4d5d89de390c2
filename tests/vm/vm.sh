#!/bin/bash
# vm.sh - runs scenario scripts (tests/vm/*.sh) inside a virtual machine with a real Linux
# kernel, against this machine's build: one of Debian 12's kernels, its stock 6.1 or the 6.12
# of bookworm-backports (fetched with apt-get download and cached under build/vm/kernel), a
# busybox initramfs, this machine's root file system read-only over virtio-9p with a tmpfs
# overlay, QEMU with KVM when a probe boot shows that it runs the kernel, else software
# emulation (TCG). See tests/vm/README.md.
#
#   tests/vm/vm.sh [OPTION]... SCENARIO[:ARG,...][@N]...   run them, in order, in one boot
#   tests/vm/vm.sh --check                             the set make check runs
#   tests/vm/vm.sh --shell                             a shell in the guest (make vm-shell)
#   tests/vm/vm.sh --probe-accel                       prints the accelerator a boot would use
#   tests/vm/vm.sh --matrix [SCENARIO]...              them (default: the matrix set) on each
#                                                      kernel, one boot each (make vm-matrix)
#
# A SCENARIO is the name of tests/vm/NAME.sh; ":ARG,ARG" passes arguments, "@N" runs it with
# only N of the guest's CPUs online (the others taken offline, and back after it). Options:
#   --kernel K      6.12 (default: linux-image-6.12.*+deb12-amd64-unsigned) or 6.1 (Debian 12's
#                   stock linux-image-6.1.0-*-amd64-unsigned: no ublk), the newest apt knows
#   --mem MIB       guest memory (default 1024)      --cpus N   guest CPUs (default 2)
#   --timeout S     bound of the whole boot (default: the scenarios' deadlines + 60)
#   --deadline S    each scenario's deadline (default 300)
#   --hung S        kernel.hung_task_timeout_secs in the guest (default 30)
#   --out DIR       where the console log and results go (default build/vm/run)
# Environment: UZRAM (default build/uzram), VM_KERNEL (as --kernel), VM_KERNEL_DEB (a kernel
# package file to use instead of apt-get download), VM_ACCEL (auto: KVM once a probe boot
# shows it runs the kernel, else TCG; tcg; kvm: no probe, no fallback).
#
# Prints one line per scenario (PASS, FAIL with the reason and the end of its log, SKIP with
# the reason) and writes them to OUT/results as "NAME STATUS REASON" (STATUS 0, 1 or 77).
# Exits 0 when every scenario passed or skipped, 77 when the VM cannot run here (the reason
# on a "SKIP:" line), 1 otherwise.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
VM_DIR=$REPO/build/vm
KERNEL_SERIES=${VM_KERNEL:-6.12} MEM=1024 CPUS=2 TIMEOUT= DEADLINE=300 HUNG=30 OUT=$VM_DIR/run SHELL_MODE=0 PROBE_MODE=0
MATRIX=0
# make check's set: every scenario class in its short form, in one boot of 512 MiB
# (tests/vm/README.md); and tests/integration/zramgen-setup.sh, whose swap setup needs
# CAP_SYS_RESOURCE (serve --swap), which the development machines do not give. @1: with the
# guest's other CPU offline. Beside the rest of make check on a 2-core host, a guest of two
# emulated CPUs took about twice the host CPU time for the same work (ublk:--quick,
# interleaved: 101 and 139 CPU-s against 73 and 74 with one; host load 4-6), a vCPU spinning
# while its peer waits for the host. ublk (a queue per CPU) and scale-out (two nbd connections:
# blk-mq gives a device no more hardware queues than CPUs) keep two.
CHECK_SET=(attach:nbd@1 ublk:--quick scale-out oracle:--quick@1 swap:--quick@1
    integration:zramgen-setup@1)
# make vm-matrix's set: every scenario in a short form, run on each kernel (--matrix). One that
# needs what a kernel lacks (6.1: ublk) skips, saying so. Not here: blockbench (a benchmark),
# swap over nbd or loop (fails under memory pressure: uzram(1), KERNELS; swap:--soak,N,nbd
# measures it) and the long forms (make vm-swap-soak, vm-recovery, vm-restart).
MATRIX_SET=(attach:nbd attach:loop ublk:--quick scale-out oracle:--quick swap:--quick features
    integration:zramgen-setup ublk-recovery:1 ublk-restart:ext4,2,planned systemd)
MATRIX_KERNELS=(6.12 6.1)

skip() {
    echo "SKIP: $*"
    exit 77
}
die() {
    echo "vm.sh: $*" >&2
    exit 1
}

scenarios=()
while [[ $# -gt 0 ]]; do
    case $1 in
    --kernel) KERNEL_SERIES=$2; shift ;;
    --mem) MEM=$2; shift ;;
    --cpus) CPUS=$2; shift ;;
    --timeout) TIMEOUT=$2; shift ;;
    --deadline) DEADLINE=$2; shift ;;
    --hung) HUNG=$2; shift ;;
    --out) OUT=$(realpath -m "$2"); shift ;;
    --check) scenarios+=("${CHECK_SET[@]}") MEM=512 DEADLINE=240 ;;
    --shell) SHELL_MODE=1 ;;
    --probe-accel) PROBE_MODE=1 ;;
    --matrix) MATRIX=1 MEM=512 DEADLINE=900 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) scenarios+=("$1") ;;
    esac
    shift
done
scenario_name() { # SPEC (without @N): its results' name, NAME or NAME-ARGS made file-name safe
    [[ $1 == *:* ]] || { echo "$1"; return; }
    echo "${1%%:*}-$(echo "${1#*:}" | tr -c 'A-Za-z0-9_\n-' - | sed 's/^-*//')"
}
# --matrix: this script once per kernel (each its own boot and OUT/KERNEL), then one line per
# scenario and kernel from their results.
if [[ $MATRIX == 1 ]]; then
    ((${#scenarios[@]})) || scenarios=("${MATRIX_SET[@]}")
    declare -A boot_status=()
    for kernel in "${MATRIX_KERNELS[@]}"; do
        echo "vm.sh: --- kernel $kernel ---"
        "$0" --kernel "$kernel" --mem "$MEM" --cpus "$CPUS" --deadline "$DEADLINE" --hung "$HUNG" \
            ${TIMEOUT:+--timeout "$TIMEOUT"} --out "$OUT/$kernel" "${scenarios[@]}"
        boot_status[$kernel]=$?
    done
    echo "vm.sh: the matrix (results in $OUT/KERNEL/results):"
    failed=0
    for spec in "${scenarios[@]}"; do
        name=$(scenario_name "${spec%@*}")
        for kernel in "${MATRIX_KERNELS[@]}"; do
            line=$(awk -v n="$name" '$1 == n {print; exit}' "$OUT/$kernel/results" 2>/dev/null)
            read -r _ status reason <<<"$line"
            case ${status:-none} in
            0) word=PASS ;;
            77) word=SKIP ;;
            none) word=FAIL reason="no result (the boot ended with status ${boot_status[$kernel]})"
                  [[ ${boot_status[$kernel]} == 77 ]] && word=SKIP reason="the VM cannot run here" ;;
            *) word=FAIL ;;
            esac
            [[ $word != FAIL ]] || failed=1
            printf '%-4s %-28s %-5s %s\n' "$word" "$name" "$kernel" "$reason"
        done
    done
    exit $failed
fi

# The packages' names (apt-cache search) and their cached folders (the .deb's name).
case $KERNEL_SERIES in
6.12) PACKAGE_RE='^linux-image-6\.12\.[0-9]+\+deb12-amd64-unsigned$'
      PACKAGE_GLOB='linux-image-6.12.*+deb12-amd64-unsigned_*' ;;
6.1) PACKAGE_RE='^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$'
     PACKAGE_GLOB='linux-image-6.1.0-*-amd64-unsigned_*' ;;
*) die "--kernel (VM_KERNEL) takes 6.12 or 6.1, not '$KERNEL_SERIES'" ;;
esac
[[ $SHELL_MODE == 1 || $PROBE_MODE == 1 || ${#scenarios[@]} -gt 0 ]] || die "no scenario given (see --help)"
for setting in "--mem $MEM" "--cpus $CPUS" "--deadline $DEADLINE" "--hung $HUNG" \
    "--timeout ${TIMEOUT:-1}" "VM_BOOT_DEADLINE ${VM_BOOT_DEADLINE:-180}"; do
    [[ ${setting#* } =~ ^[1-9][0-9]{0,8}$ ]] ||
        die "${setting% *} takes a whole number above 0, not '${setting#* }'"
done
UZRAM=$(realpath -m "${UZRAM:-$REPO/build/uzram}")
[[ -x $UZRAM ]] || die "no uzram binary at $UZRAM (make programs, or set UZRAM)"
[[ $REPO$UZRAM$OUT != *[[:space:]]* ]] || skip "the paths of the repository, UZRAM or --out contain spaces, which the kernel command line and 9p options cannot carry"

command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 is not installed (scripts/deps.sh installs qemu-system-x86)"
# The list read whole (grep without -q): grep -q ends at its match, and under pipefail the
# writer's SIGPIPE failed the pipeline once, skipping the VM stage of a make check.
[[ -x /bin/busybox ]] && /bin/busybox --list 2>/dev/null | grep -x switch_root >/dev/null ||
    skip "/bin/busybox (busybox-static) is not installed"
command -v depmod >/dev/null || skip "depmod (kmod) is not installed"
command -v cpio >/dev/null || skip "cpio is not installed"

# --- the kernel: Debian 12's newest package of the series, unpacked once under build/vm/kernel ---
kernel_package() { # prints the newest package of the series apt knows
    apt-cache search --names-only "$PACKAGE_RE" 2>/dev/null |
        awk '{print $1}' | sort -V | tail -n 1
}
prepare_kernel() {
    local deb package dir
    mkdir -p "$VM_DIR/kernel"
    if [[ -n ${VM_KERNEL_DEB:-} ]]; then
        deb=$(realpath "$VM_KERNEL_DEB")
    else
        # A kernel unpacked before is used as it is (no network needed).
        dir=$(find -L "$VM_DIR/kernel" -mindepth 2 -maxdepth 2 -path "*/$PACKAGE_GLOB/ready" -printf '%h\n' 2>/dev/null | sort -V | tail -n 1)
        if [[ -n $dir ]]; then
            KROOT=$dir
            return 0
        fi
        command -v apt-get >/dev/null || skip "no cached kernel in $VM_DIR/kernel and no apt-get to fetch one"
        package=$(kernel_package)
        if [[ -z $package && $(id -u) == 0 ]]; then
            timeout 300 apt-get update -q >/dev/null 2>&1
            package=$(kernel_package)
        fi
        [[ -n $package ]] || skip "apt knows no package matching $PACKAGE_RE (apt-get update; Debian 12's bookworm main)"
        echo "vm.sh: fetching $package (about 100 MB, once) into $VM_DIR/kernel"
        local fetch_start=$SECONDS
        (cd "$VM_DIR/kernel" && timeout 600 apt-get download -q "$package" >download.log 2>&1) ||
            skip "apt-get download $package failed: $(tail -n 1 "$VM_DIR/kernel/download.log")"
        echo "vm.sh: fetched in $((SECONDS - fetch_start)) s"
        deb=$(ls -t "$VM_DIR/kernel/$package"_*.deb | head -n 1)
    fi
    dir=$VM_DIR/kernel/$(basename "$deb" .deb)
    rm -rf "$dir"
    mkdir -p "$dir"
    dpkg-deb -x "$deb" "$dir" || die "dpkg-deb -x $deb failed"
    local kver
    kver=$(ls "$dir/lib/modules" 2>/dev/null | head -n 1)
    [[ -n $kver && -e $dir/boot/vmlinuz-$kver ]] || die "$deb has no kernel and modules"
    depmod -b "$dir" "$kver" || die "depmod -b $dir $kver failed"
    [[ -n ${VM_KERNEL_DEB:-} ]] || rm -f "$deb"
    touch "$dir/ready"
    KROOT=$dir
}
prepare_kernel
KVER=$(ls "$KROOT/lib/modules" | head -n 1)
KERNEL=$KROOT/boot/vmlinuz-$KVER
MODULES=$KROOT/lib/modules/$KVER

# --- the accelerator ---
# KVM is used only once it has been seen to run this kernel: a /dev/kvm that opens proves
# nothing (a PVM host's kvm_pvm module runs only guests built for it: QEMU aborts setting an
# MSR, or the guest dies at its first instruction). probe_kvm boots the kernel alone under
# KVM and waits for its first console line; anything else is TCG, and the reason is printed.
# VM_ACCEL=tcg skips the probe; VM_ACCEL=kvm insists on KVM (no fallback).
TCG_ACCEL=(-accel tcg,thread=multi -cpu max)
probe_kvm() { # prints why KVM cannot be used, or nothing when it ran the kernel
    [[ -e /dev/kvm ]] || { echo "no /dev/kvm"; return; }
    [[ -r /dev/kvm && -w /dev/kvm ]] || { echo "/dev/kvm is not read-write for $(id -un)"; return; }
    local log=$VM_DIR/kvm-probe.log i pid
    : >"$log"
    qemu-system-x86_64 -accel kvm -cpu max -smp 1 -m 256 -nodefaults \
        -no-user-config -display none -no-reboot -kernel "$KERNEL" -serial "file:$log" \
        -append "console=ttyS0 earlyprintk=ttyS0 panic=-1 maxcpus=1" </dev/null >"$log.qemu" 2>&1 &
    pid=$!
    for ((i = 0; i < 75; i++)); do # 15 s: under KVM its first line comes in well under one
        grep -aq 'Linux version' "$log" 2>/dev/null && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    grep -aq 'Linux version' "$log" 2>/dev/null && return
    if [[ -s $log.qemu ]]; then # its first line says what failed (an abort, "KVM internal error")
        echo "QEMU under KVM: $(grep -v '^$' "$log.qemu" | head -n 1 | cut -c1-160)"
    else
        echo "the kernel printed nothing under KVM within 15 s"
    fi
}
case ${VM_ACCEL:-auto} in
tcg) kvm_refusal="VM_ACCEL=tcg" ;;
kvm) kvm_refusal= ;;
auto) kvm_refusal=$(probe_kvm) ;;
*) die "VM_ACCEL takes auto, kvm or tcg, not '$VM_ACCEL'" ;;
esac
if [[ -z $kvm_refusal ]]; then
    accel=(-accel kvm -cpu max) accel_name=kvm
else
    accel=("${TCG_ACCEL[@]}") accel_name="tcg ($kvm_refusal)"
fi
[[ $PROBE_MODE == 1 ]] && { echo "vm.sh: accelerator: $accel_name"; exit 0; }

# --- the initramfs: busybox-static, tests/vm/init and the modules the root needs ---
# virtio_pci (built in on 6.12, a module on 6.1), 9pnet_virtio, 9p and overlay with what they
# depend on, in the order modprobe would load them (modules/order, which init reads):
# decompressed, as busybox's insmod takes plain .ko only.
INITRD=$VM_DIR/initramfs-$KVER.cpio.gz
if [[ ! -s $INITRD || $REPO/tests/vm/init -nt $INITRD || /bin/busybox -nt $INITRD || $0 -nt $INITRD ]]; then
    stage=$VM_DIR/initramfs.d
    rm -rf "$stage"
    mkdir -p "$stage/bin" "$stage/modules"
    cp /bin/busybox "$stage/bin/busybox"
    install -m 755 "$REPO/tests/vm/init" "$stage/init"
    declare -A staged=()
    for wanted in virtio_pci 9pnet_virtio 9p overlay; do # one name a call: more are parameters
        deps=$(modprobe -d "$KROOT" -S "$KVER" --show-depends "$wanted") ||
            die "the kernel $KVER has no module $wanted"
        while read -r kind file _; do
            [[ $kind == insmod ]] || continue
            module=$(basename "$file")
            module=${module%%.ko*}
            [[ -z ${staged[$module]:-} ]] || continue
            staged[$module]=1
            case $file in
            *.xz) xz -dc "$file" >"$stage/modules/$module.ko" ;;
            *.zst) zstd -qdc "$file" >"$stage/modules/$module.ko" ;;
            *) cp "$file" "$stage/modules/$module.ko" ;;
            esac || die "cannot unpack $file"
            echo "$module" >>"$stage/modules/order"
        done <<<"$deps"
    done
    (cd "$stage" && find . | cpio -o -H newc --quiet | gzip -1 >"$INITRD.tmp") || die "cannot make the initramfs"
    mv "$INITRD.tmp" "$INITRD"
    rm -rf "$stage"
fi

# --- the plan the guest reads from its /vm ---
rm -rf "$OUT"
mkdir -p "$OUT"
# The tree the file system scenarios copy onto a device (lib.bash, make_tree): made here, where
# it takes a moment, rather than in each scenario under emulation, where copying it out of the
# 9p share and 4 MiB of /dev/urandom took tens of seconds. The guest reads it through its
# root (the host's, cached).
mkdir -p "$OUT/tree"
cp -a "$REPO/src" "$REPO/lib" "$REPO/docs" "$OUT/tree/"
# Of the kernel's headers, the subfolders (1.4 MiB in 248 files, nested): the ext4 steps of
# make check's VM took about 50 s each under emulation with all 6.6 MiB.
if [[ -d /usr/include/linux ]]; then
    mkdir -p "$OUT/tree/include-linux"
    find /usr/include/linux -mindepth 1 -maxdepth 1 -type d -exec cp -a {} "$OUT/tree/include-linux/" \;
fi
head -c $((4 << 20)) /dev/urandom >"$OUT/tree/random"
names=()
{
    printf 'HUNG_SECONDS=%q\nSHELL_MODE=%q\nHOST_OUT=%q\n' "$HUNG" "$SHELL_MODE" "$OUT"
    printf 'export UZRAM=%q REPO=%q VM_OUT=/vm VM_MEM_MIB=%q VM_SCRATCH=/dev/vda VM_TREE=%q\n' \
        "$UZRAM" "$REPO" "$MEM" "$OUT/tree"
    echo 'declare -A DEADLINE=() COMMAND=() ONLINE=()'
    total=0
    for spec in "${scenarios[@]}"; do
        online=$CPUS
        if [[ $spec == *@* ]]; then
            online=${spec##*@} spec=${spec%@*}
            [[ $online =~ ^[1-9][0-9]*$ ]] && ((online <= CPUS)) ||
                die "$spec@$online: give 1 to $CPUS CPUs (--cpus) after @"
        fi
        script=${spec%%:*}
        args=
        [[ $spec == *:* ]] && args=${spec#*:}
        [[ -f $REPO/tests/vm/$script.sh ]] || die "no scenario $script (tests/vm/$script.sh)"
        name=$(scenario_name "$spec")
        names+=("$name")
        command="bash $(printf %q "$REPO/tests/vm/$script.sh")"
        IFS=, read -r -a list <<<"$args"
        for arg in "${list[@]}"; do command+=" $(printf %q "$arg")"; done
        printf 'DEADLINE[%q]=%q\nCOMMAND[%q]=%q\nONLINE[%q]=%q\n' "$name" "$DEADLINE" "$name" \
            "$command" "$name" "$online"
        total=$((total + DEADLINE + 15))
    done
    printf 'SCENARIOS=(%s)\n' "${names[*]}"
} >"$OUT/plan.bash"
TIMEOUT=${TIMEOUT:-$((total + 60))}

# A scratch disk for backing devices (/dev/vda in the guest), sparse, new each boot.
truncate -s 1G "$OUT/scratch.img"

# --- the boot ---
# QEMU takes the first accelerator that works: KVM where /dev/kvm is usable, else TCG. Under
# TCG on a busy host the guest's clocksource watchdog finds the TSC "unstable" and switches
# static keys, and a vCPU then hit the kernel's half-patched code (an int3 oops in
# sched_clock_cpu): tsc=reliable (on the command line below) keeps the watchdog off. And a
# vCPU the host does not run for 20 s is no soft lockup of the guest's (nosoftlockup; one
# stopped a zram run in the page allocator): blocked tasks are what the tests look for. The
# kernel boots on one CPU (maxcpus=1; guest.sh brings the others online for the scenarios):
# with two, the static keys the boot itself switches met the same half-patched code (make
# check at 65cc6c9: "Oops: int3" in sched_clock_cpu at 2.4 s, before any scenario). Should a
# boot still fail before its first scenario, it is booted once more (boot_once below).
share() { # ID PATH TAG [readonly]
    echo "-fsdev local,id=$1,path=$2,security_model=none,multidevs=remap${4:+,readonly=on}"
    echo "-device virtio-9p-pci,fsdev=$1,mount_tag=$3"
}
qemu=(qemu-system-x86_64 -smp "$CPUS" -m "$MEM" -nodefaults -no-user-config
    -display none -no-reboot -kernel "$KERNEL" -initrd "$INITRD"
    -append "console=ttyS0 sysrq_always_enabled panic=-1 oops=panic loglevel=7 tsc=reliable nosoftlockup maxcpus=1 uzram_guest=$REPO/tests/vm/guest.sh"
    $(share r / hostroot ro) $(share m "$MODULES" modules ro) $(share o "$OUT" vmout)
    -drive "file=$OUT/scratch.img,if=virtio,format=raw,cache=unsafe")
if [[ $SHELL_MODE == 1 ]]; then
    echo "vm.sh: booting $KVER ($accel_name); Ctrl-A X leaves QEMU, 'exit' powers the guest off"
    exec "${qemu[@]}" "${accel[@]}" -serial mon:stdio
fi
echo "vm.sh: $KVER, $accel_name, ${CPUS} CPUs, ${MEM} MiB: ${names[*]} (bound ${TIMEOUT} s)"
start=$(date +%s)
# The host's own deadlines, for a guest that stops without a word (neither its scenario's
# timeout nor its kernel's detectors then run): the guest's "up" line within BOOT_DEADLINE
# seconds of QEMU's start (about 7 s under TCG), a scenario's "end" line within its deadline
# plus SCENARIO_GRACE (the guest's own timeout, its kill 10 s later and the logs it saves).
BOOT_DEADLINE=${VM_BOOT_DEADLINE:-180} SCENARIO_GRACE=60
# Prints each marker line of the guest's (tests/vm/guest.sh: up, begin, end) as it comes, with
# the seconds since vm.sh's boot began: a run cut short shows how far it got.
follow_markers() {
    local line lines=()
    mapfile -t lines < <(grep -a '^=== uzram-vm: ' "$OUT/console.log" 2>/dev/null | tail -n +$((markers_seen + 1)))
    for line in "${lines[@]}"; do
        markers_seen=$((markers_seen + 1))
        line=${line#=== uzram-vm: }
        echo "vm.sh: +$(($(date +%s) - start)) s: $line"
        if [[ $line == "guest up "* ]]; then
            guest_up=1
        elif [[ $line =~ ^begin\ ([^ ]+)\ \(deadline\ ([0-9]+)\ s\) ]]; then
            current=${BASH_REMATCH[1]} current_due=$(($(date +%s) + BASH_REMATCH[2] + SCENARIO_GRACE))
        elif [[ $line == "end "* ]]; then
            current=
        fi
    done
}
# Asks the guest's kernel for its blocked tasks' stacks (sysrq-w), its memory (sysrq-m) and
# every task (sysrq-t), through the monitor: they go to the console log.
ask_stacks() {
    local key
    for key in w m t; do
        echo "sendkey alt-sysrq-$key" >&"$monitor"
        sleep 3
    done
}
end_guest() {
    echo quit >&"$monitor"
    sleep 5
    kill "$qemu_pid" 2>/dev/null
}
boot_once() {
    # The monitor on a pair of pipes, for ask_stacks and end_guest.
    mkfifo "$OUT/monitor.in" "$OUT/monitor.out"
    timeout -k 10 "$TIMEOUT" "${qemu[@]}" "${accel[@]}" -serial "file:$OUT/console.log" \
        -chardev "pipe,id=monitor,path=$OUT/monitor" -mon chardev=monitor </dev/null >"$OUT/qemu.log" 2>&1 &
    qemu_pid=$!
    cat "$OUT/monitor.out" >"$OUT/monitor.log" 2>/dev/null &
    monitor_reader=$!
    exec {monitor}<>"$OUT/monitor.in"

    # The host's watchdog: once the kernel reports a failure, user space in the guest may be
    # stuck too (a hang in reclaim stops everything that allocates). So the host asks for the
    # stacks, gives the guest KERNEL_GRACE seconds to finish by itself, then ends the boot.
    KERNEL_FAILURE='^\[ *[0-9.]+\] .*(blocked for more than|Oops|BUG:|cut here|Kernel panic|Out of memory: Killed process [0-9]+ \(uzram\)|oom-kill:.*task=uzram)'
    KERNEL_GRACE=${VM_KERNEL_GRACE:-30}
    failure_seen=0 boot_start=$(date +%s) markers_seen=0 guest_up=0 current= current_due=0
    boot_silent=0 clock_off=0
    while kill -0 "$qemu_pid" 2>/dev/null; do
        sleep 1
        follow_markers
        if ((failure_seen == 0 && guest_up == 0)) && grep -q "$CLOCK_OFF" "$OUT/console.log" 2>/dev/null; then
            clock_off=1 failure_seen=$(date +%s)
            echo "vm.sh: the guest's kernel took its TSC's frequency from the emulated PIT against the HPET's" \
                "($(grep -m 1 -o "$CLOCK_OFF.*" "$OUT/console.log")): its clock would run off; ending it"
            end_guest
        elif ((failure_seen == 0 && guest_up == 0 && $(date +%s) > boot_start + BOOT_DEADLINE)); then
            boot_silent=1 failure_seen=$(date +%s)
            echo "vm.sh: the guest was not up within $BOOT_DEADLINE s of its boot (console: $OUT/console.log); ending it"
            tail -n 15 "$OUT/console.log" 2>/dev/null | sed 's/^/    console: /'
            ask_stacks
            end_guest
        elif ((failure_seen == 0)) && [[ -n $current ]] && (($(date +%s) > current_due)); then
            failure_seen=$(date +%s)
            echo "vm.sh: $current outlived its deadline by $SCENARIO_GRACE s and the guest did not end it; ending the boot"
            ask_stacks
            end_guest
        elif [[ $failure_seen == 0 ]] && grep -qE "$KERNEL_FAILURE" "$OUT/console.log" 2>/dev/null; then
            failure_seen=$(date +%s)
            echo "vm.sh: the guest's kernel reports: $(grep -E -m 1 "$KERNEL_FAILURE" "$OUT/console.log")"
            ask_stacks
        elif [[ $failure_seen != 0 ]] && (($(date +%s) > failure_seen + KERNEL_GRACE)); then
            echo "vm.sh: the guest did not stop by itself within $KERNEL_GRACE s of the failure; ending it"
            end_guest
        fi
    done
    wait "$qemu_pid"
    qemu_status=$?
    follow_markers
    exec {monitor}>&-
    kill "$monitor_reader" 2>/dev/null
    rm -f "$OUT/monitor.in" "$OUT/monitor.out"
}
# Under TCG on a busy host the guest's kernel may find its TSC's frequency from the emulated
# PIT far from the HPET's, and it then takes the PIT's (it did: 519 MHz against 2598, a guest
# whose clock ran 5 times fast, so a scenario's 1200 s deadline ended it after 250 s of real
# time); its later refinement rejects a value that far off. Such a boot is ended and booted again.
CLOCK_OFF="tsc: PIT calibration deviates from HPET"
boot_once
if { [[ $boot_silent == 1 || $clock_off == 1 ]] || grep -qE "$KERNEL_FAILURE" "$OUT/console.log" 2>/dev/null; } &&
    ! grep -q "=== uzram-vm: begin " "$OUT/console.log"; then
    mv "$OUT/console.log" "$OUT/console-first-boot.log"
    echo "vm.sh: the guest failed while booting, before any scenario (an emulator race or its clock:" \
        "$OUT/console-first-boot.log); booting once more"
    truncate -s 0 "$OUT/scratch.img" && truncate -s 1G "$OUT/scratch.img"
    if [[ $accel_name == kvm && ${VM_ACCEL:-auto} == auto ]]; then
        # KVM ran the probe's kernel but not this boot: the second boot is emulated.
        accel=("${TCG_ACCEL[@]}") accel_name="tcg (the boot under KVM failed)"
        echo "vm.sh: booting again under $accel_name"
    fi
    boot_once
fi
rm -f "$OUT/scratch.img"
took=$(($(date +%s) - start))
[[ $qemu_status -eq 124 || $qemu_status -eq 137 ]] && echo "vm.sh: the boot outlived its bound of $TIMEOUT s"
[[ $qemu_status -ne 0 && -s $OUT/qemu.log ]] && sed 's/^/    qemu: /' "$OUT/qemu.log"

# --- results ---
failed=0
: >"$OUT/results"
report() { # NAME STATUS REASON
    echo "$1 $2 $3" >>"$OUT/results"
    case $2 in
    0) echo "PASS vm $1 ($3)" ;;
    77) echo "SKIP vm $1: $3" ;;
    *) failed=1
       echo "FAIL vm $1: $3"
       [[ -s $OUT/$1.log ]] && tail -n 25 "$OUT/$1.log" | sed 's/^/    /'
       [[ -s $OUT/$1.state ]] && echo "    (kernel stacks and memory at the failure: $OUT/$1.state)"
       grep -E -m 5 'blocked for more than|Oops|BUG:|cut here|Kernel panic|Out of memory|oom-kill' \
           "$OUT/$1.dmesg" 2>/dev/null | sed 's/^/    kernel: /' ;;
    esac
}
for name in "${names[@]}"; do
    if [[ ! -e $OUT/$name.status ]]; then
        if grep -q "=== uzram-vm: begin $name " "$OUT/console.log" 2>/dev/null; then
            report "$name" 1 "the guest stopped during it (console: $OUT/console.log)"
            tail -n 30 "$OUT/console.log" | sed 's/^/    console: /'
        else
            report "$name" 1 "did not run (console: $OUT/console.log)"
        fi
        continue
    fi
    read -r status seconds <"$OUT/$name.status"
    failure=$(cat "$OUT/$name.failure" 2>/dev/null)
    if [[ $failure == kernel ]]; then
        report "$name" 1 "the kernel reported a failure (log: $OUT/$name.dmesg)"
    elif [[ $failure == deadline ]]; then
        report "$name" 1 "outlived its deadline of $DEADLINE s"
    elif [[ $status == 0 ]]; then
        report "$name" 0 "$seconds s"
    elif [[ $status == 77 ]]; then
        report "$name" 77 "$(sed -n 's/^SKIP: //p' "$OUT/$name.log" | tail -n 1)"
    else
        report "$name" 1 "exit status $status (log: $OUT/$name.log)"
    fi
done
echo "vm.sh: boot took $took s; console log: $OUT/console.log"
exit $failed
