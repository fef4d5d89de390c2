# swap-dense.bash - the options of uzram's densest swap mode (uzram(1) SWAP), said once:
# tests/vm/swap-memory.sh holds a server with them to its memory budget and
# bench/vm-swap-programs.sh measures them against kernel zram (both source this file).
# Pages are stored with zstd as they arrive (with lz4 first, a program swapping faster than
# the recompressor packs filled the cap at lz4's ratio: sort of twice the guest's memory was
# OOM-killed where kernel zram zstd completed), then packed with a trained dictionary.
# shellcheck disable=SC2034,SC2054 # used by the files that source it; commas are in values
SWAP_DENSE_OPTIONS=(--algorithm zstd --dedup --recompress algo=zstd,level=7,dict=auto,group=8
    --recompress-idle 1)
