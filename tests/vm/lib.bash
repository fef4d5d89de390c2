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
            skip "the guest kernel has no $module module"
    done
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

vmstat() { awk -v key="$1" '$1 == key {print $2}' /proc/vmstat; }
meminfo_kib() { awk -v key="$1:" '$1 == key {print $2}' /proc/meminfo; }

# In the kernel log since the scenario began (guest.sh clears it before each scenario).
kernel_log_has() { dmesg | grep -qE "$1"; }

# A result line the host collects (tests/vm/vm.sh prints OUT/NAME.results; docs scripts read it).
result() { # KEY VALUE...
    echo "RESULT $*"
    echo "$*" >>"$VM_OUT/$TEST_NAME.results"
}
