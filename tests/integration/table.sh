#!/usr/bin/env bash
# table.sh - the page table is memory inside the limits (issue 23): a 64 GiB device's 256 MiB
# table is shown (table_mem), charged to --server-mem-limit (a limit it does not fit under
# refuses the device, at start and by hot-add, with the figures), and a device whose table
# would pass a quarter of the machine's memory (hot-add of 1P) is refused with the figures.
# A client writing one same-filled page per MiB fills the table: server_mem_used showed 0
# before. Each check failed against the code before issue 23.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

need_python_nbd
[[ $(awk '/^MemTotal/ {print $2}' /proc/meminfo) -ge $((2 * 1024 * 1024)) ]] ||
    skip "a 64G device's 256M page table needs a machine of 2 GiB or more"
lib_init

TABLE=$((256 * MiB)) # 64 GiB / 4 KiB x 16 bytes
field() { "$UZRAM" status --json "$1" | $PY -c 'import json, sys; print(json.load(sys.stdin)[0][sys.argv[1]])' "$2"; }

# --- a limit the table does not fit under refuses the device, with the figures ---
if out=$(timeout 5 "$UZRAM" serve -n small -s 64G --server-mem-limit 100M 2>&1) || [[ $? -eq 124 ]]; then
    fail "a 64G device was served under a 100M server limit"
fi
grep -q "the page table of small takes 256M (16 bytes per 4 KiB page) and does not fit under the server's memory limit (100M, 0B in use)" <<<"$out" ||
    fail "refusal: $out"
pass "64G under --server-mem-limit 100M refused: $out"

# --- counted and charged: server_mem_used holds the table before any write ---
start_server big -s 64G -m 1M --server-mem-limit 512M
[[ $(stat_json_field big table_mem) -eq $TABLE ]] || fail "table_mem $(stat_json_field big table_mem)"
[[ $(field big server_mem_used) -eq $TABLE ]] || fail "server_mem_used $(field big server_mem_used) before any write"
pid=${SERVER_PID[big]}
rss_before=$(awk '/^VmRSS/ {print $2}' /proc/$pid/status)
$PY - "$(sock_of big)" <<'EOF' || fail "the client's writes"
import sys
import nbd
h = nbd.NBD()
h.connect_unix(sys.argv[1])
page = b"\xab" * 4096  # same-filled: no pool memory
for mib in range(8192):  # one page per MiB of the first 8 GiB: 2048 table pages
    h.pwrite(page, mib << 20)
h.shutdown()
EOF
rss_after=$(awk '/^VmRSS/ {print $2}' /proc/$pid/status)
[[ $((rss_after - rss_before)) -ge $((8 * 1024)) ]] ||
    fail "the table did not become resident: VmRSS $rss_before -> $rss_after KiB"
[[ $(mm_stat_field big 2) -eq 0 ]] || fail "same-filled pages took pool memory"
[[ $(field big server_mem_used) -eq $TABLE ]] || fail "server_mem_used $(field big server_mem_used) after the writes"
pass "64G -m 1M: table_mem and server_mem_used $TABLE before any write; one same-filled page per MiB of 8 GiB grew VmRSS by $(((rss_after - rss_before) / 1024)) MiB, inside what was charged (mem_used_total 0)"

# --- hot-add: past the machine's share, and past the server's limit ---
if "$UZRAM" hot-add huge 1P 2>"$WORK/huge.err"; then fail "hot-add of a 1P device was accepted"; fi
grep -q "not enough memory to create a 1P device: its page table takes 4T (16 bytes per 4 KiB page), and at most 1/4 of this machine's" \
    "$WORK/huge.err" || fail "hot-add 1P: $(cat "$WORK/huge.err")"
if "$UZRAM" hot-add more 128G 2>"$WORK/more.err"; then fail "hot-add of a 128G device under the limit was accepted"; fi
grep -q "the page table of more takes 512M (16 bytes per 4 KiB page) and does not fit under the server's memory limit (512M, 256M in use)" \
    "$WORK/more.err" || fail "hot-add 128G: $(cat "$WORK/more.err")"
"$UZRAM" hot-add fits 32G >/dev/null || fail "hot-add of a 32G device (128M table) under the limit"
[[ $(field big server_mem_used) -eq $((TABLE + 128 * MiB)) ]] || fail "server_mem_used $(field big server_mem_used) with two devices"
"$UZRAM" hot-remove fits >/dev/null || fail "hot-remove"
[[ $(field big server_mem_used) -eq $TABLE ]] || fail "hot-remove did not give the table back"
stop_server big
pass "hot-add 1P refused ($(cat "$WORK/huge.err")), 128G refused under the limit, 32G charged and given back at hot-remove"

echo "PASS: table.sh"
