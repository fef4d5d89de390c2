#!/bin/bash
# memory.sh - memory table (issue 6): the same bytes of real data sets stored in kernel zram, uzram
# dedup off, uzram dedup on and nbdkit memory allocator=zstd; mm_stat fields, savings and ratios.
#
# Usage: bench/memory.sh [--quick] [--out DIR]
#   --quick   smaller data sets (64 MiB caps, a small header tree, no ASan build)
#   --out DIR results folder (default build/bench-results); writes DIR/memory.json
# Environment (optional): UZRAM (default build/uzram), LIB_SIZE (bytes of the /usr/lib tar,
# 512M; quick 64M), DUMP_SIZE (cap on the process dump, 256M; quick 64M), ZRAM (zram0),
# DATASETS ("build-tree usr-lib process py-releases"), and in quick mode IMAGE and KEEP_IMAGE
# (bench/image.bash's: the build-tree image taken from, or kept for, another part).
#
# Data sets, built from what the machine has:
#   build-tree   ext4 image (mkfs.ext4 -d) of a source tree and its build output: /usr/include,
#                this project's sources and the project built in the image (-O2, plus an
#                ASan+UBSan build in full mode), as a developer's disk holds them
#   usr-lib      the first LIB_SIZE bytes of `tar cf - /usr/lib`: the pages of /usr/lib files
#   process      the readable mappings of a running Python process that imported ~40 modules
#                and built some data, read from /proc/PID/mem (a memory dump without gcore)
#   py-releases  ext4 image of two releases of the CPython standard library (same minor
#                version, e.g. Debian's and pyenv's, without site-packages): two checkouts of
#                one source tree, the realistic duplication dedup is for
# Sides: kernel zram (lz4; dd oflag=direct of the file, then mm_stat), uzram serve -a lz4 with
# dedup off and on (nbdcopy --no-extents -S 0, so zero pages are written as data exactly as dd
# writes them, then `uzram attr NAME mm_stat`), nbdkit memory allocator=zstd (no mm_stat: the
# growth of the server's VmRSS, reported as RSS). The uzram servers' VmRSS growth is recorded
# too, for a like-for-like look at process memory.
set -u
cd "$(dirname "$0")/.." || exit 2

# shellcheck source=bench/common.bash
. bench/common.bash
if [ "$QUICK" = 1 ]; then
    LIB_SIZE=${LIB_SIZE:-64M}
    DUMP_SIZE=${DUMP_SIZE:-64M}
else
    LIB_SIZE=${LIB_SIZE:-512M}
    DUMP_SIZE=${DUMP_SIZE:-256M}
fi
DATASETS=${DATASETS:-"build-tree usr-lib process py-releases"}
SIDES="zram uzram-off uzram-on nbdkit-zstd"

die() { echo "memory.sh: $*" >&2; exit 2; }
[ -x "$UZRAM" ] || die "no uzram binary at $UZRAM (run 'make programs' or set UZRAM)"
UZRAM=$(realpath "$UZRAM")
command -v nbdcopy >/dev/null || die "nbdcopy is not installed (apt-get install libnbd-bin)"
bytes() {
    "$PY" -c '
import re, sys
m = re.fullmatch(r"(\d+)([KMG]?)", sys.argv[1])
print(int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)])' "$1" || die "bad size '$1'"
}
LIB_BYTES=$(bytes "$LIB_SIZE")
DUMP_BYTES=$(bytes "$DUMP_SIZE")

mkdir -p "$OUT" || die "cannot create $OUT"
OUT=$(realpath "$OUT")
RES=$OUT/memory
rm -rf "$RES"
mkdir -p "$RES"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/uzram-memory.XXXXXX") || die "mktemp failed"
SERVER_PID=
ZRAM_TOUCHED=0

