#!/bin/bash
# plot.sh - draws a benchmark run's plots with gnuplot: throughput by jobs for each side and
# workload (from matrix.json), memory by data set for each side (from memory.json).
#
# Usage: bench/plot.sh RESULTS_DIR PLOT_DIR
# Writes PLOT_DIR/throughput.png and PLOT_DIR/memory.png (pngcairo, else gnuplot's png; SVG
# files of the same names with .svg when gnuplot has no PNG terminal). Skips a plot whose
# results are missing; exits 0 with a message when gnuplot is not installed.
set -u
RESULTS=${1:?usage: bench/plot.sh RESULTS_DIR PLOT_DIR}
PLOTS=${2:?usage: bench/plot.sh RESULTS_DIR PLOT_DIR}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

if ! command -v gnuplot >/dev/null; then
    echo "plot.sh: gnuplot is not installed (apt-get install gnuplot-nox); no plots" >&2
    exit 0
fi
TERMINALS=$(gnuplot -e 'set terminal' 2>&1)
if grep -qw pngcairo <<< "$TERMINALS"; then
    TERM_LINE="set terminal pngcairo noenhanced font 'DejaVu Sans,10' size %d,%d"; EXT=png
elif grep -qw png <<< "$TERMINALS"; then
    TERM_LINE="set terminal png noenhanced size %d,%d"; EXT=png
else
    TERM_LINE="set terminal svg noenhanced size %d,%d"; EXT=svg
fi
mkdir -p "$PLOTS" || exit 1
WORK=$(mktemp -d "${TMPDIR:-/tmp}/uzram-plot.XXXXXX") || exit 1
trap 'rm -rf "$WORK"' EXIT

# The data files and gnuplot scripts are written by Python (JSON in, columns out).
"$PY" - "$RESULTS" "$PLOTS" "$WORK" "$TERM_LINE" "$EXT" <<'EOF' || exit 1
import json, os, sys
results, plots, work, term_line, ext = sys.argv[1:6]
names = {"uzram-off": "uzram lz4", "uzram-on": "uzram lz4 dedup", "nbdkit-sparse": "nbdkit sparse",
         "nbdkit-zstd": "nbdkit zstd", "zram": "kernel zram lz4"}
colors = {"uzram-off": "#1f77b4", "uzram-on": "#2ca02c", "nbdkit-sparse": "#ff7f0e",
          "nbdkit-zstd": "#d62728", "zram": "#7f7f7f"}
workloads = ["read", "write", "rw", "randread", "randwrite", "randrw"]
wnames = {"read": "seq read", "write": "seq write", "rw": "seq 70/30", "randread": "rand read",
          "randwrite": "rand write", "randrw": "rand 70/30"}
bnames = {"static": "static pattern", "half": "50% compressible"}

def load(name):
    try:
        return json.load(open(os.path.join(results, name)))
    except (OSError, ValueError):
        return None

matrix = load("matrix.json")
if matrix:
    sides = [s["side"] for s in matrix["sides"] if not s["skipped"]]
    panels = []
    for buffer in ("static", "half"):
        for w in workloads:
            rows = [r for r in matrix["results"] if r["buffer"] == buffer and r["workload"] == w]
            if rows:
                panels.append((buffer, w, rows))
    jobs = matrix["config"]["jobs"]
    buffers = sorted({p[0] for p in panels}, key=["static", "half"].index)
    cols = max(sum(1 for p in panels if p[0] == b) for b in buffers) if panels else 1
    script = [term_line % (330 * cols + 60, 300 * len(buffers) + 60),
              "set output '%s/throughput.%s'" % (plots, ext),
              "set multiplot layout %d,%d title 'fio 4 KiB, iodepth %d: MB/s by jobs'"
              % (len(buffers), cols, matrix["config"]["iodepth"]),
              "set key top left font ',8'", "set grid ytics", "set yrange [0:*]",
              "set xrange [%g:%g]" % (min(jobs) - 0.5, max(jobs) + 0.5),
              "set xtics (%s)" % ", ".join('"%d" %d' % (j, j) for j in jobs),
              "set xlabel 'jobs'", "set ylabel 'MB/s'"]
    for buffer in buffers:
        mine = [p for p in panels if p[0] == buffer]
        for i, (_, w, rows) in enumerate(mine):
            path = os.path.join(work, "t-%s-%s.dat" % (buffer, w))
            with open(path, "w") as f:
                for j in jobs:
                    vals = {r["side"]: r.get("MBps") for r in rows if r["jobs"] == j}
                    f.write("%d %s\n" % (j, " ".join("%.1f" % vals[s] if vals.get(s) else "NaN" for s in sides)))
            script.append("set title '%s, %s'" % (wnames[w], bnames[buffer]))
            script.append("set key %s" % ("top left" if i == 0 else "off"))
            script.append("plot " + ", ".join(
                "'%s' using 1:%d with linespoints lw 2 pt 7 lc rgb '%s' title '%s'"
                % (path, k + 2, colors[s], names[s]) for k, s in enumerate(sides)))
        for _ in range(cols - len(mine)):
            script.append("set multiplot next")
    script.append("unset multiplot")
    open(os.path.join(work, "throughput.gp"), "w").write("\n".join(script) + "\n")

memory = load("memory.json")
if memory:
    sides = ["zram", "uzram-off", "uzram-on", "nbdkit-zstd"]
    sets = [d for d in memory["datasets"] if not d.get("skipped")]
    path = os.path.join(work, "memory.dat")
    with open(path, "w") as f:
        f.write("set " + " ".join('"%s"' % names[s] for s in sides) + "\n")
        for d in sets:
            vals = []
            for s in sides:
                row = d["sides"].get(s, {})
                vals.append("%.2f" % (100 * row["memory"] / d["bytes"]) if row.get("memory") else "NaN")
            f.write('"%s (%d MiB)" %s\n' % (d["name"], d["bytes"] >> 20, " ".join(vals)))
    script = [term_line % (900, 480), "set output '%s/memory.%s'" % (plots, ext),
              "set title 'Memory holding each data set, % of its size (lower is better; nbdkit zstd: RSS growth)'",
              "set style data histograms", "set style histogram clustered gap 1",
              "set style fill solid 0.85 border -1", "set boxwidth 0.9", "set grid ytics",
              "set yrange [0:*]", "set ylabel '% of original bytes'", "set key top right",
              "set xtics nomirror"]
    script.append("plot " + ", ".join(
        "'%s' using %d:xtic(1) title columnheader(%d) lc rgb '%s'" % (path, k + 2, k + 2, colors[s])
        for k, s in enumerate(sides)))
    open(os.path.join(work, "memory.gp"), "w").write("\n".join(script) + "\n")
EOF

status=0
for plot in throughput memory; do
    [ -f "$WORK/$plot.gp" ] || continue
    if gnuplot "$WORK/$plot.gp" 2> "$WORK/$plot.err"; then
        echo "plot.sh: $PLOTS/$plot.$EXT"
    else
        echo "plot.sh: gnuplot failed on $plot:" >&2
        cat "$WORK/$plot.err" >&2
        status=1
    fi
done
exit $status
