#!/usr/bin/env bash
# bench.sh - integration test of `uzram bench`, the engine's in-process benchmark (bench/run.sh
# and bench/server-profile.sh read its JSON): each section asked for runs and reports a
# measurement per cell asked, with the pages it stored, and the command exits 0. (Once every
# section printed only the header and exited 1: the command line's "go on" status was taken
# for the first section's result.)
set -euo pipefail
source "$(dirname "$0")/lib.bash"

[[ -x $PY ]] || skip "$PY is missing"
lib_init

# check_json FILE SECTION COUNT KEY: SECTION of the report has COUNT items, each with KEY > 0.
check_json() {
    $PY - "$@" <<'EOF' || fail "$(basename "$1"): section $2 is not $3 items with $4 > 0"
import json, sys
path, section, count, key = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
items = json.load(open(path)).get(section)
if not isinstance(items, list) or len(items) != count or not all(i.get(key, 0) > 0 for i in items):
    print("%s: %s" % (section, json.dumps(items)[:300]), file=sys.stderr)
    sys.exit(1)
EOF
}

# 1. Throughput (and the codec section that comes with it): lz4 and zstd on one data kind at
# one thread: two cells, each 1024 pages written and read.
"$UZRAM" bench -a lz4,zstd -k half -t 1 -s 4M --json >"$WORK/sweep.json" ||
    fail "uzram bench (throughput) exited $?"
check_json "$WORK/sweep.json" throughput 2 write_MBps
check_json "$WORK/sweep.json" throughput 2 read_MBps
$PY -c 'import json, sys; assert all(i["pages"] == 1024 for i in json.load(open(sys.argv[1]))["throughput"])' \
    "$WORK/sweep.json" || fail "throughput: a cell did not store the 1024 pages of 4 MiB"
pass "throughput: a measurement per algorithm asked, 1024 pages each"

# 2. The same-filled check alone: its five page shapes.
"$UZRAM" bench --same-check -s 4M --json >"$WORK/same.json" || fail "uzram bench --same-check exited $?"
check_json "$WORK/same.json" same_filled_check 5 GBps
pass "same-filled check: five page shapes"

# 3. Dedup off and on: unique and identical pages, each both ways.
"$UZRAM" bench --dedup -a lz4 -t 1 -s 4M --json >"$WORK/dedup.json" || fail "uzram bench --dedup exited $?"
check_json "$WORK/dedup.json" dedup 4 write_MBps
pass "dedup: unique and identical pages, off and on"

# 4. Text output: the section's table, not only the header line.
"$UZRAM" bench -a lz4 -k text -t 1 -s 4M >"$WORK/sweep.txt" || fail "uzram bench (text) exited $?"
grep -Eq '^lz4 +text +1 ' "$WORK/sweep.txt" || fail "no lz4 text row in: $(cat "$WORK/sweep.txt")"
pass "text report: a row per cell"
