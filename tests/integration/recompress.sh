#!/usr/bin/env bash
# recompress.sh - integration test: idle pages and recompression over NBD with nbdcopy. A data set
# written with lz4 + dedup, `idle all`, `recompress type=idle`: it reads back byte-identical and
# mm_stat shrinks; then the background mode (--recompress-idle) does the same by itself, with a
# trained dictionary; bad values get an error that says what to write.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

need_tools nbdcopy tar cmp
lib_init

# The data set: real files (C headers, this project's sources), 24 MiB, as a developer's
# disk holds them, with some duplicate pages (the same tree twice).
DATA=$WORK/data.img
SRC=
for dir in /usr/include /usr/share/doc "$(pwd)"; do
    [[ -d $dir ]] && { SRC=$dir; break; }
done
[[ -n $SRC ]] || skip "no directory tree to copy"
tar cf "$DATA" -C "$SRC" . 2>/dev/null || [[ -s $DATA ]] || fail "tar of $SRC"
truncate -s $((20 * MiB)) "$DATA"
tar cf - lib include >>"$DATA" || fail "tar of the sources"
truncate -s $((24 * MiB)) "$DATA"

json() { stat_json_field "$1" "$2"; }

# settled NAME COUNTER: wait (at most 120 s) until the background thread has gone through the
# pages: COUNTER above 0 and the same while the thread ended 2 passes (recomp_passes).
settled() {
    local last=x now passes since=0
    for _ in $(seq 240); do
        sleep 0.5
        now=$(json "$1" "$2")
        passes=$(json "$1" recomp_passes)
        # unchanged while the thread ended 2 passes: a pass that trains the dictionary again
        # (once the write ended) spends seconds on it before it moves anything
        if [[ $now -gt 0 && $now == "$last" ]]; then
            ((passes - since >= 2)) && return 0
        else
            since=$passes
        fi
        last=$now
    done
    return 1
}

# ---- on request: idle all, recompress type=idle ----------------------------------------------
start_server rc -s 32M -a lz4 --dedup
URI=$(uri_of rc)
nbdcopy --no-extents "$DATA" "$URI" || fail "nbdcopy into the device"
compr_before=$(mm_stat_field rc 1)
mem_before=$(mm_stat_field rc 2)
"$UZRAM" attr rc recomp_algorithm "algo=zstd priority=1" || fail "set recomp_algorithm"
"$UZRAM" attr rc recomp_algorithm | grep -q '^#1: .*\[zstd\]' || fail "recomp_algorithm does not show #1 zstd"
# nothing is idle yet: nothing to do
"$UZRAM" attr rc recompress type=idle || fail "recompress type=idle (nothing idle)"
[[ $(json rc recomp_pages) -eq 0 ]] || fail "pages recompressed though none was idle"
"$UZRAM" attr rc idle all || fail "idle all"
stored=$(json rc pages_stored)
[[ $(json rc idle_pages) -eq $stored ]] || fail "idle all marked $(json rc idle_pages) of $stored pages"
"$UZRAM" attr rc recompress type=idle || fail "recompress type=idle"
"$UZRAM" attr rc compact 1 || fail "compact"
compr_after=$(mm_stat_field rc 1)
mem_after=$(mm_stat_field rc 2)
recompressed=$(json rc recomp_pages)
[[ $recompressed -gt 0 ]] || fail "recompress type=idle recompressed nothing"
[[ $compr_after -lt $compr_before ]] || fail "compr_data_size did not shrink: $compr_before -> $compr_after"
[[ $mem_after -lt $mem_before ]] || fail "mem_used_total did not shrink: $mem_before -> $mem_after"
[[ $(json rc recomp_saved_bytes) -eq $((compr_before - compr_after)) ]] ||
    fail "recomp_saved_bytes $(json rc recomp_saved_bytes) != $((compr_before - compr_after))"
nbdcopy "$URI" "$WORK/back.img" || fail "nbdcopy out of the device"
cmp -n $((24 * MiB)) "$DATA" "$WORK/back.img" || fail "data read back after recompression differs"
pass "idle all + recompress type=idle: $recompressed pages, compr_data_size $compr_before -> $compr_after, mem_used_total $mem_before -> $mem_after, read back identical"

