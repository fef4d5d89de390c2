#!/usr/bin/env bash
# integration.sh - VM scenario: host integration scripts (tests/integration/NAME.sh) in the
# guest, where the parts that need the kernel's nbd client, ublk or all of root's capabilities
# run instead of being skipped checks. Fails if a script fails or still skips a check.
#
#   integration.sh NAME...
set -euo pipefail
source "$(dirname "$0")/lib.bash"
vm_init
modprobe -q nbd
modprobe -q loop
modprobe -q fuse # no udev in the guest: /dev/fuse comes with the module
for name; do
    log=$WORK/$name.log
    UZRAM=$UZRAM bash "$REPO/tests/integration/$name.sh" >"$log" 2>&1 || { cat "$log"; fail "tests/integration/$name.sh failed in the guest"; }
    grep -E '^(ok|SKIPPED CHECK)' "$log" | sed "s/^/$name: /"
    ! grep -q '^SKIPPED CHECK' "$log" || fail "tests/integration/$name.sh skipped a check in the guest"
    pass "tests/integration/$name.sh in the guest"
done
echo "PASS: integration.sh"
