#!/usr/bin/env bash
# fio-nbd.sh - NBD server benchmark: fio 4 KiB random I/O against `uzram serve`, kernel zram
# (libaio, direct) and nbdkit memory, rounds interleaved; median IOPS and CPU per request.
#
# Usage: bench/fio-nbd.sh [--doc] [UZRAM_BINARY]        (default build/uzram)
#   --doc   also write the report into docs/BENCHMARKS.md (between its FIO-NBD markers)
# Environment (all optional):
#   ROUNDS=3        rounds; each round runs every side once, in turn (medians are taken)
#   RUNTIME=5       seconds per fio run (time_based)
#   REGION=512M     part of the 1 GiB device the random I/O covers (filled first)
#   JOBS="1 2"      fio numjobs values (one NBD connection per job)
#   IODEPTH=16
#   TESTS="randwrite randread"   fio rw modes; requests of every direction count (a
#                   trimwrite run: trims and writes)
#   SERVERS="uzram zram sparse"   sides: uzram, zram (kernel zram on /dev/$ZRAM, root only),
#                   sparse and zstd (nbdkit memory allocators), base (BASELINE below)
#   UZRAM_ARGS=     extra arguments for `uzram serve` (e.g. --threads 2)
#   BASELINE=PATH   another uzram binary to run as side "base" too (before/after comparisons)
#   ZRAM=zram0      the kernel zram device; it must be unused (ZRAM_FORCE=1 resets it anyway)
#   KEEP=DIR        keep the fio JSON reports and CPU counts in DIR
# Every side gets the same data: fio buffers 50% compressible, refilled for each I/O. Reads
# run after a sequential write pass over REGION so that they hit stored data, not holes.
# Kernel zram is reset before it is used and on exit. Server CPU per request comes from
# /proc/PID/stat (user + system) over each fio run; kernel zram does its work in fio's own
# system calls, so its cost shows in the fio CPU column.
# Targets: issue 16 (uzram against kernel zram: randread >= 0.7x at 1 job, >= 0.45x at 2;
# randwrite >= 1.1x / >= 0.7x; server CPU <= 4.5 us per read, <= 6.5 us per write) and
# issue 4 (randwrite >= 3x nbdkit zstd and >= 1x nbdkit sparse; randread >= 1x nbdkit
# sparse), each judged when its sides ran. Exit status 0 when every target is met, 1 when
# one is not, 2 on a failure.
set -u

DOC=0
if [[ ${1:-} == --doc ]]; then
    DOC=1
    shift
fi
ARGS_TEXT="$*"
UZRAM=${1:-${UZRAM:-build/uzram}}
ROUNDS=${ROUNDS:-3}
RUNTIME=${RUNTIME:-5}
REGION=${REGION:-512M}
JOBS=${JOBS:-"1 2"}
IODEPTH=${IODEPTH:-16}
TESTS=${TESTS:-"randwrite randread"}
BASELINE=${BASELINE:-}
SERVERS=${SERVERS:-"uzram zram sparse${BASELINE:+ base}"}
UZRAM_ARGS=${UZRAM_ARGS:-}
ZRAM=${ZRAM:-zram0}
ZDEV=/dev/$ZRAM
ZSYS=/sys/block/$ZRAM
PY=/usr/bin/python3
HERE=$(cd "$(dirname "$0")/.." && pwd)

die() { echo "fio-nbd.sh: $*" >&2; exit 2; }
[[ -x $UZRAM ]] || die "no uzram binary at $UZRAM (give its path as the first argument)"
[[ -z $BASELINE || -x $BASELINE ]] || die "no baseline uzram binary at $BASELINE"
UZRAM=$(realpath "$UZRAM")
command -v fio >/dev/null || die "fio is not installed"
fio --enghelp=nbd >/dev/null 2>&1 || die "this fio has no nbd engine"
if [[ " $SERVERS " == *" sparse "* || " $SERVERS " == *" zstd "* ]]; then
    command -v nbdkit >/dev/null || die "nbdkit is not installed (or leave sparse and zstd out of SERVERS)"
