# common.bash - what bench/matrix.sh and bench/memory.sh share: their options
# (--quick, --out DIR, --help) and the paths of the binaries and of kernel zram.
# Sourced, not run; sets QUICK, OUT, UZRAM, PY, ZRAM, ZDEV and ZSYS.

QUICK=0
OUT=build/bench-results
while [ $# -gt 0 ]; do
    case $1 in
    --quick) QUICK=1 ;;
    --out) OUT=$2; shift ;;
    --out=*) OUT=${1#--out=} ;;
    -h | --help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) echo "$(basename "$0"): unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
    shift
done

UZRAM=${UZRAM:-build/uzram}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
ZRAM=${ZRAM:-zram0}
ZDEV=/dev/$ZRAM
ZSYS=/sys/block/$ZRAM
