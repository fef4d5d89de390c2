set -euo pipefail
source "$(dirname "$0")/lib.bash"
vm_init
need_module nbd
total_kib=$(meminfo_kib MemTotal)
mib=$((total_kib * 3 / 2 / 1024))
start_server swap -s 2G --swap --mem-limit ${LIMIT:-320M}
dev=/dev/nbd0
nbd-client -unix "$(sock_of swap)" $dev -N swap -b 4096 -C ${CONNS:-4} || fail nbd-client
echo 128 > /sys/block/nbd0/queue/max_sectors_kb
at_exit "swapoff $dev; nbd-client -d $dev"
mkswap "$dev" >/dev/null
swapon -p 10 "$dev"
cat /proc/swaps
( while sleep 5; do echo "--- $(date +%s) pswpout $(vmstat pswpout) pswpin $(vmstat pswpin) free $(meminfo_kib MemFree) mm_stat $("$UZRAM" attr swap mm_stat 2>&1)"; done ) &
at_exit "kill $!"
"$MEMTOUCH" "$mib" 2 || fail "memtouch"
echo "pswpout $(vmstat pswpout)"
"$UZRAM" attr swap mm_stat
