#!/bin/bash
# vm-swap-programs.sh - real programs as swap workloads, in a VM (issue 40; make vm-swap-bench):
# unmodified programs that hold real data in their heap, at footprints from half to twice the
# guest's memory (2.5 times on request), with swap on the guest's kernel zram (lz4, zstd) and on
# uzram (lz4, and its densest swap mode), every backend capped at the same compressed memory.
# Runs tests/vm/swap-programs.sh once per (program, size, backend) in one boot of Debian's 6.12
# kernel (tests/vm/vm.sh, 512 MiB, 2 vCPUs), sizes in order; in each, kernel zram lz4 first
# (the reference the others' deadlines are a multiple of), the other backends' order rotated
# from one size to the next. Writes the table between the VM SWAP PROGRAMS markers of
# docs/BENCHMARKS.md. Only ratios inside one boot mean anything under emulation.
#
#   bench/vm-swap-programs.sh [--quick] [--sizes F,...] [--programs P,...] [--backends B,...]
#                             [--cap SIZE] [--disksize SIZE] [--deadline S] [--ratio K]
#                             [--stall S] [--boots N]
#     --quick      one size (1x), sort only, every backend, 300 s a run at most: 20 minutes
#     --sizes      footprints as multiples of the guest's memory (default 0.5,1,1.5,2: at 2.5
#                  no lz4 backend can hold the program in a 512 MiB guest, at any cap, and
#                  under emulation every run takes its whole deadline; sort's buffer there
#                  needs --disksize 1536M or more, which the script checks)
#     --programs   sort (GNU sort of real text), dpkg (python3 indexing dpkg's database)
#     --backends   zram-lz4, zram-zstd, uzram-lz4, uzram-dense (default all four); also
#                  uzram-zstd: `serve --swap --algorithm zstd`, kernel zram zstd's
#                  counterpart (the same codec and level, no dedup, no packing: what the
#                  path through ublk costs by itself); uzram-lz4-sync and uzram-dense-sync:
#                  uzram-lz4 and uzram-dense on a prototype ublk driver that Linux treats as
#                  it treats zram (synchronous, freed slots discarded: bench/ublk-sync/build.sh,
#                  run first; a proposal, docs/design/swap.md, nothing uzram itself needs);
#                  uzram-lz4-notify and uzram-dense-notify: the same driver with
#                  synchronous=0 (the discards alone)
#     --cap        the compressed memory of every backend (zram mem_limit, serve --mem-limit;
#                  default 256M, half the guest's memory)
#     --disksize   the swap device's size, every backend (default 1G: about what the default
#                  cap holds at kernel zram zstd's ratio on sort's text, as uzram(1) SWAP
#                  advises: docs/design/swap.md says what a larger one costs a ublk device)
#     --ratio      a run's deadline is K times kernel zram lz4's time for the same program and
#                  size in the boot (default 3), at least 300 s
#     --deadline   and at most this many seconds (default 900), which is also the deadline
#                  of zram lz4 itself and of every run when it did not complete
#     --stall      the program is killed once swap writes have failed at every check (10 s
#                  apart) for this many seconds (default 180; 0: never): at its cap a device
#                  fails them, and the kernel was seen to retry for minutes with no progress
#                  and no OOM kill (tests/vm/swap.sh --limit; the smoke runs of this script)
#     --boots      boots at most (default: as many as it takes, while each measures a run): a
#                  boot that ends early (a hang the kernel reports, a livelocked guest the
#                  host ends) is followed by one that runs what is left, kernel zram lz4 of
#                  the size it ended in again first
#     --dense      the serve options of the dense backends instead of uzram(1)'s densest swap
#                  mode (tests/vm/swap-dense.bash), as one word: "--dedup --recompress ..."
#                  (the block names the options used)
#   VM_SWAP_PROGRAMS_REUSE=1 bench/vm-swap-programs.sh   the doc again from the last results
#   bench/vm-swap-programs.sh --help                       this text
#
# Inputs and the host's checksums are made once under build/vm/swap-programs (rm -rf it to take
# them again from this machine's files); each size's footprint is measured here, without swap
# pressure, as GNU time's maximum resident set size.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/doc.bash
source bench/args.bash
source tests/vm/swap-dense.bash
source tests/vm/swap-series.bash
bench_help "$@"
DIR=build/vm/swap-programs
GUEST_MIB=512 CPUS=2 HUNG=120
SIZES=0.5,1,1.5,2 PROGRAMS=sort,dpkg BACKENDS=zram-lz4,zram-zstd,uzram-lz4,uzram-dense
CAP=256M DISKSIZE=1G DEADLINE=900 RATIO=3 DEADLINE_MIN=300 STALL=180 BOOTS=0
CMDLINE="$*"
usage() { echo "vm-swap-programs.sh: $* (try --help)" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
    case $1 in
    --sizes | --programs | --backends | --cap | --disksize | --deadline | --ratio | --stall | --boots | --dense)
        [[ $# -ge 2 ]] || usage "$1 needs a value" ;;&
    --quick) SIZES=1 PROGRAMS=sort DEADLINE=300 ;;
    --sizes) SIZES=$2; shift ;;
    --programs) PROGRAMS=$2; shift ;;
    --backends) BACKENDS=$2; shift ;;
    --cap) CAP=$2; shift ;;
    --disksize) DISKSIZE=$2; shift ;;
    --deadline) DEADLINE=$2; shift ;;
    --ratio) RATIO=$2; shift ;;
    --stall) STALL=$2; shift ;;
    --boots) BOOTS=$2; shift ;;
    --dense) read -r -a SWAP_DENSE_OPTIONS <<<"$2"; shift ;;
    *) usage "unknown argument '$1'" ;;
    esac
    shift
