#!/bin/bash
# recompress_gap.sh - where the background recompressor's memory goes against recompression by
# hand (issue 27's question: "the automatic mode leaves 5% on the table"). One image, stored by
# uzram lz4 + dedup and recompressed to zstd LEVEL with a trained dictionary (dict=auto) in
# three ways:
#   auto        `serve --recompress-idle 1 --recompress algo=zstd,level=L,dict=auto` from the
#               start, as users run it: the thread's first pass trains the dictionary while
#               the image is still being written;
#   auto-late   the same thread, switched on (recompress_idle 1) only after the image is
#               written: the dictionary is trained on all of it;
#   hand        recompression set after the image is written, then `idle all` and
#               `recompress type=idle` once.
# Each side runs until memory stops moving (recompress_rate 0), records mem_used_total +
# meta_data_size, then compacts and records it again, with the dictionary's size, the pages
# recompressed and those still in lz4 form (pages_stored - same - recompressed - shared).
#
# Usage: IMAGE=PATH bench/recompress_gap.sh [--out DIR]   (writes DIR/recompress-gap.json)
# Environment: IMAGE (required: an image, e.g. bench/recompress.sh's KEEP_IMAGE), UZRAM
# (build/uzram), LEVEL (7), DICT_SIZE (64K), GROUP (0: none; N: group=N on every side),
# WRITE_SECONDS (0: nbdcopy writes the image as fast as it can, which on a quiet machine is done
# before the thread's first pass with pages; N: the image is written in 1 MiB requests paced to
# take about N seconds, as a disk filled during a build is, so that the thread's first
# dictionary is trained while the write goes on: the case retraining is for).
set -u
cd "$(dirname "$0")/.." || exit 2
# shellcheck source=bench/common.bash
. bench/common.bash
LEVEL=${LEVEL:-7}
DICT_SIZE=${DICT_SIZE:-64K}
GROUP=${GROUP:-0}
WRITE_SECONDS=${WRITE_SECONDS:-0}
die() { echo "recompress_gap.sh: $*" >&2; exit 2; }
[ -n "${IMAGE:-}" ] && [ -f "$IMAGE" ] || die "set IMAGE to an image file"
[ -x "$UZRAM" ] || die "no uzram binary at $UZRAM (run 'make programs' or set UZRAM)"
command -v nbdcopy >/dev/null || die "nbdcopy is not installed (scripts/deps.sh installs it)"
UZRAM=$(realpath "$UZRAM")
mkdir -p "$OUT" && OUT=$(realpath "$OUT") || die "cannot create $OUT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/uzram-gap.XXXXXX") || die "mktemp failed"
export XDG_RUNTIME_DIR=$WORK/run
mkdir -p "$XDG_RUNTIME_DIR"
SERVER_PID=
cleanup() {
    [ -n "$SERVER_PID" ] && { kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null; }
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

attr() { "$UZRAM" attr "$@"; }
stat_json() { attr g stat_json; }
spec="algo=zstd,level=$LEVEL,dict=auto"
[ "$GROUP" != 0 ] && spec+=",group=$GROUP"

serve() { # OPTIONS...
    "$UZRAM" serve -q -n g -s "$(stat -c %s "$IMAGE")" -a lz4 -d "$@" >"$WORK/server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 100); do
        [ -S "$XDG_RUNTIME_DIR/uzram/g.ctl" ] && [ -S "$XDG_RUNTIME_DIR/uzram/g.sock" ] && return 0
        sleep 0.1
    done
    die "server did not start: $(tail -1 "$WORK/server.log")"
}
# the thread has nothing left to do (bench/common.bash)
settle() { recomp_settle 900 g || echo "recompress_gap.sh: still moving after 15 minutes" >&2; }
write_image() {
    local uri="nbd+unix:///?socket=$XDG_RUNTIME_DIR/uzram/g.sock"
    if [ "$WRITE_SECONDS" = 0 ]; then
        nbdcopy --no-extents -S 0 "$IMAGE" "$uri"
        return
    fi
    "$PY" - "$IMAGE" "$uri" "$WRITE_SECONDS" <<'EOF'
import nbd, os, sys, time
path, uri, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
h = nbd.NBD()
h.connect_uri(uri)
size, done, start = os.path.getsize(path), 0, time.monotonic()
with open(path, "rb") as f:
    while done < size:
        data = f.read(1 << 20)
        h.pwrite(data, done)
        done += len(data)
        delay = start + seconds * done / size - time.monotonic()
        if delay > 0:
            time.sleep(delay)
h.flush()
h.shutdown()
EOF
}
record() { # SIDE WHEN
    { stat_json; attr g algorithm_params; } >"$WORK/$1-$2.txt"
}

for side in auto auto-late hand; do
    case $side in
    auto) serve --recompress-idle 1 --recompress "$spec" ;;
    auto-late) serve --recompress-idle 0 --recompress "$spec" ;;
    hand) serve ;;
    esac
    [ "$side" = auto ] && recomp_thread_full_speed "$SERVER_PID" g
    [ "$side" != hand ] && attr g recompress_rate 0
    [ "$side" != hand ] && attr g algorithm_params "priority=1 level=$LEVEL dict=auto dict_size=$(numfmt --from=iec "$DICT_SIZE")"
    write_image || die "writing the image failed"
    case $side in
    auto) settle ;;
    auto-late) sleep 1.1; attr g recompress_idle 1; recomp_thread_full_speed "$SERVER_PID" g; settle ;;
    hand)
        attr g recomp_algorithm "algo=zstd priority=1"
        attr g algorithm_params "priority=1 level=$LEVEL dict=auto dict_size=$(numfmt --from=iec "$DICT_SIZE")"
        [ "$GROUP" != 0 ] && attr g recompress_group "$GROUP"
        attr g idle all
        attr g recompress type=idle
        ;;
    esac
    record "$side" settled
    attr g compact 1
    record "$side" compacted
    kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null; SERVER_PID=
    echo "  $side done" >&2
