#!/bin/bash
# vm-block.sh - the /dev node paths against the kernel's zram, in a VM (make vm-bench): one boot
# of Debian's 6.12 kernel (tests/vm/vm.sh, 1024 MiB guest, 2 vCPUs) runs tests/vm/blockbench.sh:
# fio 4 KiB randread and randwrite, libaio, direct, QD1 and QD16, on one uzram device through
# ublk and through nbd-client, and on the guest's zram, rounds interleaved. Writes the table
# of medians and ratios between the VM-BLOCK markers of docs/BENCHMARKS.md. Under software
# emulation (TCG) only the ratios inside the one boot mean anything.
#
#   bench/vm-block.sh [ROUNDS [SECONDS]]   (default 3 rounds, 10 s per run)
#   bench/vm-block.sh --help               this text
#   VM_BLOCK_REUSE=1 bench/vm-block.sh     write the doc from the last run's output again
#   bench/vm-block.sh --ab OLD_UZRAM [ROUNDS [SECONDS]]
#       an A/B of this build against another (e.g. an older commit's build/uzram): both
#       servers' ublk and nbd paths measured in the same rounds; the table of this build over
#       the other goes between the VM-BLOCK-AB markers instead (make vm-bench-ab OLD=...)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/doc.bash
source bench/args.bash
bench_help "$@"
AB=
if [[ ${1:-} == --ab ]]; then
    [[ -x ${2:-} ]] || { echo "vm-block.sh: --ab needs a uzram program (try --help)" >&2; exit 2; }
    AB=$(realpath "$2")
    shift 2
fi
[[ $# -le 2 ]] || { echo "vm-block.sh: at most ROUNDS and SECONDS (try --help)" >&2; exit 2; }
ROUNDS=${1:-3}
SECONDS_PER_RUN=${2:-10}
bench_count ROUNDS "$ROUNDS"
bench_count SECONDS "$SECONDS_PER_RUN"
OUT=build/vm/block${AB:+-ab}
LOG=build/vm-block${AB:+-ab}.log
TARGETS=3
[[ -z $AB ]] || TARGETS=5
if [[ ${VM_BLOCK_REUSE:-0} != 1 ]]; then
    bench_git >"$LOG.commit"
    ./tests/vm/vm.sh --mem 1024 --deadline $((ROUNDS * TARGETS * 4 * (SECONDS_PER_RUN + 8) + 300)) \
        --out "$OUT" "blockbench:$ROUNDS,$SECONDS_PER_RUN${AB:+,$AB}" | tee "$LOG"
fi
grep -q '^PASS vm blockbench' "$LOG" ||
    { echo "vm-block: the scenario did not pass: docs/BENCHMARKS.md left as it was" >&2; exit 1; }
# medians_table MODE: the table of medians from the scenario's results: "paths" (ublk, nbd and
# zram side by side) or "ab" (this build's ublk and nbd over the other build's)
medians_table() {
    /usr/bin/python3 - "$OUT/blockbench.results" "$1" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    if f[0] == "blockbench":
        runs.setdefault((f[2], f[3]), []).append(float(f[4]))
med = {k: statistics.median(v) for k, v in runs.items()}
if sys.argv[2] == "ab":
    print("| job | ublk new | ublk old | new / old | nbd new | nbd old | new / old |")
else:
    print("| job | ublk IOPS | nbd IOPS | zram IOPS | ublk / nbd | ublk / zram | nbd / zram |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for job in ["randread:1", "randread:16", "randwrite:1", "randwrite:16"]:
    name = job.replace(":", " QD")
    if sys.argv[2] == "ab":
        u, ub, n, nb = (med[(t, job)] for t in ("ublk", "ublk-b", "nbd", "nbd-b"))
        print(f"| {name} | {u:.0f} | {ub:.0f} | **{u / ub:.2f}x** | {n:.0f} | {nb:.0f} | **{n / nb:.2f}x** |")
    else:
        u, n, z = (med[(t, job)] for t in ("ublk", "nbd", "zram"))
        print(f"| {name} | {u:.0f} | {n:.0f} | {z:.0f} | **{u / n:.2f}x** | **{u / z:.2f}x** | {n / z:.2f}x |")
PY
}

text=$(mktemp)
if [[ -n $AB ]]; then
    old=$(git -C "$(dirname "$AB")/.." rev-parse --short HEAD 2>/dev/null || echo "$AB")
    {
        echo "### This build against an older one, in a VM: \`bench/vm-block.sh --ab OLD $ROUNDS $SECONDS_PER_RUN\`"
        echo
        echo "Commit $(cat "$LOG.commit") (new) against $old (old), one boot, both servers"
        echo "\`-s 256M -a lz4\`, each attached through ublk and then nbd-client in every round, fio as in"
        echo "the table above. IOPS are medians of the rounds; only the ratios mean anything."
        echo
        medians_table ab
    } >"$text"
    block=VM-BLOCK-AB source="bench/vm-block.sh --ab"
else
    kernel=$(sed -n 's/^vm.sh: \([^,]*\), \([^,]*\), .*/\1 (\2)/p' "$LOG" | head -n 1)
    {
        echo "### /dev node paths in a VM: \`bench/vm-block.sh $ROUNDS $SECONDS_PER_RUN\`"
        echo
        echo "Commit $(cat "$LOG.commit"), kernel $kernel, 2 vCPUs, 1024 MiB; one boot."
        echo "One \`uzram serve -s 256M -a lz4\` device attached through ublk, then through nbd-client"
        echo "(the same device, detached and attached again each round), and the guest's \`/dev/zram0\`"
        echo "(lz4, 256 MiB); each filled first. fio 4 KiB, libaio, direct, half-compressible data,"
        echo "$SECONDS_PER_RUN s per run, $ROUNDS rounds interleaved; IOPS are medians of the rounds. The guest runs"
        echo "under software emulation: only the ratios mean anything, never the IOPS against the host's."
        echo
        medians_table paths
    } >"$text"
    block=VM-BLOCK source=bench/vm-block.sh
fi
doc_block docs/BENCHMARKS.md "<!-- BEGIN $block ($source; do not edit by hand) -->" "<!-- END $block -->" "$text"
rm -f "$text"
echo "vm-block: wrote the $block part of docs/BENCHMARKS.md"
