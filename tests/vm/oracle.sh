#!/usr/bin/env bash
# oracle.sh - VM scenario (d): the guest's kernel zram as the oracle of uzram's zram
# attributes. The same steps run on /dev/zram0 and on a uzram device attached through ublk,
# each with the scratch disk as backing device: disksize, reset, mem_limit, mm_stat and
# io_stat after writes and reads of known pages, idle all / idle N, writeback idle and huge,
# writeback_limit(_enable), bd_stat. Every field of every step is compared; each one where
# uzram differs must be explained in tests/vm/oracle-notes.tsv (else the scenario fails and
# names it), and the table of differences goes to VM_OUT/oracle.md (bench/vm-docs.sh puts it
# in docs/ZRAM-ORACLE.md). With --quick (make check) the same, on fewer pages.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

vm_init
need_module zram ublk_drv
[[ -b $VM_SCRATCH ]] || skip "no scratch disk $VM_SCRATCH for the backing device"
PAGES=512 # pages of each kind written
[[ ${1:-} == --quick ]] && PAGES=64
NOTES=$VM_LIB_DIR/oracle-notes.tsv
ZRAM=/sys/block/zram0

# The written pages: zero, same-filled, text (compressible), random (stored huge).
pages_file() { # FILE SEED
    {
        head -c $((PAGES * 4096)) /dev/zero
        head -c $((PAGES * 4096)) /dev/zero | tr '\0' '\132'
        head -c $((PAGES * 3072)) <(yes "$2 the page memory of a compressed block device") |
            base64 -w 0 | head -c $((PAGES * 4096))
        head -c $((PAGES * 4096)) /dev/urandom
    } >"$1"
}

# --- one kind of device: zram or uzram ---
KIND=
DEV=
get() { # ATTR
    if [[ $KIND == zram ]]; then cat "$ZRAM/$1"; else "$UZRAM" attr or "$1"; fi
}
set_attr() { # ATTR VALUE: prints "ok" or the error
    local out
    if [[ $KIND == zram ]]; then
        out=$( (echo "$2" >"$ZRAM/$1") 2>&1) && echo ok || echo "error: ${out##*: }"
    else
        out=$("$UZRAM" attr or "$1" "$2" 2>&1) && echo ok || echo "error: ${out##*: }"
    fi
}
record() { # STEP FIELD VALUE
    echo "$1.$2 $3" >>"$WORK/$KIND.txt"
}
record_stats() { # STEP: every field of mm_stat, io_stat, bd_stat by its zram name
    local names values i
    for stat in mm_stat io_stat bd_stat; do
        case $stat in
        mm_stat) names=(orig_data_size compr_data_size mem_used_total mem_limit mem_used_max
            same_pages pages_compacted huge_pages huge_pages_since) ;;
        io_stat) names=(failed_reads failed_writes invalid_io notify_free) ;;
        bd_stat) names=(bd_count bd_reads bd_writes) ;;
        esac
        read -r -a values <<<"$(get "$stat")"
        for i in "${!names[@]}"; do record "$1" "${names[i]}" "${values[i]:-absent}"; done
    done
}
write_pages() { # FILE
    dd if="$1" of="$DEV" bs=1M oflag=direct status=none 2>/dev/null && echo ok || echo failed
}
read_back() { # FILE
    cmp -s -n "$(stat -c %s "$1")" "$1" <(dd if="$DEV" bs=1M iflag=direct status=none) && echo equal || echo differs
}

setup() {
    if [[ $KIND == zram ]]; then
        echo 1 >"$ZRAM/reset"
        echo "$VM_SCRATCH" >"$ZRAM/backing_dev"
        echo lz4 >"$ZRAM/comp_algorithm"
        echo 64M >"$ZRAM/disksize"
        DEV=/dev/zram0
    else
        start_server or -s 64M -a lz4
        set_attr backing_dev "$VM_SCRATCH" >/dev/null
        DEV=$("$UZRAM" attach --via ublk or) || fail "attach --via ublk"
    fi
}
teardown() {
    if [[ $KIND == zram ]]; then
        echo 1 >"$ZRAM/reset"
    else
        "$UZRAM" detach or && stop_server or
    fi
}

