#!/usr/bin/env bash
# writeback.sh - integration test: a backing file below memory, over NBD with real clients. With
# mem_limit at a quarter of the data, --writeback-when-full stores all of it with no error, every
# byte reads back equal (in order and at random), mm_stat and bd_stat add up with the file's
# allocated blocks, and after a discard of everything those blocks are back near 0. Then zram's
# writeback attributes, a full backing store (said once in the log), and a loop device as store.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

need_tools nbdcopy tar cmp stat
need_python_nbd
lib_init

# The data set, 48 MiB: C headers and this project's sources (text), then program and library
# bytes (binary), then zeros: what a developer's disk holds. It compresses about 3x with lz4,
# so a quarter of it in memory is not enough without writeback.
DATA=$WORK/data.img
SIZE=$((48 * MiB))
LIMIT=$((SIZE / 4))
{
    tar cf - -C /usr/include . 2>/dev/null | head -c $((20 * MiB)) || true
    tar cf - lib include src tests 2>/dev/null || true
    # programs first, and no compressed files: the first 40 files of /usr/lib were once kernel
    # modules (.ko.xz) of 300 KiB, too few bytes for the data set
    find /usr/bin /usr/lib -type f -size +100k ! -name '*.xz' ! -name '*.zst' 2>/dev/null |
        head -200 | xargs cat 2>/dev/null | head -c $((20 * MiB)) || true
} >"$DATA"
[[ $(stat -c %s "$DATA") -ge $((36 * MiB)) ]] || skip "not enough files to make a 36 MiB data set"
truncate -s $SIZE "$DATA"

json() { stat_json_field "$1" "$2"; }
allocated() { echo $(($(stat -c %b "$1") * $(stat -c %B "$1"))); }

# ---- a quarter of the data in memory, the rest written back when full ------------------------
STORE=$WORK/store
start_server wb -s 64M -a lz4 -m $LIMIT --backing-file "$STORE" --writeback-when-full
URI=$(uri_of wb)
[[ $("$UZRAM" attr wb backing_dev) == "$STORE" ]] || fail "backing_dev reads $("$UZRAM" attr wb backing_dev)"
[[ $("$UZRAM" attr wb writeback_when_full) == 1 ]] || fail "writeback_when_full is not 1"
nbdcopy --no-extents "$DATA" "$URI" || fail "nbdcopy of 4x mem_limit into the device failed"
[[ $(json wb failed_writes) -eq 0 ]] || fail "failed_writes $(json wb failed_writes)"
mem=$(mm_stat_field wb 2)
[[ $mem -le $LIMIT ]] || fail "mem_used_total $mem past mem_limit $LIMIT"
nbdcopy "$URI" "$WORK/back.img" || fail "nbdcopy out of the device"
cmp -n $SIZE "$DATA" "$WORK/back.img" || fail "data read back differs"
pass "$((SIZE / MiB)) MiB stored with mem_limit $((LIMIT / MiB)) MiB: mem_used_total $mem, $(json wb bd_objects) pages written back, read back identical"

# Random 4 KiB reads (some from memory, most from the file) with a real client, checked
# against the data; reads also race with the thread writing back and with overwrites.
cat >"$WORK/reads.py" <<'EOF'
import random, sys
import nbd
uri, data_path, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = open(data_path, "rb").read()
h = nbd.NBD()
h.connect_uri(uri)
rng = random.Random(13)
pages = len(data) // 4096
for i in range(count):
    page = rng.randrange(pages)
    got = h.pread(4096, page * 4096)
    if got != data[page * 4096:(page + 1) * 4096]:
        sys.exit(f"page {page} differs")
    if i % 16 == 0:
        # overwrite a page with what it holds already, from the other end of the disk
        other = rng.randrange(pages)
        h.pwrite(data[other * 4096:(other + 1) * 4096], other * 4096)
EOF
reads_before=$(json wb bd_reads)
$PY "$WORK/reads.py" "$URI" "$DATA" 4000 || fail "random reads"
[[ $(json wb bd_reads) -gt $reads_before ]] || fail "no read came from the backing store"
[[ $(json wb failed_reads) -eq 0 ]] || fail "failed_reads $(json wb failed_reads)"
pass "4000 random 4 KiB reads equal to the data ($(($(json wb bd_reads) - reads_before)) from the file), with overwrites"

