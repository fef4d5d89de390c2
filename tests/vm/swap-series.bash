# swap-series.bash - the density samples of a swap-programs run (tests/vm/swap-programs.sh's
# SERIES file: "SECONDS RATIO FILL HELD PRESSURE" lines, ratio and fill in hundredths) as the
# fields of its result line, said once: the guest writes them when the run ends, and
# bench/vm-swap-programs.sh reads the same file for a run the host had to end (both source it).
# series_fields FILE: ratio_series=S:R,... fill_series=S:F,... held_series=S:MIB/PSI,... (each
# "-" when FILE has no sample).
series_fields() {
    awk '{r = r (NR > 1 ? "," : "") sprintf("%d:%.2f", $1, $2 / 100)
          f = f (NR > 1 ? "," : "") sprintf("%d:%.2f", $1, $3 / 100)
          h = h (NR > 1 ? "," : "") sprintf("%d:%s/%s", $1, $4, $5)}
        END {printf "ratio_series=%s fill_series=%s held_series=%s", (r == "" ? "-" : r),
             (f == "" ? "-" : f), (h == "" ? "-" : h)}' "$1" 2>/dev/null ||
        printf 'ratio_series=- fill_series=- held_series=-'
}
