#!/usr/bin/env bash
# fio.sh - integration test: fio's nbd engine against a real `uzram serve`, two jobs on two
# connections, random writes then reads verified with crc32c; also with --dedup and with zstd.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

need_tools fio
need_python_nbd
fio --enghelp=nbd >/dev/null 2>&1 || skip "this fio has no nbd engine"
lib_init

# run_fio NAME LABEL [fio options...]: one fio run of 2 jobs (one NBD connection each) on
# disjoint 64 MiB halves of the device; fails on any error or verify mismatch.
run_fio() {
    local name=$1 label=$2
    shift 2
    local out=$WORK/fio-$name-$label.json
    # fio leaves *-verify.state files in its working directory: keep them in $WORK
    if ! (cd "$WORK" && fio --output-format=json --output="$out" \
        --name="$label" --ioengine=nbd --uri="$(uri_of "$name")" \
        --numjobs=2 --size=64M --offset_increment=64M --iodepth=16 \
        --do_verify=1 --verify_fatal=1 --verify_dump=0 --exitall_on_error=1 \
        "$@" >"$WORK/fio.log" 2>&1); then
        cat "$WORK/fio.log" >&2
        fail "fio $label on server $name exited with an error (see above)"
    fi
    $PY - "$out" <<'EOF' || fail "fio $label on server $name: errors or short I/O in the report"
import json, sys
report = json.load(open(sys.argv[1]))
jobs = report["jobs"]
assert len(jobs) == 2, len(jobs)
for job in jobs:
    assert job["error"] == 0, ("job error", job["jobname"], job["error"])
    # every written byte was read back and verified
    written = job["write"]["io_bytes"]
    read = job["read"]["io_bytes"]
    assert written > 0 and written + read >= 64 << 20, ("short I/O", written, read)
    assert read >= written, ("verify read less than written", read, written)
    assert job.get("total_err", 0) == 0, ("errors", job.get("total_err"))
EOF
    server_alive "$name" || fail "server $name died during fio $label"
    pass "fio $label on $name: 2 jobs on disjoint 64 MiB ranges, all writes verified"
}

# --- default server (lz4, same-filled on, no dedup) ---
start_server plain -s 128M
run_fio plain randwrite-4k --rw=randwrite --bs=4k --verify=crc32c
run_fio plain randwrite-mixed --rw=randwrite --bsrange=512-128k --blockalign=512 \
    --verify=crc32c
# randrw: reads of blocks written earlier in the same run, verified as they go
run_fio plain randrw-4k --rw=randrw --bs=4k --verify=crc32c --verify_backlog=256
[[ $(mm_stat_field plain 0) -gt 0 ]] || fail "orig_data_size is 0 after the fio runs"
stop_server plain

# --- dedup: unique crc32c blocks, then a repeated pattern that must be deduplicated ---
start_server dedup -s 128M --dedup
[[ $("$UZRAM" attr dedup use_dedup) == 1 ]] || fail "use_dedup is not 1 with --dedup"
run_fio dedup randwrite-4k --rw=randwrite --bs=4k --verify=crc32c
run_fio dedup randwrite-mixed --rw=randwrite --bsrange=4k-64k --verify=crc32c
# Every 4 KiB page of this pattern is the same (and not same-filled): dedup must find them.
run_fio dedup pattern --rw=randwrite --bs=16k --verify=pattern \
    --verify_pattern=0x00112233445566778899aabbccddeeff0123456789abcdef
# The whole device now holds one distinct page: stored once, every other copy a reference.
orig=$(stat_json_field dedup orig_data_size)
compr=$(stat_json_field dedup compr_data_size)
dup=$(stat_json_field dedup dup_data_size)
[[ $orig -eq $((128 * MiB)) ]] || fail "dedup server: orig_data_size $orig, expected 128 MiB"
[[ $compr -le 65536 && $dup -gt 0 ]] ||
    fail "dedup server: compr_data_size $compr, dup_data_size $dup after 128 MiB of one repeated page"
stop_server dedup

# --- zstd ---
start_server zstd -s 128M -a zstd
[[ $("$UZRAM" attr zstd comp_algorithm) == *"[zstd]"* || $("$UZRAM" attr zstd comp_algorithm) == zstd ]] ||
    fail "comp_algorithm is not zstd: $("$UZRAM" attr zstd comp_algorithm)"
# Half-compressible buffers so zstd has real work to do.
run_fio zstd randwrite-4k --rw=randwrite --bs=4k --verify=crc32c --buffer_compress_percentage=50
run_fio zstd randwrite-mixed --rw=randwrite --bsrange=4k-256k --verify=crc32c \
    --buffer_compress_percentage=70
stop_server zstd

echo "PASS: fio.sh"