# mm_stat and bd_stat add up: every page is counted once, the objects in memory and on the
# store are the ones a device without a limit holds, the blocks in use hold them, and the
# file holds those blocks.
"$UZRAM" attr wb writeback_when_full 0 || fail "writeback_when_full 0"
"$UZRAM" attr wb compact 1 || fail "compact"
read -r orig compr mem _ <<<"$("$UZRAM" attr wb mm_stat)"
read -r bd_count bd_reads bd_writes <<<"$("$UZRAM" attr wb bd_stat)"
pages=$(json wb pages_stored)
bd_data=$(json wb bd_data_size)
[[ $orig -eq $((pages * 4096)) ]] || fail "orig_data_size $orig != pages_stored $pages * 4096"
[[ $bd_writes -ge $(json wb bd_objects) && $bd_reads -gt 0 ]] || fail "bd_stat $bd_count $bd_reads $bd_writes"
# Packed, not a block per page: after compaction every block but the open ones is more than
# half full (backing.h); pages read again came back into memory and left holes in theirs.
[[ $((bd_count * 4096)) -ge $bd_data && $((bd_count * 4096)) -le $((2 * bd_data + 65536)) &&
    $bd_count -lt $(($(json wb bd_objects) * 3 / 4)) ]] ||
    fail "bd_count $bd_count blocks for $bd_data bytes in $(json wb bd_objects) objects: not packed"
file=$(allocated "$STORE")
[[ $file -ge $((bd_count * 4096)) && $file -le $((bd_count * 4096 + 1048576)) ]] ||
    fail "the file holds $file bytes for bd_count $bd_count blocks"
start_server ref -s 64M -a lz4
nbdcopy --no-extents "$WORK/back.img" "$(uri_of ref)" || fail "nbdcopy into the reference device"
ref_compr=$(mm_stat_field ref 1)
[[ $((compr + bd_data)) -eq $ref_compr ]] ||
    fail "compr_data_size $compr + bd_data_size $bd_data != $ref_compr of a device without limit"
[[ $(($(json ref pages_stored) - $(json ref same_pages))) -eq $((pages - $(json wb same_pages))) ]] ||
    fail "pages not same-filled: $((pages - $(json wb same_pages))), the reference $(($(json ref pages_stored) - $(json ref same_pages)))"
stop_server ref
pass "mm_stat + bd_stat add up: $compr + $bd_data compressed bytes = the reference's $ref_compr; bd_count $bd_count blocks, file $file bytes allocated"

# Discard everything: the file's allocated blocks go back to (near) 0.
$PY -c '
import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1]); h.trim(h.get_size(), 0)' "$URI" || fail "trim of the whole device"
"$UZRAM" attr wb compact 1 || fail "compact"
file=$(allocated "$STORE")
[[ $file -le 262144 ]] || fail "after discarding everything the file still holds $file bytes"
[[ $(mm_stat_field wb 0) -eq 0 && $(json wb bd_objects) -eq 0 ]] || fail "data left after the discard"
pass "after a discard of everything the file holds $file bytes (bd_count $(json wb bd_count))"

# ---- zram's writeback, by hand, with recompression and dedup --------------------------------
"$UZRAM" attr wb reset 1 || fail "reset"
"$UZRAM" attr wb mem_limit 0 || fail "mem_limit 0"
nbdcopy --no-extents "$DATA" "$URI" || fail "nbdcopy into the device"
"$UZRAM" attr wb writeback huge || fail "writeback huge"
huge_written=$(json wb bd_objects)
"$UZRAM" attr wb idle all || fail "idle all"
"$UZRAM" attr wb recomp_algorithm "algo=zstd priority=1" || fail "recomp_algorithm"
"$UZRAM" attr wb recompress type=idle || fail "recompress type=idle"
"$UZRAM" attr wb writeback_limit 100 || fail "writeback_limit 100"
"$UZRAM" attr wb writeback_limit_enable 1 || fail "writeback_limit_enable 1"
if "$UZRAM" attr wb writeback idle 2>/dev/null; then fail "writeback past writeback_limit did not fail"; fi
[[ $(json wb bd_objects) -eq $((huge_written + 100)) ]] || fail "writeback_limit 100 let $(($(json wb bd_objects) - huge_written)) pages go"
"$UZRAM" attr wb writeback_limit_enable 0 || fail "writeback_limit_enable 0"
"$UZRAM" attr wb writeback "page_indexes=0-1023 page_index=5000" || fail "writeback page_indexes"
"$UZRAM" attr wb writeback idle || fail "writeback idle"
[[ $(json wb compr_data_size) -eq 0 ]] || fail "writeback idle left $(json wb compr_data_size) bytes in memory"
nbdcopy "$URI" "$WORK/back2.img" || fail "nbdcopy out of the device"
cmp -n $SIZE "$DATA" "$WORK/back2.img" || fail "data read back after writeback by hand differs"
if out=$("$UZRAM" attr wb writeback cold 2>&1); then fail "writeback cold accepted"; fi
grep -q "idle, huge, huge_idle or incompressible" <<<"$out" || fail "no usage in the error: $out"
if "$UZRAM" attr wb backing_dev none 2>/dev/null; then fail "backing_dev changed while data is stored"; fi
pass "writeback huge, idle (after recompress), page_indexes and writeback_limit by attribute; read back identical"
stop_server wb
[[ ! -s $STORE || $(allocated "$STORE") -eq 0 ]] || fail "the server left $(allocated "$STORE") bytes in its store"