zram_reset() { echo 1 > "$ZSYS/reset" 2>/dev/null; }
cleanup() {
    if [ -n "$SERVER_PID" ]; then
        kill "$SERVER_PID" 2>/dev/null
        wait "$SERVER_PID" 2>/dev/null
    fi
    if [ "$ZRAM_TOUCHED" = 1 ]; then
        zram_reset || echo "memory.sh: warning: could not reset $ZDEV" >&2
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- which sides can run here -------------------------------------------------------------
declare -A SKIP
if [ ! -b "$ZDEV" ]; then
    SKIP[zram]="$ZDEV does not exist (modprobe zram)"
elif [ "$(id -u)" != 0 ]; then
    SKIP[zram]="not root"
elif grep -q "^$ZDEV " /proc/swaps /proc/mounts 2>/dev/null; then
    SKIP[zram]="$ZDEV is in use (swap or mounted)"
elif [ "$(cat "$ZSYS/initstate" 2>/dev/null)" != 0 ] && [ "${ZRAM_FORCE:-0}" != 1 ]; then
    SKIP[zram]="$ZDEV is initialised (someone else's data?); ZRAM_FORCE=1 resets it"
elif ! grep -qw lz4 "$ZSYS/comp_algorithm" 2>/dev/null; then
    SKIP[zram]="kernel zram has no lz4"
fi
if ! command -v nbdkit >/dev/null; then
    SKIP[nbdkit-zstd]="nbdkit is not installed (apt-get install nbdkit)"
elif ! nbdkit -U - memory 1M allocator=zstd --run true >/dev/null 2>&1; then
    SKIP[nbdkit-zstd]="this nbdkit's memory plugin has no allocator=zstd"
fi

# ---- data sets -------------------------------------------------------------------------------
# Each builder writes $WORK/NAME.img (a multiple of 4 KiB) and $RES/NAME.desc, or prints why not.
page_round() { # file: pad to whole pages, so every side stores exactly the same pages
    local size
    size=$(stat -c %s "$1")
    truncate -s $(((size + 4095) / 4096 * 4096)) "$1"
}

# make_ext4 DIR IMAGE (an image just large enough for DIR), and in quick mode the build-tree.
# shellcheck source=bench/image.bash
. bench/image.bash

build_build_tree() {
    command -v mkfs.ext4 >/dev/null || { echo "mkfs.ext4 is not installed (apt-get install e2fsprogs)"; return 1; }
    if [ "$QUICK" = 1 ]; then
        # bench/image.bash's quick image: the same tree and build as below without the ASan build,
        # which bench/run.sh builds once for this table and the recompression and writeback parts
        # (IMAGE, KEEP_IMAGE).
        RES=$WORK KERNEL=0 IMAGE_FOR=memory.sh get_image || return 1
        mv "$WORK/image" "$WORK/build-tree.img" && mv "$WORK/image.desc" "$RES/build-tree.desc"
        return
    fi
    local root=$WORK/build-tree src
    mkdir -p "$root/include" || return 1
    cp -a /usr/include/. "$root/include/" 2>/dev/null
    src=$root/uzram
    mkdir -p "$src"
    tar cf - --exclude=./build --exclude=./.git . | tar xf - -C "$src" || return 1
    # The build output: what `make` leaves in a build folder (objects, archive, programs, tests).
    (cd "$src" && make -s -j"$(nproc)" O=build all > "$WORK/make.log" 2>&1) ||
        { echo "the project did not build in $src (see make output)"; tail -5 "$WORK/make.log" >&2; return 1; }
    (cd "$src" && make -s -j"$(nproc)" O=build/asan SAN=address,undefined OPT=-O1 all \
        > "$WORK/make.log" 2>&1) || echo "memory.sh: note: the ASan build failed; plain build only" >&2
    make_ext4 "$root" "$WORK/build-tree.img" || { echo "mkfs.ext4 -d failed"; return 1; }
    rm -rf "$root"
    echo "ext4 image (mkfs.ext4 -d) of /usr/include, the uzram sources and their build output (make all; plus an ASan+UBSan build)" > "$RES/build-tree.desc"
}

build_usr_lib() {
    tar cf - /usr/lib 2>/dev/null | head -c "$LIB_BYTES" > "$WORK/usr-lib.img"
    page_round "$WORK/usr-lib.img"
    echo "first $LIB_SIZE of 'tar cf - /usr/lib'" > "$RES/usr-lib.desc"
}

build_process() {
    "$PY" - "$WORK/process.img" "$DUMP_BYTES" > "$WORK/dump.log" 2>&1 <<'EOF' || { echo "the process dump failed: $(tail -1 "$WORK/dump.log")"; return 1; }
# Start a Python process that imports many modules and builds some data, then copy every
# readable mapping of it from /proc/PID/mem: what its memory would put in a swap device.
import subprocess, sys
out_path, limit = sys.argv[1], int(sys.argv[2])
child = subprocess.Popen([sys.executable, "-c", r'''
import importlib, random, sys
for name in ("json email.parser http.client asyncio xml.dom.minidom sqlite3 unittest "
             "multiprocessing decimal argparse logging.handlers csv ssl tarfile zipfile ctypes "
             "pydoc difflib statistics fractions urllib.request concurrent.futures html.parser "
             "curses nbd lzma bz2 gzip shelve dbm pickletools inspect dataclasses typing "
             "ipaddress uuid datetime calendar").split():
    try:
        importlib.import_module(name)
    except Exception:
        pass
r = random.Random(1)
table = {i: ("%08x" % r.getrandbits(32)) * 4 for i in range(200000)}
words = [str(x) for x in range(100000)]
sys.stdout.write("ready\n")
sys.stdout.flush()
sys.stdin.read()
'''], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
assert child.stdout.readline() == b"ready\n"
total = 0
with open(f"/proc/{child.pid}/maps") as maps, open(f"/proc/{child.pid}/mem", "rb", 0) as mem, \
        open(out_path, "wb") as out:
    for line in maps:
        fields = line.split()
        low, high = (int(x, 16) for x in fields[0].split("-"))
        if fields[1][0] != "r" or (len(fields) > 5 and fields[5] in ("[vvar]", "[vsyscall]", "[vvar_vclock]")):
            continue
        try:
            mem.seek(low)
            data = mem.read(min(high - low, limit - total))
        except OSError:
            continue  # guard pages and device mappings cannot be read
        out.write(data)
        total += len(data)
        if total >= limit:
            break
child.stdin.close()
child.wait()
EOF
    page_round "$WORK/process.img"
    echo "readable mappings of a running Python $("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])') process that imported ~40 modules and built a 200000-entry dict (/proc/PID/mem), capped at $DUMP_SIZE" > "$RES/process.desc"
}