fi
if [[ " $SERVERS " == *" zram "* ]]; then
    [[ -b $ZDEV ]] || die "$ZDEV does not exist (modprobe zram, or leave zram out of SERVERS)"
    [[ $(id -u) == 0 ]] || die "kernel zram needs root (or leave zram out of SERVERS)"
    grep -q "^$ZDEV " /proc/swaps /proc/mounts 2>/dev/null && die "$ZDEV is in use (swap or mounted)"
    [[ $(cat "$ZSYS/initstate") == 0 || ${ZRAM_FORCE:-0} == 1 ]] ||
        die "$ZDEV is initialised (someone else's data?); ZRAM_FORCE=1 resets it"
    grep -qw lz4 "$ZSYS/comp_algorithm" || die "kernel zram has no lz4"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/uzram-fio-nbd.XXXXXX") || die "mktemp failed"
declare -A PIDS
ZRAM_TOUCHED=0
zram_reset() { echo 1 >"$ZSYS/reset" 2>/dev/null; }
cleanup() {
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
    # zram0 is shared by the whole machine: always hand it back empty.
    if [[ $ZRAM_TOUCHED == 1 ]]; then
        zram_reset || echo "fio-nbd.sh: warning: could not reset $ZDEV" >&2
    fi
    if [[ -n ${KEEP:-} ]]; then
        mkdir -p "$KEEP" && cp "$WORK"/*.json "$WORK"/*.cpu "$KEEP"/ 2>/dev/null
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 2' INT TERM

# Every server runs for the whole benchmark on its own socket (idle ones cost no CPU), so the
# runs being compared follow each other closely: on a shared, noisy machine that matters more
# than anything else.
start_server() {
    local sock=$WORK/$1.sock
    case $1 in
    zram)
        ZRAM_TOUCHED=1
        zram_reset && echo lz4 >"$ZSYS/comp_algorithm" && echo 1G >"$ZSYS/disksize" ||
            die "cannot set up $ZDEV"
        return 0
        ;;
    uzram | base)
        local binary=$UZRAM
        [[ $1 == base ]] && binary=$BASELINE
        # shellcheck disable=SC2086
        XDG_RUNTIME_DIR=$WORK "$binary" serve -q -n "$1" -s 1G -a lz4 --unix "$sock" \
            $UZRAM_ARGS >"$WORK/$1.log" 2>&1 &
        ;;
    sparse | zstd)
        nbdkit -f --unix "$sock" memory 1G allocator="$1" >"$WORK/$1.log" 2>&1 &
        ;;
    *) die "unknown side $1 (use uzram, zram, sparse, zstd, base)" ;;
    esac
    PIDS[$1]=$!
    for _ in $(seq 100); do
        [[ -S $sock ]] && return 0
        kill -0 "${PIDS[$1]}" 2>/dev/null || break
        sleep 0.1
    done
    cat "$WORK/$1.log" >&2
    die "server $1 did not start"
}

# CPU time (user + system, in clock ticks) a server process has used so far; 0 for kernel
# zram, which works in fio's own system calls.
cpu_ticks() {
    [[ $1 == zram ]] && { echo 0; return; }
    awk '{print $14 + $15}' "/proc/${PIDS[$1]}/stat"
}

# run_fio SIDE OUTPUT [fio options...]
run_fio() {
    local side=$1 out=$2 target
    shift 2
    if [[ $side == zram ]]; then
        target=(--ioengine=libaio --direct=1 --filename="$ZDEV")
    else
        target=(--ioengine=nbd --uri="nbd+unix:///?socket=$WORK/$side.sock")
    fi
    fio --output-format=json --output="$out" --name=bench "${target[@]}" --bs=4k \
        --size="$REGION" --buffer_compress_percentage=50 --refill_buffers --group_reporting "$@" \
        >"$WORK/fio.log" 2>&1 || { cat "$WORK/fio.log" >&2; die "fio failed on $side: $*"; }
}

START=$(date -u '+%Y-%m-%d %H:%M')
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
echo "fio-nbd: 4 KiB, iodepth $IODEPTH, ${RUNTIME}s per run, region $REGION, $ROUNDS rounds;" \
    "$(nproc) CPUs, load $LOAD"
read -ra server_list <<<"$SERVERS"
for server in "${server_list[@]}"; do
    start_server "$server"
    # Fill the region once so the reads find data (sequential, large blocks: fast).
    run_fio "$server" "$WORK/fill.json" --rw=write --bs=1M --iodepth=4
done
for round in $(seq "$ROUNDS"); do
    # Rotate the order every round so no side always runs first or last.
    shift_by=$(((round - 1) % ${#server_list[@]}))
    order=("${server_list[@]:shift_by}" "${server_list[@]:0:shift_by}")
    for jobs in $JOBS; do
        for rw in $TESTS; do
            for server in "${order[@]}"; do
                name=$server-$rw-j$jobs-r$round
                before=$(cpu_ticks "$server")
                run_fio "$server" "$WORK/$name.json" --rw="$rw" \
                    --iodepth="$IODEPTH" --numjobs="$jobs" --time_based --runtime="$RUNTIME"
                echo $(($(cpu_ticks "$server") - before)) >"$WORK/$name.cpu"
            done
        done
    done
    echo "  round $round of $ROUNDS done" >&2
done
END_TIME=$(date -u '+%H:%M')

COMMAND="bench/fio-nbd.sh"
[[ $DOC == 1 ]] && COMMAND="$COMMAND --doc"
COMMAND="$COMMAND${ARGS_TEXT:+ $ARGS_TEXT}"
for var in ROUNDS RUNTIME REGION JOBS IODEPTH TESTS SERVERS UZRAM_ARGS BASELINE; do
    # The settings that differ from the defaults, so the command can be run again as it was.
    case $var in
    ROUNDS) default=3 ;; RUNTIME) default=5 ;; REGION) default=512M ;; JOBS) default="1 2" ;;
    IODEPTH) default=16 ;; TESTS) default="randwrite randread" ;; SERVERS) default="uzram zram sparse${BASELINE:+ base}" ;;
    *) default= ;;
    esac
    [[ ${!var} != "$default" ]] && COMMAND="$var=\"${!var}\" $COMMAND"
done
GIT=$(git -C "$HERE" rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n $(git -C "$HERE" status --porcelain --untracked-files=no 2>/dev/null) ]] &&
    GIT="$GIT + uncommitted changes"

"$PY" - "$WORK" "$ROUNDS" "$JOBS" "$SERVERS" "$(getconf CLK_TCK)" "$DOC" "$HERE/docs/BENCHMARKS.md" \
    "$START-$END_TIME UTC" "$COMMAND" "$LOAD" "$(nproc)" "$GIT" "$RUNTIME" "$REGION" "$IODEPTH" "$TESTS" <<'EOF'
import json, os, statistics, sys
(work, rounds, jobs, servers, ticks_per_second, doc, doc_path, when, command, load, nproc, git,
 runtime, region, iodepth, tests) = sys.argv[1:17]
tests = tests.split()
rounds, jobs, servers, ticks_per_second = int(rounds), jobs.split(), servers.split(), int(ticks_per_second)
BEGIN = "<!-- BEGIN FIO-NBD (written by bench/fio-nbd.sh --doc; do not edit by hand) -->"
END = "<!-- END FIO-NBD -->"

def report(side, rw, j, r):
    return json.load(open(os.path.join(work, f"{side}-{rw}-j{j}-r{r}.json")))

def per_round(side, rw, j):
    """(IOPS, server CPU us/request, fio CPU us/request) of every round."""
    out = []
    for r in range(1, rounds + 1):
        rep = report(side, rw, j, r)
        # Requests of every direction (a trimwrite run has trims and writes).
        kinds = ("read", "write", "trim")
        ios = max(sum(job[key]["total_ios"] for job in rep["jobs"] for key in kinds), 1)
        iops = sum(job[key]["iops"] for job in rep["jobs"] for key in kinds)
        ticks = int(open(os.path.join(work, f"{side}-{rw}-j{j}-r{r}.cpu")).read())
        fio_s = sum(job["job_runtime"] / 1000 * (job["usr_cpu"] + job["sys_cpu"]) / 100
                    for job in rep["jobs"])
        out.append((iops, ticks / ticks_per_second * 1e6 / ios, fio_s * 1e6 / ios))
    return out

names = {"uzram": "uzram lz4", "zram": "kernel zram lz4", "sparse": "nbdkit sparse",
         "zstd": "nbdkit zstd", "base": "baseline lz4"}
med = {}
rows = {}
for rw in tests:
    for j in jobs:
        for s in servers:
            values = per_round(s, rw, j)
            rows[(s, rw, j)] = values
            med[(s, rw, j)] = tuple(statistics.median(v[i] for v in values) for i in range(3))

def k(v):
    return f"{v / 1000:.1f}k"

lines = []
lines.append(f"fio 4 KiB, iodepth {iodepth}, {runtime} s per run, region {region} of a 1 GiB device, "
             f"50% compressible buffers refilled per I/O, {rounds} rounds interleaved (the order "
             f"rotated every round); medians. NBD sides: `--ioengine=nbd` over a Unix socket, one "
             f"connection per job; kernel zram: `--ioengine=libaio --direct=1` on /dev/zram0. "
             f"Server CPU: user + system time of the server process over the run, per request; "
             f"kernel zram does its work inside fio's system calls, so it shows in fio's CPU.")
lines.append("")
header = "| test | jobs | " + " | ".join(names[s] + " IOPS" for s in servers)
sep = "| --- | ---: | " + " | ".join("---:" for _ in servers)
if "uzram" in servers and "zram" in servers:
    header += " | uzram / kernel zram"
    sep += " | ---:"
header += " | server CPU us/request | fio CPU us/request |"
sep += " | --- | --- |"
lines += [header, sep]
for rw in tests:
    for j in jobs:
        cells = [k(med[(s, rw, j)][0]) for s in servers]
        row = f"| {rw} | {j} | " + " | ".join(cells)
        if "uzram" in servers and "zram" in servers:
            row += f" | {med[('uzram', rw, j)][0] / max(med[('zram', rw, j)][0], 1e-9):.2f}x"
        cpu = ", ".join(f"{names[s].split()[0] if s != 'zram' else 'zram'} {med[(s, rw, j)][1]:.1f}"
                        for s in servers if s != "zram")
        fio = ", ".join(f"{names[s].split()[0] if s != 'zram' else 'zram'} {med[(s, rw, j)][2]:.1f}"
                        for s in servers)
        lines.append(row + f" | {cpu} | {fio} |")
lines.append("")
lines.append("Every round (IOPS, server CPU us/request):")
lines.append("")
for rw in tests:
    for j in jobs:
        parts = []
        for s in servers:
            vals = rows[(s, rw, j)]
            if s == "zram":
                parts.append(f"{names[s]} " + ", ".join(k(v[0]) for v in vals))
            else:
                parts.append(f"{names[s]} " + ", ".join(f"{k(v[0])} ({v[1]:.1f})" for v in vals))
        lines.append(f"- {rw} {j} job{'s' if j != '1' else ''}: " + "; ".join(parts))

targets = []
def ratio_target(issue, rw, j, peer, want):
    if "uzram" in servers and peer in servers and j in jobs and rw in tests:
        got = med[("uzram", rw, j)][0] / max(med[(peer, rw, j)][0], 1e-9)
        targets.append((issue, f"{rw}, {j} job{'s' if j != '1' else ''}: uzram / {names[peer]} >= {want:g}x",
                        f"{got:.2f}x", got >= want))

for rw, j, want in (("randread", "1", 0.7), ("randread", "2", 0.45),
                    ("randwrite", "1", 1.1), ("randwrite", "2", 0.7)):
    ratio_target("16", rw, j, "zram", want)
if "uzram" in servers:
    for rw, want in (("randread", 4.5), ("randwrite", 6.5)):
        for j in jobs if rw in tests else []:
            got = med[("uzram", rw, j)][1]
            targets.append(("16", f"{rw}, {j} job{'s' if j != '1' else ''}: server CPU per request <= {want:g} us",
                            f"{got:.1f} us", got <= want))
for rw, peer, want in (("randwrite", "zstd", 3.0), ("randwrite", "sparse", 1.0),
                       ("randread", "sparse", 1.0)):
    for j in jobs:
        ratio_target("4", rw, j, peer, want)
if targets:
    lines.append("")
    lines += ["| issue | target | measured | met |", "| --- | --- | ---: | --- |"]
    for issue, what, got, met in targets:
        lines.append(f"| {issue} | {what} | {got} | {'yes' if met else '**no**'} |")

title = f"### NBD path against kernel zram: `bench/fio-nbd.sh`, {when}"
meta = (f"- Command: `{command}`\n- Machine: {nproc} CPUs, load average {load} at the start; "
        f"uzram git {git}")
text = "\n".join([title, "", meta, ""] + lines) + "\n"
print()
print(text)
if doc == "1":
    body = open(doc_path).read()
    if BEGIN not in body or END not in body:
        sys.exit(f"fio-nbd.sh: {doc_path} has no {BEGIN} ... {END} markers")
    head, rest = body.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    open(doc_path, "w").write(head + BEGIN + "\n" + text + END + tail)
    print(f"({doc_path} updated)")
sys.exit(0 if all(t[3] for t in targets) else 1)
EOF
