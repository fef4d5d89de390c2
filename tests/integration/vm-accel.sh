#!/bin/bash
# vm-accel.sh - the VM runner (tests/vm/vm.sh) uses KVM only once a probe boot shows that it runs
# the guest's kernel: a /dev/kvm that opens but is no KVM (here /dev/null bound over it in a
# mount namespace, as a PVM host's kvm_pvm module is to Debian's kernel) gives TCG with the
# reason; VM_ACCEL=tcg forces TCG; a bad VM_ACCEL is refused. The boots themselves are make
# check's VM stage. Exit 0 pass, 1 fail, 77 skip (tests/integration/lib.bash).
set -uo pipefail

. "$(dirname "$0")/lib.bash"
lib_init
vm=tests/vm/vm.sh

# make check's VM stage fetches and unpacks the kernel at its start: wait for it, so that two
# runners never unpack it at once.
for ((i = 0; i < 600; i++)); do
    compgen -G 'build/vm/kernel/*/ready' >/dev/null && break
    pgrep -f 'apt-get download -q linux-image' >/dev/null || ((i < 10)) || break
    sleep 1
done

out=$("$vm" --probe-accel 2>&1)
status=$?
[[ $status == 77 ]] && skip "the VM runner cannot run here: $out"
[[ $status == 0 && $out == "vm.sh: accelerator: "* ]] || fail "--probe-accel: status $status: $out"
pass "this machine: ${out#vm.sh: }"

out=$(VM_ACCEL=tcg "$vm" --probe-accel 2>&1)
[[ $out == "vm.sh: accelerator: tcg (VM_ACCEL=tcg)" ]] || fail "VM_ACCEL=tcg gave: $out"
pass "VM_ACCEL=tcg forces TCG"

out=$(VM_ACCEL=fast "$vm" --probe-accel 2>&1)
status=$?
[[ $status == 1 && $out == *"VM_ACCEL takes auto, kvm or tcg, not 'fast'"* ]] ||
    fail "VM_ACCEL=fast: status $status: $out"
pass "a bad VM_ACCEL is refused"

if [[ $(id -u) != 0 ]] || ! command -v unshare >/dev/null; then
    skip_check "a /dev/kvm that is not KVM needs root for a mount namespace"
else
    out=$(unshare -m bash -c '[[ -e /dev/kvm ]] || exit 3
        mount --bind /dev/null /dev/kvm && exec "$0" --probe-accel' "$vm" 2>&1)
    status=$?
    if [[ $status == 3 ]]; then
        skip_check "no /dev/kvm here to put /dev/null over (the probe above found none: TCG)"
    else
        [[ $status == 0 && $out == "vm.sh: accelerator: tcg (QEMU under KVM: "* ]] ||
            fail "/dev/null as /dev/kvm: status $status: $out"
        pass "/dev/null as /dev/kvm: ${out#vm.sh: }"
    fi
fi
