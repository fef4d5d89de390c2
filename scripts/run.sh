#!/bin/bash
# run.sh - what `make run` does: serve a device on defaults, store some real pages in it, show its
# stats, and keep serving until Ctrl-C. The sockets go where the program puts them by itself
# (the runtime directory: $XDG_RUNTIME_DIR/uzram, or /run/uzram for root; see uzram(1)), so
# `build/uzram status` in another shell finds the device with no option.
# UZRAM_RUN_SAMPLE_MIB (default 128) is how much of /usr/lib is stored.
set -euo pipefail
cd "$(dirname "$0")/.."
uzram=$PWD/build/uzram
sample_mib=${UZRAM_RUN_SAMPLE_MIB:-128}

banner=$(mktemp)
"$uzram" serve >"$banner" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true; rm -f "$banner"' EXIT
# The banner comes once this server listens (a uzram0 left running elsewhere is not ours).
for _ in $(seq 100); do
    [[ -s $banner ]] && break
    kill -0 $server 2>/dev/null || exit 1 # the server said why on stderr
    sleep 0.1
done
[[ -s $banner ]] || { echo "uzram: the server did not start within 10 s" >&2; exit 1; }
cat "$banner"
socket=$("$uzram" status --noheadings --raw --output socket uzram0)

# Real data so the stats say something: up to 128 MiB of /usr/lib.
sample=$(mktemp)
tar cf - /usr/lib 2>/dev/null | head -c "${sample_mib}M" >"$sample" || true
size=$(( $(stat -c %s "$sample") / 4096 * 4096 ))
truncate -s "$size" "$sample"
echo "storing $((size / 1048576)) MiB of /usr/lib in uzram0 ..."
nbdcopy "$sample" "nbd+unix:///?socket=$socket"
rm -f "$sample"
"$uzram" status
echo "mm_stat: $("$uzram" attr uzram0 mm_stat)"
echo
echo "uzram0 is served until Ctrl-C, which discards its data. From another shell:"
echo "  build/uzram status                      # the device and its statistics"
echo "  build/uzram attr uzram0                 # every attribute"
echo "  nbdinfo 'nbd+unix:///?socket=$socket'"
wait $server
