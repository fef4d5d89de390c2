#!/bin/bash
# run.sh - what `make run` does: serve a device on defaults, store some real
# pages in it, show its stats, and keep serving until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
uzram=$PWD/build/uzram
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp/uzram-run-$(id -u)}
mkdir -p "$XDG_RUNTIME_DIR"
socket=$XDG_RUNTIME_DIR/uzram/uzram0.sock

"$uzram" serve &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do [[ -S $socket ]] && break; sleep 0.1; done
[[ -S $socket ]] || { echo "uzram: the server did not start" >&2; exit 1; }

# Real data so the stats say something: up to 128 MiB of /usr/lib.
sample=$(mktemp)
tar cf - /usr/lib 2>/dev/null | head -c 128M >"$sample" || true
size=$(( $(stat -c %s "$sample") / 4096 * 4096 ))
truncate -s "$size" "$sample"
echo "storing $((size / 1048576)) MiB of /usr/lib in uzram0 ..."
nbdcopy "$sample" "nbd+unix:///?socket=$socket"
rm -f "$sample"
"$uzram" status
echo "mm_stat: $("$uzram" attr uzram0 mm_stat)"
echo
echo "serving until Ctrl-C; connect with: nbdinfo 'nbd+unix:///?socket=$socket'"
wait $server