done
IFS=, read -r -a sizes <<<"$SIZES"
IFS=, read -r -a programs <<<"$PROGRAMS"
IFS=, read -r -a backends <<<"$BACKENDS"
for p in "${programs[@]}"; do [[ $p == sort || $p == dpkg ]] || usage "no program $p"; done
for b in "${backends[@]}"; do
    [[ $b =~ ^(zram-lz4|zram-zstd|uzram-lz4|uzram-zstd|uzram-dense|uzram-lz4-sync|uzram-dense-sync|uzram-lz4-notify|uzram-dense-notify)$ ]] || usage "no backend $b"
done
for f in "${sizes[@]}"; do [[ $f =~ ^[0-9]+(\.[0-9]+)?$ && $f != 0 ]] || usage "no size $f"; done
bench_count --deadline "$DEADLINE"
bench_count --ratio "$RATIO"
bench_size --cap "$CAP"
bench_size --disksize "$DISKSIZE"
[[ $STALL =~ ^[0-9]+$ && $BOOTS =~ ^[0-9]+$ ]] || usage "--stall and --boots take whole numbers"
# tests/vm/vm.sh runs the guest's uzram from there, and refuses to boot without it
[[ -x ${UZRAM:-build/uzram} ]] || {
    echo "vm-swap-programs.sh: no uzram binary at ${UZRAM:-build/uzram} (make programs vm-tools, or make vm-swap-bench)" >&2
    exit 2
}
mkdir -p "$DIR"
touch "$DIR/host-runs.tsv"

# --- inputs, made once ---
if [[ ! -s $DIR/corpus.txt ]]; then
    echo "vm-swap-programs: the corpus (this machine's text files)"
    python3 bench/swap-programs-corpus.py corpus "$DIR/corpus.txt"
    rm -f "$DIR"/sort-*.txt
    : >"$DIR/host-runs.tsv"