# uzram estimate's projection of the same (every page recompressed: --hot 0) shrinks memory by the
# same factor (on 24 MiB the pool's partly filled spans weigh more than the estimate's full ones,
# so the absolute bytes differ; estimate.sh checks those on a larger set)
meta=$(mm_stat_field rc 10)
projection=$("$UZRAM" estimate -q --json -r zstd --hot 0 "$DATA" | $PY -c '
import json, sys
r = json.load(sys.stdin)["recompression"]
print(r["recompressed_bytes"] / r["primary_only_bytes"])')
measured=$($PY -c 'import sys; a, b, m = map(int, sys.argv[1:]); print((a + m) / (b + m))' "$mem_after" "$mem_before" "$meta")
$PY -c 'import sys; p, m = map(float, sys.argv[1:]); sys.exit(abs(p - m) > 0.05)' "$projection" "$measured" ||
    fail "estimate --recompress projects memory x$projection, the device went x$measured"
pass "estimate --recompress zstd --hot 0 projects memory x$projection; the device went x$measured"

# reads cleared the idle marks; a second pass finds nothing idle
[[ $(json rc idle_pages) -eq 0 ]] || fail "reading every page left $(json rc idle_pages) idle"

# bad values: an error naming what to write
if out=$("$UZRAM" attr rc recompress type=cold 2>&1); then fail "type=cold accepted"; fi
grep -q "it takes .*type=idle" <<<"$out" || fail "no usage in the error: $out"
if out=$("$UZRAM" attr rc idle 0 2>&1); then fail "idle 0 accepted"; fi
grep -q "all, or a number of seconds" <<<"$out" || fail "no usage in the error: $out"
if out=$("$UZRAM" attr rc recompress algo=lzo 2>&1); then fail "algo=lzo (not set) accepted"; fi
grep -q "set recomp_algorithm first" <<<"$out" || fail "no hint in the error: $out"
pass "bad values refused with what to write"
stop_server rc

# ---- in the background: --recompress-idle with a trained dictionary -----------------------------
if "$UZRAM" serve -n bad0 -s 8M --recompress-cpu 0 2>"$WORK/err"; then fail "--recompress-cpu 0 taken"; fi
grep -q "bad --recompress-cpu '0'; use a percent of one CPU, 1 to 100" "$WORK/err" ||
    fail "--recompress-cpu 0: $(cat "$WORK/err")"
start_server bg -s 32M -a lz4 --dedup --recompress-idle 1 --recompress algo=zstd,level=7,dict=auto \
    --recompress-cpu 50
URI=$(uri_of bg)
nbdcopy --no-extents "$DATA" "$URI" || fail "nbdcopy into the background device"
mem_before=$(mm_stat_field bg 2)
[[ $("$UZRAM" attr bg recompress_idle) -eq 1 ]] || fail "recompress_idle does not read 1"
[[ $("$UZRAM" attr bg recompress_cpu) -eq 50 ]] || fail "recompress_cpu does not read 50"
# pages unused for 1 s get recompressed
settled bg recomp_pages ||
    fail "the background thread did not finish within 120 s (recomp_pages $(json bg recomp_pages))"
"$UZRAM" attr bg algorithm_params | grep -q 'priority=1 algo=zstd level=7 dict=auto (trained' ||
    fail "no trained dictionary: $("$UZRAM" attr bg algorithm_params)"
dict=$(json bg dict_mem)
[[ $dict -gt 0 ]] || fail "dict_mem is 0 with a trained dictionary"
mem_after=$(mm_stat_field bg 2)
[[ $mem_after -lt $mem_before ]] || fail "background recompression left mem_used_total at $mem_after (was $mem_before)"
nbdcopy "$URI" "$WORK/back-bg.img" || fail "nbdcopy out of the background device"
cmp -n $((24 * MiB)) "$DATA" "$WORK/back-bg.img" || fail "data read back after background recompression differs"
pass "background: $(json bg recomp_pages) pages recompressed with a $dict-byte dictionary, mem_used_total $mem_before -> $mem_after (dictionary included), read back identical"
# at run time: off, then on again
"$UZRAM" attr bg recompress_idle 0 || fail "recompress_idle 0"
"$UZRAM" attr bg recompress_idle 5 || fail "recompress_idle 5"
stop_server bg

# ---- bundles: --dedup --recompress ...,group=8 (the issue 27 configuration): a page no other
# shares leaves the dedup index as it is bundled; the tree twice in DATA gives shared pages ----
start_server gb -s 32M -a lz4 --dedup --recompress-idle 1 --recompress algo=zstd,level=7,dict=auto,group=8
URI=$(uri_of gb)
[[ $("$UZRAM" attr gb recompress_group) -eq 8 ]] || fail "recompress_group does not read 8"
nbdcopy --no-extents "$DATA" "$URI" || fail "nbdcopy into the bundling device"
mem_before=$(mm_stat_field gb 2)
entries_before=$(json gb dedup_entries)
settled gb bundled_pages ||
    fail "the background thread did not bundle within 120 s (bundled_pages $(json gb bundled_pages))"
bundles=$(json gb bundles)
bundled=$(json gb bundled_pages)
[[ $bundles -gt 0 && $bundled -ge $((2 * bundles)) && $bundled -le $((8 * bundles)) ]] ||
    fail "$bundled pages in $bundles bundles"
[[ $(json gb bundle_saved_bytes) -gt 0 ]] || fail "bundle_saved_bytes is 0"
entries_after=$(json gb dedup_entries)
[[ $entries_after -lt $entries_before && $entries_after -gt 0 ]] ||
    fail "dedup_entries $entries_before -> $entries_after: bundled pages did not leave the index, or shared ones did"
mem_after=$(mm_stat_field gb 2)
[[ $mem_after -lt $mem_before ]] || fail "bundling left mem_used_total at $mem_after (was $mem_before)"
"$UZRAM" status -b -o NAME,bundles,bundled_pages | grep -Eq "^ *gb +$bundles +$bundled *$" ||
    fail "uzram status does not show the bundles: $("$UZRAM" status -b -o NAME,bundles,bundled_pages)"
nbdcopy "$URI" "$WORK/back-gb.img" || fail "nbdcopy out of the bundling device"
cmp -n $((24 * MiB)) "$DATA" "$WORK/back-gb.img" || fail "data read back from bundles differs"
pass "bundles under dedup: $bundled pages in $bundles bundles, dedup_entries $entries_before -> $entries_after, mem_used_total $mem_before -> $mem_after, read back identical, shown by uzram status"
# a member rewritten leaves a dead one; the data stays right
head -c 4096 /dev/urandom >"$WORK/page"
nbdcopy "$WORK/page" "$URI" || fail "rewrite of page 0"
[[ $(json gb bundle_dead_pages) -ge 1 ]] || fail "a rewritten bundled page left no dead member"
"$UZRAM" attr gb recompress_group 0 || fail "recompress_group 0"
if out=$("$UZRAM" attr gb recompress_group 17 2>&1); then fail "recompress_group 17 accepted"; fi
grep -q "2..16" <<<"$out" || fail "no usage in the error: $out"
stop_server gb
if out=$(timeout 20 "$UZRAM" serve -n gbad -s 1M --recompress algo=zstd,group=1 2>&1); then
    fail "serve took group=1"
fi
grep -q "group=1 is not a number of pages from 2 to 16" <<<"$out" || fail "no hint in the error: $out"
pass "bad group values refused with what to write"

# uzram estimate --group projects bundles (with -r zstd only)
"$UZRAM" estimate -q --json -r zstd:7 --hot 0 --group 8 "$DATA" >"$WORK/group.json" ||
    fail "estimate --group 8"
$PY - "$WORK/group.json" <<'EOF' || fail "estimate --group: $(cat "$WORK/group.json")"
import json, sys
d = json.load(open(sys.argv[1]))
r = d["recompression"]
pages = d["total"]["pages"]
sys.exit(not (r["group"] == 8 and 0 < r["bundled_pages"] <= pages and
              2 * r["bundles"] <= r["bundled_pages"] <= 8 * r["bundles"] and
              0 < r["recompressed_bundled_bytes"] < r["recompressed_dict_bytes"]))
EOF
if out=$("$UZRAM" estimate -q --group 8 "$DATA" 2>&1); then fail "estimate --group without -r accepted"; fi
grep -q "add -r zstd" <<<"$out" || fail "no hint in the error: $out"
if out=$("$UZRAM" estimate -q -r zstd --group 17 "$DATA" 2>&1); then fail "estimate --group 17 accepted"; fi
grep -q "2 to 16" <<<"$out" || fail "no hint in the error: $out"
pass "estimate --group 8 projects bundles below the dictionary's single pages; bad uses refused with what to write"
