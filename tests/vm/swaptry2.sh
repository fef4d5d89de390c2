set -euo pipefail
source "$(dirname "$0")/lib.bash"
vm_init
modprobe loop; modprobe fuse; modprobe ublk_drv
total_kib=$(meminfo_kib MemTotal)
mib=$((total_kib * 3 / 2 / 1024))
start_server swap -s 2G --swap --mem-limit ${LIMIT:-320M}
dev=$("$UZRAM" attach --via ${1:-loop} --swap swap 2>"$WORK/attach.err") || fail "attach: $(cat "$WORK/attach.err")"
at_exit "swapoff $dev; \"$UZRAM\" detach swap"
echo dev=$dev; lsblk $dev; mkswap "$dev" >/dev/null
swapon -p 10 "$dev"
cat /proc/swaps
( while sleep 5; do echo "--- $(date +%s) pswpout $(vmstat pswpout) pswpin $(vmstat pswpin) free $(meminfo_kib MemFree) mm_stat $("$UZRAM" attr swap mm_stat 2>&1)"; done ) &
at_exit "kill $!"
"$MEMTOUCH" "$mib" 2 || fail "memtouch"
echo "pswpout $(vmstat pswpout)"
"$UZRAM" attr swap mm_stat