# ---- a full store: said once in the log, writes past mem_limit then fail ----------------------
start_server full -s 64M -m 2M --backing-file "$WORK/small" --backing-size 2M --writeback-when-full
cat >"$WORK/fill.py" <<'EOF'
import errno, random, sys
import nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
rng = random.Random(5)
acked = nospace = 0
for block in range(h.get_size() // 65536):
    data = rng.randbytes(65536)
    try:
        h.pwrite(data, block * 65536)
        acked += 1
    except nbd.Error as e:
        if e.errnum != errno.ENOSPC:
            sys.exit(f"write: {e} (only ENOSPC is allowed)")
        nospace += 1
print(acked, nospace)
if nospace == 0:
    sys.exit("the store never filled")
EOF
read -r acked nospace <<<"$($PY "$WORK/fill.py" "$(uri_of full)")" || fail "filling the small store"
sleep 1.5 # the server looks at the counters every second
said=$(grep -c "backing store .*: full" "$WORK/server-full.err" || true)
[[ $said -eq 1 ]] || fail "the full store was said $said times in the log"
[[ $(json full bd_nospace) -gt 0 ]] || fail "bd_nospace is 0"
pass "a 2 MiB store fills: $acked writes acknowledged, $nospace refused with ENOSPC, said once in the log"
stop_server full

# ---- a block device as store (a loop device; root only) ---------------------------------------
if [[ $(id -u) -ne 0 ]] || ! command -v losetup >/dev/null; then
    skip_check "loop device as backing store: needs root and losetup"
else
    truncate -s 32M "$WORK/loop.img"
    if LOOP=$(losetup --find --show "$WORK/loop.img" 2>/dev/null); then
        at_exit "losetup -d $LOOP"
        start_server blk -s 64M -m 4M --backing-file "$LOOP" --writeback-when-full
        head -c $((24 * MiB)) "$DATA" >"$WORK/part.img"
        nbdcopy --no-extents "$WORK/part.img" "$(uri_of blk)" || fail "nbdcopy onto the loop-backed device"
        nbdcopy "$(uri_of blk)" "$WORK/back3.img" || fail "nbdcopy out of the loop-backed device"
        cmp -n $((24 * MiB)) "$WORK/part.img" "$WORK/back3.img" || fail "loop-backed data differs"
        [[ $(json blk bd_objects) -gt 0 ]] || fail "nothing went to the loop device"
        pass "a loop device as backing store: $(json blk bd_objects) pages on it, read back identical"
        stop_server blk
    else
        skip_check "loop device as backing store: losetup could not attach one here"
    fi
fi

# ---- options that need a store are refused without one --------------------------------------
if out=$("$UZRAM" serve -n bad -s 16M --writeback-when-full 2>&1); then fail "--writeback-when-full without a store accepted"; fi
grep -q "needs --backing-file" <<<"$out" || fail "no hint in: $out"
# a rate for the thread of a store there is not (it was dropped without a word)
if out=$("$UZRAM" serve -n bad -s 16M --writeback-rate 100 2>&1); then fail "--writeback-rate without a store accepted"; fi
grep -q "^uzram: --writeback-rate needs --backing-file" <<<"$out" || fail "no hint in: $out"
if out=$("$UZRAM" serve -n bad -s 16M --backing-file / 2>&1); then fail "--backing-file / accepted"; fi
grep -q "cannot use --backing-file '/'" <<<"$out" || fail "no hint in: $out"
pass "writeback options without a usable store are refused with a hint"