done

GIT=$(git describe --always --dirty 2>/dev/null || echo unknown)
"$PY" - "$WORK" "$OUT/recompress-gap.json" "$IMAGE" "$GIT" "$LEVEL" "$DICT_SIZE" "$GROUP" \
    "$(cut -d' ' -f1-3 /proc/loadavg)" "$WRITE_SECONDS" <<'EOF'
import json, sys
work, out, image, git, level, dict_size, group, load, write_seconds = sys.argv[1:10]
doc = {"image": image, "git": git, "level": int(level), "dict_size": dict_size,
       "group": int(group), "load_at_end": load, "write_seconds": float(write_seconds),
       "sides": {}}
for side in ("auto", "auto-late", "hand"):
    row = {}
    for when in ("settled", "compacted"):
        text = open("%s/%s-%s.txt" % (work, side, when)).read()
        brace = text.rindex("}") + 1
        s = json.loads(text[:brace])
        row[when] = s["mem_used_total"] + s["meta_data_size"]
        row["params_" + when] = text[brace:].strip()
        if when == "compacted":
            row.update({k: s.get(k) for k in ("mem_used_total", "meta_data_size", "dict_mem",
                                               "recomp_pages", "pages_stored", "same_pages",
                                               "dedup_entries", "bundled_pages", "compr_data_size",
                                               "dict_trainings")})
    doc["sides"][side] = row
hand = doc["sides"]["hand"]["compacted"]
for side, row in doc["sides"].items():
    row["settled_vs_hand"] = row["settled"] / hand
    row["compacted_vs_hand"] = row["compacted"] / hand
json.dump(doc, open(out, "w"), indent=1)
for side, row in doc["sides"].items():
    print("%-10s settled %.1f MiB (%.3fx hand), compacted %.1f MiB (%.3fx), dict_mem %s, "
          "recomp_pages %s, bundled %s, dictionaries trained %s" % (
          side, row["settled"] / 2**20, row["settled_vs_hand"], row["compacted"] / 2**20,
          row["compacted_vs_hand"], row["dict_mem"], row["recomp_pages"], row["bundled_pages"],
          row["dict_trainings"] if row["dict_trainings"] is not None else "-"))
EOF