fi
if [[ ! -s $DIR/dpkg/status ]]; then
    rm -rf "$DIR/dpkg" "$DIR/dpkg.tmp"
    mkdir -p "$DIR/dpkg.tmp/info"
    cp /var/lib/dpkg/status "$DIR/dpkg.tmp/"
    cp /var/lib/dpkg/info/*.list /var/lib/dpkg/info/*.md5sums "$DIR/dpkg.tmp/info/"
    mv "$DIR/dpkg.tmp" "$DIR/dpkg"
    sed -i '/^dpkg /d' "$DIR/host-runs.tsv" 2>/dev/null || true
fi

# measure PROGRAM PARAM: the program on the host, no swap pressure: prints its maximum RSS in
# KiB and its output's sha256 (kept in host-runs.tsv). PARAM: sort's input bytes (the first
# that many of the corpus, cut at a line's end: sort-PARAM.txt), dpkg's copies.
measure() {
    local program=$1 param=$2 cmd row
    row=$(awk -v p="$program" -v a="$param" '$1 == p && $2 == a {print $3, $4}' "$DIR/host-runs.tsv" | tail -n 1)
    # (a sort input removed since is cut again: the same bytes, the same checksum)
    if [[ $program == sort && ! -s $DIR/sort-$param.txt ]]; then
        python3 bench/swap-programs-corpus.py cut "$DIR/corpus.txt" "$param" "$DIR/sort-$param.txt"
    fi
    if [[ -z $row ]]; then
        if [[ $program == sort ]]; then
            cmd=(env LC_ALL=C sort -S "$((3 * $(stat -c %s "$DIR/sort-$param.txt")))b" --parallel=1 "$DIR/sort-$param.txt")
        else
            cmd=(python3 bench/swap-programs-dpkg.py "$DIR/dpkg" "$param")
        fi
        local sha
        sha=$(/usr/bin/time -f %M -o "$DIR/time.out" "${cmd[@]}" | sha256sum | cut -d' ' -f1)
        row="$(tail -n 1 "$DIR/time.out") $sha"
        echo "$program $param $row" >>"$DIR/host-runs.tsv"
    fi
    echo "$row"
}

# next_param PROGRAM TARGET_KIB SLOPE [best]: from every measured point of PROGRAM (host-runs.tsv),
# "done PARAM" for the one nearest the target when it is within 3% or nothing new is left to
# try, else "try PARAM": between the nearest points below and above the target, or from the
# nearest one along SLOPE (PARAM per KiB); with "best", the nearest so far. The footprint is not a straight line in the input
# (python's dicts and lists grow in steps), hence the search.
next_param() {
    awk -v p="$1" -v t="$2" -v slope="$3" -v only_best="${4:-}" '
        function round(x) { return p == "sort" ? int(x) : sprintf("%.2f", x) }
        $1 == p { x = $2; r = $3; seen[round(x)] = 1; d = r > t ? r - t : t - r
                  if (best == "" || d < bestd) { best = x; bestd = d; bestr = r }
                  if (r <= t && (lo == "" || r > lor)) { lo = x; lor = r }
                  if (r >= t && (hi == "" || r < hir)) { hi = x; hir = r } }
        END { if (bestd <= t * 0.03 || only_best != "") { print "done", best; exit }
              if (lo != "" && hi != "" && hir > lor) x = lo + (t - lor) * (hi - lo) / (hir - lor)
              else x = best + (t - bestr) * slope
              x = round(x)
              if (x in seen || x <= 0) print "done", best; else print "try", x }
    ' "$DIR/host-runs.tsv"
}

# sort_fits FACTOR INPUT_BYTES: sort's buffer (-S, 3 times its input) must fit in the guest's
# memory and swap area together, or the guest's overcommit heuristic refuses it and sort falls
# back to temporary files in the guest's RAM disk (at 2.5x with a 1G area it then exited 1 on
# kernel zram zstd after 235 s): that is not a swap workload, so it stops here. The guest's
# memory counts at 3/4: what its kernel keeps leaves less (it refused 1,493 MiB with 1G of swap).
sort_fits() {
    local buffer=$((3 * $2)) guest=$((GUEST_MIB * 1048576 * 3 / 4)) room need
    room=$((guest + $(numfmt --from=iec "$DISKSIZE")))
    ((buffer < room)) && return 0
    need=$(((buffer - guest) / 268435456 * 256 + 512))
    echo "vm-swap-programs: sort at ${1}x needs a buffer of $((buffer / 1048576)) MiB (-S, 3 times its input): more than the guest's $GUEST_MIB MiB and the $DISKSIZE swap area together, which the guest's overcommit heuristic refuses; use --disksize ${need}M or more" >&2
    exit 2
}

# choose PROGRAM FACTOR...: the PARAM whose footprint is FACTOR times the guest's memory,
# searched from two measured points (at most 6 more measurements a size); appends the rows of
# sizes.tsv (PROGRAM INDEX FACTOR INPUT RSS_KIB SHA256).
choose() {
    local program=$1 a b ra rb i=0 factor target slope step verdict param rss sha
    shift
    if [[ $program == sort ]]; then a=64000000 b=256000000; else a=1 b=3; fi
    read -r ra _ < <(measure "$program" "$a")
    read -r rb _ < <(measure "$program" "$b")
    slope=$(awk -v a="$a" -v b="$b" -v ra="$ra" -v rb="$rb" 'BEGIN {print (b - a) / (rb - ra)}')
    for factor; do
        target=$(awk -v f="$factor" -v m="$GUEST_MIB" 'BEGIN {print int(f * m * 1024)}')
        for ((step = 0; step < 6; step++)); do
            read -r verdict param < <(next_param "$program" "$target" "$slope")
            [[ $verdict == try ]] || break
            measure "$program" "$param" >/dev/null
        done
        read -r _ param < <(next_param "$program" "$target" "$slope" best)
        read -r rss sha < <(measure "$program" "$param")
        [[ $program != sort ]] || sort_fits "$factor" "$param"
        [[ $program == sort ]] && param=sort-$param.txt
        echo "$program $i $factor $param $rss $sha" >>"$DIR/sizes.tsv"
        echo "vm-swap-programs: $program at ${factor}x: $param, $((rss / 1024)) MiB on the host"
        i=$((i + 1))
    done
}

# The runs in order: size by size; in each, program by program, kernel zram lz4 first (the
# others' deadlines are a multiple of its time), the other backends' order rotated by one from
# one size to the next, so that none of them is always first or last.
plan() {
    local i p j others=() b
    for b in "${backends[@]}"; do [[ $b == zram-lz4 ]] || others+=("$b"); done
    local n=${#others[@]}
    for ((i = 0; i < ${#sizes[@]}; i++)); do
        for p in "${programs[@]}"; do
            [[ " ${backends[*]} " != *" zram-lz4 "* ]] || echo "$p,$i,zram-lz4"
            for ((j = 0; j < n; j++)); do echo "$p,$i,${others[(i + j) % n]}"; done
        done
    done
}

# console_errors CONSOLE [NAME]: the failed swap-outs the kernel logged (its lines plus the ones
# it says it suppressed) during run NAME, from the console log; without NAME, during the run
# going on: prints "NAME COUNT" (NAME "-" between runs).
console_errors() {
    awk -v want="${2:-}" '
        /=== uzram-vm: begin / {run = $4; n = 0; next}
        /=== uzram-vm: / {if (run == want && want != "") {print n; done = 1; exit} run = ""; next}
        run == "" {next}
        /Write-error on swap-device/ {n++}
        /__end_swap_bio_write: [0-9]+ callbacks suppressed/ {
            for (i = 1; i < NF; i++) if ($(i + 1) == "callbacks") n += $i }
        END {if (done) exit; if (want == "") print (run == "" ? "-" : run), n; else if (run == want) print n; else print 0}
    ' "$1" 2>/dev/null
}

# run_boot BOOT RUN...: one boot of tests/vm/vm.sh with the runs as scenarios. Its console is
# watched meanwhile: a run whose swap writes keep failing for STALL + 120 s, well past the
# point where the guest's own check would have killed the program, is in a guest that can no
# longer act (the smoke runs' sysrq-t: every task, timeout(1) and the guest's init included,
# runnable in reclaim, with uzram's locked memory taking what was left). QEMU is then ended by
# its pid (vm.sh's child's child) and the run marked livelocked; the next boot goes on with
# the runs left, instead of waiting for vm.sh's deadline.
run_boot() {
    local boot=$1 out=$DIR/boot-$1 vm current count last=- seen=0 failing=0 since child qemu
    shift
    local scenarios=()
    for run; do scenarios+=("swap-programs:$run"); done
    ./tests/vm/vm.sh --mem "$GUEST_MIB" --cpus "$CPUS" --hung "$HUNG" --deadline $((DEADLINE + 240)) \
        --out "$out" "${scenarios[@]}" > >(tee -a "$DIR/vm.log") 2>&1 &
    vm=$!
    while kill -0 "$vm" 2>/dev/null; do
        sleep 10
        ((STALL > 0)) || continue
        read -r current count < <(console_errors "$out/console.log") || continue
        [[ $current == "$last" ]] || since=$(date +%s)
        if [[ $current != - && $current == "$last" ]] && ((count > seen)); then
            failing=$((failing + 10))
        else
            failing=0
        fi
        last=$current seen=$count
        ((failing >= STALL + 120)) || continue
        echo "vm-swap-programs: $current: swap writes failing for $failing s, the guest did not end it: ending QEMU"
        echo "$failing $(($(date +%s) - since))" >"$out/$current.livelock"
        for child in $(pgrep -P "$vm"); do
            for qemu in $(pgrep -P "$child"); do
                [[ $(cat "/proc/$qemu/comm" 2>/dev/null) == qemu-system-* ]] && kill "$qemu"
            done
        done
        failing=0
    done
    wait "$vm" || true
}

# collect BOOT OUT RUN...: each run's result line (with boot=BOOT), or the line made here for a
# run the guest did not finish; prints the runs to do again (not run, or a guest not clean).
collect() {
    local boot=$1 out=$2 run name status failure extra failing since
    shift 2
    for run in "$@"; do
        name=swap-programs-${run//,/-}
        if [[ -s $out/$name.results ]]; then
            extra=
            read -r status _ <"$out/$name.status"
            [[ $status == 0 ]] || extra=" note=guest-not-cleaned-after"
            sed "s/^run /run boot=$boot /; s/\$/$extra/" "$out/$name.results" >>"$DIR/results.txt"
            continue
        fi
        if [[ -e $out/$name.status ]]; then
            read -r status _ <"$out/$name.status"
            failure=$(cat "$out/$name.failure" 2>/dev/null || true)
            if [[ $status == 75 && -z $failure ]]; then echo "$run"; continue; fi
            failure="outcome=${failure:-harness}-failure exit=$status"
        elif [[ -e $out/$name.livelock ]]; then
            read -r failing since <"$out/$name.livelock"
            failure="outcome=livelocked failing_for=$failing ended_after=$since"
        elif grep -q "=== uzram-vm: begin $name " "$out/console.log" 2>/dev/null; then
            failure="outcome=guest-stopped"
        else
            echo "$run"
            continue
        fi
        echo "run boot=$boot ${run//,/ } $failure log_write_errors=$(console_errors "$out/console.log" "$name")" \
            "$(cat "$out/$name.peaks" 2>/dev/null) $(series_fields "$out/$name.series")" >>"$DIR/results.txt"
    done
}

if [[ ${VM_SWAP_PROGRAMS_REUSE:-0} != 1 ]]; then
    # the -sync backends' driver, built against the guest's kernel (the guest loads it)
    [[ " ${backends[*]} " != *-sync\ * && " ${backends[*]} " != *-notify\ * ]] || bench/ublk-sync/build.sh
    : >"$DIR/sizes.tsv"
    for p in "${programs[@]}"; do choose "$p" "${sizes[@]}"; done
    # keep only the inputs in use: each size's sort input is up to 600 MB
    for f in "$DIR"/sort-*.txt; do
        [[ -e $f ]] && ! grep -q " ${f##*/} " "$DIR/sizes.tsv" && rm -f "$f"
    done
    {
        printf 'CAP=%q DISKSIZE=%q RUN_DEADLINE=%q DEADLINE_RATIO=%q DEADLINE_MIN=%q STALL_SECONDS=%q\n' \
            "$CAP" "$DISKSIZE" "$DEADLINE" "$RATIO" "$DEADLINE_MIN" "$STALL"
        echo "DENSE_OPTIONS=(${SWAP_DENSE_OPTIONS[*]@Q})"
    } >"$DIR/settings.bash"
    {
        echo "args=$CMDLINE"
        echo "commit=$(bench_git)"
        echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
        echo "load_start=$(cut -d' ' -f1-3 /proc/loadavg)"
        echo "dense_options=${SWAP_DENSE_OPTIONS[*]}"
        echo "cap=$CAP disksize=$DISKSIZE deadline=$DEADLINE ratio=$RATIO deadline_min=$DEADLINE_MIN stall=$STALL guest_mib=$GUEST_MIB cpus=$CPUS hung=$HUNG"
    } >"$DIR/meta"
    : >"$DIR/results.txt"
    : >"$DIR/vm.log"
    mapfile -t pending < <(plan)
    ((BOOTS > 0)) || BOOTS=$((${#pending[@]} + 1))
    boot=0 done_runs=0
    while ((${#pending[@]} > 0 && boot < BOOTS)); do
        boot=$((boot + 1))
        echo "vm-swap-programs: boot $boot: ${#pending[@]} runs"
        run_boot "$boot" "${pending[@]}"
        mapfile -t pending < <(collect "$boot" "$DIR/boot-$boot" "${pending[@]}")
        # a boot that measured nothing (its guest failed before the first run ended) ends it
        (($(wc -l <"$DIR/results.txt") > done_runs)) || break
        done_runs=$(wc -l <"$DIR/results.txt")
        # A boot that ended inside a size leaves the rest of that size without its reference
        # in the next boot: kernel zram lz4 runs there again first (both runs are in the
        # table, each with its boot) - if it completed: one that did not gives no reference
        # (the others then get the longest deadline), and one that livelocked would end
        # every boot after it the same way.
        first=${pending[0]:-}
        if [[ -n $first && ${first##*,} != zram-lz4 && " ${backends[*]} " == *" zram-lz4 "* ]] &&
            grep -q "^run boot=$boot $(tr , ' ' <<<"${first%,*}") zram-lz4 outcome=completed " "$DIR/results.txt"; then
            pending=("${first%,*},zram-lz4" "${pending[@]}")
        fi
    done
    # a table of runs that never ran says nothing: the doc keeps what it had
    [[ -s $DIR/results.txt ]] || {
        echo "vm-swap-programs: no run was measured (the boot's log: $DIR/vm.log); docs/BENCHMARKS.md left as it was" >&2
        exit 1
    }
    for run in "${pending[@]}"; do echo "run boot=- ${run//,/ } outcome=not-run" >>"$DIR/results.txt"; done
    {
        echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)"
        echo "boots=$boot"
        echo "kernel=$(sed -n 's/^vm.sh: \([^,]*\), \([a-z]*\).*/\1 (\2)/p' "$DIR/vm.log" | head -n 1)"
    } >>"$DIR/meta"
fi
text=$(mktemp)
python3 bench/swap-programs-report.py "$DIR" >"$text"
doc_block docs/BENCHMARKS.md "<!-- BEGIN VM SWAP PROGRAMS (bench/vm-swap-programs.sh; do not edit by hand) -->" \
    "<!-- END VM SWAP PROGRAMS -->" "$text"
rm -f "$text"
echo "vm-swap-programs: wrote the VM SWAP PROGRAMS part of docs/BENCHMARKS.md"