build_py_releases() {
    command -v mkfs.ext4 >/dev/null || { echo "mkfs.ext4 is not installed"; return 1; }
    # Two standard libraries of the same minor version, e.g. Debian's and a pyenv build.
    local pair
    pair=$(for d in /usr/lib/python3.* /usr/local/lib/python3.* "$HOME"/.pyenv/versions/*/lib/python3.*; do
               [ -f "$d/os.py" ] && echo "$(basename "$d") $d"
           done | sort -k1,1 -s | awk '{n[$1]++; if (n[$1] <= 2) p[$1] = p[$1] " " $2} END {for (k in n) if (n[k] >= 2) print k p[k]}' | sort | tail -1)
    [ -n "$pair" ] || { echo "no two installed releases of one CPython minor version (set DATASETS without py-releases)"; return 1; }
    read -r version first second <<< "$pair"
    local root=$WORK/py-releases i=0 tree
    for tree in "$first" "$second"; do
        i=$((i + 1))
        mkdir -p "$root/$i"
        if [ "$QUICK" = 1 ]; then
            for sub in email json asyncio http; do cp -a "$tree/$sub" "$root/$i/" 2>/dev/null; done
        else
            tar cf - -C "$tree" --exclude=./site-packages --exclude=./dist-packages . | tar xf - -C "$root/$i"
        fi
    done
    make_ext4 "$root" "$WORK/py-releases.img" || { echo "mkfs.ext4 -d failed"; return 1; }
    rm -rf "$root"
    echo "ext4 image of two $version standard libraries, $first and $second$([ "$QUICK" = 1 ] && echo " (only email, json, asyncio, http)" || echo " (without site-packages)")" > "$RES/py-releases.desc"
}

# ---- the sides ----------------------------------------------------------------------------
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

wait_socket() { # socket
    for _ in $(seq 100); do
        [ -S "$1" ] && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# copy_in IMAGE SOCKET RESULT: nbdcopy every page of IMAGE (zero pages too) to the
# server on SOCKET, setting start/end (ns) and before/after (server VmRSS, KiB);
# on failure writes the reason to RESULT, stops the server and returns 1.
copy_in() {
    before=$(rss_kib "$SERVER_PID")
    start=$(date +%s%N)
    if ! nbdcopy --no-extents -S 0 "$1" "nbd+unix:///?socket=$2" 2> "$WORK/nbdcopy.log"; then
        echo "failed: nbdcopy: $(tail -1 "$WORK/nbdcopy.log")" > "$3"
        stop_server
        return 1
    fi
    end=$(date +%s%N)
    after=$(rss_kib "$SERVER_PID")
}

stop_server() {
    kill "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
    SERVER_PID=
}

# measure SIDE IMAGE RESULT: writes "key value" lines into RESULT, or the reason it failed.
measure() {
    local side=$1 img=$2 res=$3 size sock before after start end
    size=$(stat -c %s "$img")
    sock=$WORK/mem.sock
    rm -f "$sock"
    case $side in
    zram)
        ZRAM_TOUCHED=1
        zram_reset && echo lz4 > "$ZSYS/comp_algorithm" && echo "$size" > "$ZSYS/disksize" ||
            { echo "failed: cannot configure $ZDEV" > "$res"; return; }
        start=$(date +%s%N)
        dd if="$img" of="$ZDEV" bs=1M oflag=direct status=none ||
            { echo "failed: dd to $ZDEV failed" > "$res"; zram_reset; return; }
        end=$(date +%s%N)
        echo "mm_stat $(cat "$ZSYS/mm_stat")" > "$res"
        zram_reset
        ;;
    uzram-off | uzram-on)
        # shellcheck disable=SC2046 # the option is absent for dedup off
        XDG_RUNTIME_DIR=$WORK "$UZRAM" serve -q -s "$size" -a lz4 -n mem --unix "$sock" \
            $([ "$side" = uzram-on ] && echo --dedup) > "$WORK/server.log" 2>&1 &
        SERVER_PID=$!
        wait_socket "$sock" || { echo "failed: server did not start: $(tail -1 "$WORK/server.log")" > "$res"; stop_server; return; }
        copy_in "$img" "$sock" "$res" || return
        # the control socket is $XDG_RUNTIME_DIR/uzram/mem.ctl: asked by name, as serve placed it
        local mm
        mm=$(XDG_RUNTIME_DIR=$WORK "$UZRAM" attr mem mm_stat 2>&1) && [ -n "$mm" ] ||
            { echo "failed: uzram attr mem mm_stat: $mm" > "$res"; stop_server; return; }
        { echo "mm_stat $mm"; echo "rss_growth $(((after - before) * 1024))"; } > "$res"
        stop_server
        ;;
    nbdkit-zstd)
        nbdkit -f --unix "$sock" memory "$size" allocator=zstd > "$WORK/server.log" 2>&1 &
        SERVER_PID=$!
        wait_socket "$sock" || { echo "failed: nbdkit did not start" > "$res"; stop_server; return; }
        copy_in "$img" "$sock" "$res" || return
        echo "rss_growth $(((after - before) * 1024))" > "$res"
        stop_server
        ;;
    esac
    echo "milliseconds $(((end - start) / 1000000))" >> "$res"
}

START=$(date +%s)
echo "memory: data sets: $DATASETS; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
for side in $SIDES; do
    [ -n "${SKIP[$side]:-}" ] && echo "  $side: skipped: ${SKIP[$side]}"
done
for name in $DATASETS; do
    builder=build_${name//-/_}
    declare -F "$builder" >/dev/null || die "unknown data set '$name'"
    t0=$(date +%s)
    if ! why=$("$builder"); then
        echo "${why:-could not be built}" > "$RES/$name.skipped"
        echo "  $name: skipped: ${why:-could not be built}"
        continue
    fi
    [ -n "$why" ] && echo "$why" >&2
    img=$WORK/$name.img
    echo "$(stat -c %s "$img")" > "$RES/$name.bytes"
    line="  $name ($(($(stat -c %s "$img") >> 20)) MiB, built in $(($(date +%s) - t0)) s):"
    for side in $SIDES; do
        if [ -n "${SKIP[$side]:-}" ]; then
            echo "skipped: ${SKIP[$side]}" > "$RES/$name.$side"
            continue
        fi
        measure "$side" "$img" "$RES/$name.$side"
        line="$line $side"
    done
    echo "$line"
    rm -f "$img"
done
END=$(date +%s)

# ---- memory.json ---------------------------------------------------------------------------
"$PY" - "$RES" "$OUT/memory.json" "$DATASETS" "$SIDES" "$QUICK" "$((END - START))" <<'EOF'
import json, os, sys
res, out, datasets, sides, quick, seconds = sys.argv[1:7]
FIELDS = ("orig_data_size compr_data_size mem_used_total mem_limit mem_used_max same_pages "
          "pages_compacted huge_pages huge_pages_since dup_data_size meta_data_size").split()
doc = {"quick": quick == "1", "seconds": int(seconds), "datasets": []}
for name in datasets.split():
    entry = {"name": name, "sides": {}}
    path = os.path.join(res, name)
    if os.path.exists(path + ".skipped"):
        entry["skipped"] = open(path + ".skipped").read().strip()
        doc["datasets"].append(entry)
        continue
    entry["description"] = open(path + ".desc").read().strip()
    entry["bytes"] = int(open(path + ".bytes").read())
    for side in sides.split():
        text = open(f"{path}.{side}").read().strip()
        if text.startswith(("skipped:", "failed:")):
            kind, why = text.split(":", 1)
            entry["sides"][side] = {kind: why.strip()}
            continue
        row = {}
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "mm_stat":
                row.update({k: int(v) for k, v in zip(FIELDS, value.split())})
            else:
                row[key] = int(value)
        # Memory the side holds for the data: the pool plus, with dedup, the dedup index;
        # for nbdkit the server's RSS growth (it has no mm_stat).
        if "mem_used_total" in row:
            row["memory"] = row["mem_used_total"] + row.get("meta_data_size", 0)
        else:
            row["memory"] = row["rss_growth"]
            row["memory_is_rss"] = True
        row["savings"] = 1 - row["memory"] / entry["bytes"]
        entry["sides"][side] = row
    doc["datasets"].append(entry)
json.dump(doc, open(out, "w"), indent=1)
EOF
echo "memory: done in $((END - START)) s; $OUT/memory.json"
