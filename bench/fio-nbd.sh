#!/usr/bin/env bash
# fio-nbd.sh - NBD server benchmark: fio 4 KiB random I/O against `uzram serve` and nbdkit memory.
# Runs uzram (lz4), nbdkit allocator=sparse and allocator=zstd alternately, prints median IOPS.
#
# Usage: bench/fio-nbd.sh [UZRAM_BINARY]        (default build/uzram)
# Environment (all optional):
#   ROUNDS=3        rounds; each round runs every server once, in turn (medians are taken)
#   RUNTIME=10      seconds per fio run (time_based)
#   REGION=512M     part of the 1 GiB device the random I/O covers (filled first)
#   JOBS="1 2"      fio numjobs values (one NBD connection per job)
#   IODEPTH=16
#   SERVERS="uzram sparse zstd"
#   UZRAM_ARGS=     extra arguments for `uzram serve` (e.g. --threads 2)
#   BASELINE=PATH   another uzram binary to run as server "base" too (before/after comparisons)
#   KEEP=DIR        keep the fio JSON reports in DIR
# Every server gets the same data: fio buffers 50% compressible, refilled for each I/O. Reads
# run after a sequential write pass over REGION so that they hit stored data, not holes.
# Targets (issue 4): randwrite >= 3x nbdkit zstd and >= 1x nbdkit sparse; randread >= 1x
# nbdkit sparse. Exit status 0 when every target is met, 1 when one is not, 2 on a failure.
set -u

UZRAM=${1:-${UZRAM:-build/uzram}}
ROUNDS=${ROUNDS:-3}
RUNTIME=${RUNTIME:-10}
REGION=${REGION:-512M}
JOBS=${JOBS:-"1 2"}
IODEPTH=${IODEPTH:-16}
BASELINE=${BASELINE:-}
SERVERS=${SERVERS:-"uzram sparse zstd${BASELINE:+ base}"}
UZRAM_ARGS=${UZRAM_ARGS:-}
PY=/usr/bin/python3

die() { echo "fio-nbd.sh: $*" >&2; exit 2; }
[[ -x $UZRAM ]] || die "no uzram binary at $UZRAM (give its path as the first argument)"
[[ -z $BASELINE || -x $BASELINE ]] || die "no baseline uzram binary at $BASELINE"
UZRAM=$(realpath "$UZRAM")
command -v fio >/dev/null || die "fio is not installed"
fio --enghelp=nbd >/dev/null 2>&1 || die "this fio has no nbd engine"
command -v nbdkit >/dev/null || die "nbdkit is not installed"

WORK=$(mktemp -d)
declare -A PIDS
cleanup() {
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
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
    *) die "unknown server $1 (use uzram, sparse, zstd, base)" ;;
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

# CPU time (user + system, in clock ticks) a server process has used so far.
cpu_ticks() {
    awk '{print $14 + $15}' "/proc/$1/stat"
}

# run_fio SERVER OUTPUT [fio options...]
run_fio() {
    local server=$1 out=$2
    shift 2
    fio --output-format=json --output="$out" --name=bench --ioengine=nbd \
        --uri="nbd+unix:///?socket=$WORK/$server.sock" --bs=4k --size="$REGION" \
        --buffer_compress_percentage=50 --refill_buffers --group_reporting "$@" \
        >"$WORK/fio.log" 2>&1 || { cat "$WORK/fio.log" >&2; die "fio failed on $server: $*"; }
}

echo "fio-nbd: 4 KiB, iodepth $IODEPTH, ${RUNTIME}s per run, region $REGION, $ROUNDS rounds;" \
    "$(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
read -ra server_list <<<"$SERVERS"
for server in "${server_list[@]}"; do
    start_server "$server"
    # Fill the region once so the reads find data (sequential, large blocks: fast).
    run_fio "$server" "$WORK/fill.json" --rw=write --bs=1M --iodepth=4