sequence() { # KIND
    KIND=$1
    : >"$WORK/$KIND.txt"
    setup
    for attr in disksize initstate comp_algorithm mem_limit backing_dev writeback_limit_enable \
        writeback_limit; do
        record init "attr_$attr" "$(get "$attr" 2>&1 | tr ' \n' '_ ' | sed 's/ *$//')"
    done
    record_stats init
    record write result "$(write_pages "$WORK/pages")"
    record_stats write
    record read result "$(read_back "$WORK/pages")"
    record_stats read
    # Writeback of the idle pages: everything is idle after `idle all`.
    record idle_all set "$(set_attr idle all)"
    record wb_idle set "$(set_attr writeback idle)"
    record_stats wb_idle
    record wb_idle_read result "$(read_back "$WORK/pages")"
    record_stats wb_idle_read
    # New pages over the first half; then the huge ones go out.
    dd if="$WORK/pages2" of="$DEV" bs=1M oflag=direct status=none
    record wb_huge set "$(set_attr writeback huge)"
    record_stats wb_huge
    # idle N: only the pages not touched for N seconds are marked. Wait, touch the text
    # pages (read), mark those idle for 2 s, write them back: the rest stays.
    sleep 3
    dd if="$DEV" of=/dev/null bs=4096 skip=$((2 * PAGES)) count="$PAGES" iflag=direct status=none
    record idle_n set "$(set_attr idle 2)"
    record wb_idle_n set "$(set_attr writeback idle)"
    record_stats wb_idle_n
    # writeback_limit: enabled with 0 pages left, writeback refuses; with 4, it stops there.
    record wb_limit enable "$(set_attr writeback_limit_enable 1)"
    record wb_limit zero "$(set_attr writeback_limit 0)"
    dd if="$WORK/pages" of="$DEV" bs=1M oflag=direct status=none
    set_attr idle all >/dev/null
    record wb_limit at_zero "$(set_attr writeback idle)"
    record wb_limit four "$(set_attr writeback_limit 4)"
    record wb_limit at_four "$(set_attr writeback idle)"
    record wb_limit attr_left "$(get writeback_limit)"
    record_stats wb_limit
    # mem_limit: 1 MiB, then random pages do not fit.
    record mem_limit set "$(set_attr mem_limit 1M)"
    record mem_limit attr_get "$(get mem_limit 2>&1 | sed 's/.*: //')"
    head -c $((PAGES * 4096)) /dev/urandom >"$WORK/random"
    record mem_limit write "$(write_pages "$WORK/random")"
    record_stats mem_limit
    record mem_used_max reset "$(set_attr mem_used_max 0)"
    # reset while the device is open elsewhere is the server's business (uzram refuses it
    # while attached): reset after teardown of the block device, as zramctl does.
    if [[ $KIND == zram ]]; then
        record reset set "$(set_attr reset 1)"
    else
        "$UZRAM" detach or
        record reset set "$(set_attr reset 1)"
    fi
    record reset attr_disksize "$(get disksize)"
    record reset attr_initstate "$(get initstate)"
    record_stats reset
    if [[ $KIND == zram ]]; then teardown; else stop_server or; fi
}

pages_file "$WORK/pages" 1
pages_file "$WORK/pages2" 2
head -c $((PAGES * 4096 * 2)) "$WORK/pages2" >"$WORK/pages2.half" && mv "$WORK/pages2.half" "$WORK/pages2"
sequence zram
sequence uzram

# --- the comparison ---
# Read once into arrays: a program run per field (awk, a loop over the notes file) took tens
# of seconds under emulation.
patterns=() texts=()
while IFS=$'\t' read -r pattern text; do
    [[ -z $pattern || $pattern == \#* ]] && continue
    patterns+=("$pattern") texts+=("$text")
done <"$NOTES"
declare -A uzram_value=()
while read -r key value; do uzram_value[$key]=$value; done <"$WORK/uzram.txt"
explain() { # KEY: sets why to the text of the first note whose pattern matches
    local i
    for i in "${!patterns[@]}"; do
        # shellcheck disable=SC2053
        [[ $1 == ${patterns[i]} ]] && { why=${texts[i]}; return 0; }
    done
    return 1
}
table=$VM_OUT/oracle.md
unexplained=()
differ=0 same=0
{
    echo "| step.field | kernel zram | uzram | why |"
    echo "| --- | --- | --- | --- |"
} >"$table"
while read -r key zval; do
    uval=${uzram_value[$key]-}
    if [[ $zval == "$uval" ]]; then
        same=$((same + 1))
        continue
    fi
    differ=$((differ + 1))
    if explain "$key"; then
        echo "| \`$key\` | ${zval//|/\\|} | ${uval//|/\\|} | $why |" >>"$table"
    else
        unexplained+=("$key: zram '$zval', uzram '$uval'")
    fi
done <"$WORK/zram.txt"
result oracle_fields "$same" "$differ"
cat "$table"
[[ ${#unexplained[@]} -eq 0 ]] || fail "differences with no explanation in tests/vm/oracle-notes.tsv: $(printf '%s; ' "${unexplained[@]}")"
pass "$((same + differ)) fields compared with kernel zram: $same equal, $differ different, each explained"
echo "PASS: oracle.sh"
