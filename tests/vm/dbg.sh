set -euo pipefail
source "$(dirname "$0")/lib.bash"
vm_init
start_server t -s 256M --swap --mem-limit 64M
pid=${SERVER_PID[t]}
sleep 1
grep -E "VmRSS|VmLck" /proc/$pid/status
awk '/\[heap\]/{p=1;print} p&&/^(Size|Rss|Locked):/{print} /^[0-9a-f]+-/{if(!/\[heap\]/)p=0}' /proc/$pid/smaps