done
for round in $(seq "$ROUNDS"); do
    # Rotate the order every round so no server always runs first or last.
    shift_by=$(((round - 1) % ${#server_list[@]}))
    order=("${server_list[@]:shift_by}" "${server_list[@]:0:shift_by}")
    for jobs in $JOBS; do
        for rw in randwrite randread; do
            for server in "${order[@]}"; do
                name=$server-$rw-j$jobs-r$round
                before=$(cpu_ticks "${PIDS[$server]}")
                run_fio "$server" "$WORK/$name.json" --rw="$rw" \
                    --iodepth="$IODEPTH" --numjobs="$jobs" --time_based --runtime="$RUNTIME"
                echo $(($(cpu_ticks "${PIDS[$server]}") - before)) >"$WORK/$name.cpu"
            done
        done
    done
    echo "  round $round of $ROUNDS done" >&2
done

"$PY" - "$WORK" "$ROUNDS" "$JOBS" "$SERVERS" "$(getconf CLK_TCK)" <<'EOF'
import json, os, statistics, sys
work, rounds, jobs, servers = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
ticks_per_second = int(sys.argv[5])

def cpu_per_request(server, rw, j):
    """Median server CPU time per request in microseconds: less noisy than IOPS."""
    values = []
    for r in range(1, rounds + 1):
        name = os.path.join(work, f"{server}-{rw}-j{j}-r{r}")
        report = json.load(open(name + ".json"))
        side = "write" if rw == "randwrite" else "read"
        ios = sum(job[side]["total_ios"] for job in report["jobs"])
        ticks = int(open(name + ".cpu").read())
        values.append(ticks / ticks_per_second * 1e6 / max(ios, 1))
    return statistics.median(values)

def client_cpu_per_request(server, rw, j):
    """Median fio CPU time per request in microseconds: fio shares the cores with the server."""
    values = []
    for r in range(1, rounds + 1):
        report = json.load(open(os.path.join(work, f"{server}-{rw}-j{j}-r{r}.json")))
        side = "write" if rw == "randwrite" else "read"
        ios = sum(job[side]["total_ios"] for job in report["jobs"])
        seconds = sum(job["job_runtime"] / 1000 * (job["usr_cpu"] + job["sys_cpu"]) / 100
                      for job in report["jobs"])
        values.append(seconds * 1e6 / max(ios, 1))
    return statistics.median(values)

def iops(server, rw, j):
    values = []
    for r in range(1, rounds + 1):
        path = os.path.join(work, f"{server}-{rw}-j{j}-r{r}.json")
        report = json.load(open(path))
        side = "write" if rw == "randwrite" else "read"
        values.append(sum(job[side]["iops"] for job in report["jobs"]))
    return statistics.median(values), values

names = {"uzram": "uzram lz4", "sparse": "nbdkit sparse", "zstd": "nbdkit zstd",
         "base": "baseline lz4"}
print()
print(f"{'test':<14} {'jobs':>4} " + " ".join(f"{names[s]:>14}" for s in servers)
      + "   (median IOPS; all rounds below)")
table = {}
for rw in ("randwrite", "randread"):
    for j in jobs:
        row = []
        for s in servers:
            median, values = iops(s, rw, j)
            table[(s, rw, j)] = median
            row.append(median)
        print(f"{rw:<14} {j:>4} " + " ".join(f"{v:>14.0f}" for v in row))
        for s in servers:
            _, values = iops(s, rw, j)
            print(f"{'':<20}{names[s]}: " + ", ".join(f"{v:.0f}" for v in values)
                  + f"   (CPU us/request: server {cpu_per_request(s, rw, j):.1f},"
                  f" fio {client_cpu_per_request(s, rw, j):.1f})")

targets = [("randwrite", "zstd", 3.0), ("randwrite", "sparse", 1.0), ("randread", "sparse", 1.0)]
print()
print("targets (issue 4):")
all_met = True
for rw, peer, want in targets:
    if "uzram" not in servers or peer not in servers:
        continue
    for j in jobs:
        ratio = table[("uzram", rw, j)] / max(table[(peer, rw, j)], 1e-9)
        met = ratio >= want
        all_met &= met
        print(f"  {rw:<10} jobs {j}: uzram / nbdkit {peer:<6} = {ratio:5.2f}x"
              f"  (target >= {want:g}x)  {'met' if met else 'NOT MET'}")
sys.exit(0 if all_met else 1)
EOF
