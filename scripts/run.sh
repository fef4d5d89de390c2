#!/bin/bash
# run.sh - what `make run` does: serve a device on defaults, store some real pages in it, show its
# stats, and keep serving until Ctrl-C. The sockets go where the program puts them by itself
# (the runtime directory: $XDG_RUNTIME_DIR/uzram, or /run/uzram for root; see uzram(1)), so
# `build/uzram status` in another shell finds the device with no option.
# UZRAM_RUN_SAMPLE_MIB (default 128) is how much data is stored: half headers (/usr/include),
# half programs (/usr/bin), text and code as a machine holds them, compressible as such files
# are (debug files, which are incompressible, are left out).
set -euo pipefail
cd "$(dirname "$0")/.."
uzram=$PWD/build/uzram
sample_mib=${UZRAM_RUN_SAMPLE_MIB:-128}

banner=$(mktemp)
sample=$(mktemp)
"$uzram" serve >"$banner" &
server=$!
stop() {
    kill -TERM $server 2>/dev/null || true
    wait $server 2>/dev/null || true
    rm -f "$banner" "$sample"
}
trap stop EXIT
# Ctrl-C is how a user ends it: the server is stopped (it says what it discards), and this
# script ends with status 0, so make does not report an error.
trap 'echo; exit 0' INT
# The banner comes once this server listens (a uzram0 left running elsewhere is not ours).
for _ in $(seq 100); do
    [[ -s $banner ]] && break
    kill -0 $server 2>/dev/null || exit 1 # the server said why on stderr
    sleep 0.1
done
[[ -s $banner ]] || { echo "uzram: the server did not start within 10 s" >&2; exit 1; }
cat "$banner"
uri=$("$uzram" status --noheadings --raw --output uri uzram0)

half=$((sample_mib / 2))
{
    tar cf - /usr/include 2>/dev/null | head -c "${half}M" || true
    tar cf - /usr/bin 2>/dev/null | head -c "$((sample_mib - half))M" || true
} >"$sample"
size=$(($(stat -c %s "$sample") / 4096 * 4096))
truncate -s "$size" "$sample"
echo "storing $((size / 1048576)) MiB of /usr/include and /usr/bin in uzram0 ..."
nbdcopy "$sample" "$uri"
rm -f "$sample"
"$uzram" status
echo "mm_stat: $("$uzram" attr uzram0 mm_stat)"
echo
echo "uzram0 is served until Ctrl-C, which discards its data. From another shell:"
echo "  build/uzram status                      # the device and its statistics"
echo "  build/uzram attr uzram0                 # every attribute"
echo "  nbdinfo '$uri'"
wait $server
