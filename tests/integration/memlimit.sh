#!/usr/bin/env bash
# memlimit.sh - integration test: concurrent NBD clients write past mem_limit. Writes that do not
# fit fail with ENOSPC, acknowledged data stays intact, and after trims or a raised limit writes work.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

need_python_nbd
lib_init

CLIENTS=3
REGION=$((16 * MiB)) # each client owns one region of the 64 MiB disk
LIMIT=$((4 * MiB))   # random data does not compress: about 1000 pages fit

start_server ml -s 64M -m 4M
URI=$(uri_of ml)
PID=${SERVER_PID[ml]}

# A client of its own, so the test runs only the packaged python + libnbd. It keeps a state
# file per client: block offset -> sha256 of what was acknowledged, "zero", or "failed".
cat >"$WORK/mlclient.py" <<'EOF'
import errno, hashlib, json, os, random, sys
import nbd

BLOCK = 64 * 1024
mode, uri, state_path = sys.argv[1], sys.argv[2], sys.argv[3]
args = sys.argv[4:]

def load():
    with open(state_path) as f:
        return {int(k): v for k, v in json.load(f).items()}

def save(state):
    with open(state_path + ".tmp", "w") as f:
        json.dump({str(k): v for k, v in state.items()}, f)
    os.replace(state_path + ".tmp", state_path)

h = nbd.NBD()
h.connect_uri(uri)
acked = failed = 0
if mode == "fill":
    # fill START LENGTH SEED [MUST_SUCCEED_COUNT]: write every block of the region that is
    # not yet acknowledged; with a count, exactly that many must succeed (no ENOSPC allowed).
    start, length, seed = int(args[0]), int(args[1]), int(args[2])
    want = int(args[3]) if len(args) > 3 else None
    state = load() if os.path.exists(state_path) else {}
    rng = random.Random(seed)
    for offset in range(start, start + length, BLOCK):
        if want is not None and acked == want:
            break
        if state.get(offset, "failed") != "failed":
            continue
        data = rng.randbytes(BLOCK)
        try:
            h.pwrite(data, offset)
            state[offset] = hashlib.sha256(data).hexdigest()
            acked += 1
        except nbd.Error as e:
            if e.errnum != errno.ENOSPC:
                sys.exit(f"write at {offset}: {e} (only ENOSPC is allowed)")
            if want is not None:
                sys.exit(f"write at {offset}: ENOSPC where it must fit ({acked} of {want} done)")
            # The pages before the one that did not fit may hold new data: unknown now.
            state[offset] = "failed"
            failed += 1
    if want is not None and acked != want:
        sys.exit(f"only {acked} of {want} blocks could be written")
    save(state)
elif mode == "trim":
    # trim COUNT: discard up to COUNT acknowledged blocks (all with COUNT=-1).
    count = int(args[0])
    state = load()
    for offset in sorted(state):
        if count == 0:
            break
        if state[offset] not in ("zero", "failed"):
            h.trim(BLOCK, offset)
            state[offset] = "zero"
            acked += 1
            count -= 1
    save(state)
elif mode == "verify":
    zero_sum = hashlib.sha256(bytes(BLOCK)).hexdigest()
    for offset, expected in sorted(load().items()):
        if expected == "failed":
            failed += 1
            continue
        got = hashlib.sha256(h.pread(BLOCK, offset)).hexdigest()
        if got != (zero_sum if expected == "zero" else expected):
            sys.exit(f"block at {offset} changed: expected {expected}, read {got}")
        acked += 1
h.shutdown()
print(acked, failed)
EOF

client() { $PY "$WORK/mlclient.py" "$@"; }

# mm_stat: 2 mem_used_total, 3 mem_limit, 4 mem_used_max
[[ $(mm_stat_field ml 3) -eq $LIMIT ]] || fail "mem_limit is $(mm_stat_field ml 3), not $LIMIT"

# --- phase 1: three clients at once write 48 MiB of random data into 4 MiB ---
pids=()
for i in $(seq 0 $((CLIENTS - 1))); do
    client fill "$URI" "$WORK/state$i" $((i * REGION)) $REGION $((100 + i)) >"$WORK/fill$i.out" \
        2>"$WORK/fill$i.err" &
    pids+=($!)
done
for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || fail "client $i: $(cat "$WORK/fill$i.err")"
done
total_acked=0 total_failed=0 most=0 most_acked=-1
for i in $(seq 0 $((CLIENTS - 1))); do
    read -r a f <"$WORK/fill$i.out"
    total_acked=$((total_acked + a))
    total_failed=$((total_failed + f))
    if ((a > most_acked)); then most=$i most_acked=$a; fi
done
[[ $total_failed -gt 0 ]] || fail "no write failed with ENOSPC past a 4 MiB limit"
[[ $total_acked -gt 0 ]] || fail "no write succeeded under a 4 MiB limit"
acked_bytes=$((total_acked * 64 * 1024))
((acked_bytes <= LIMIT)) || fail "$acked_bytes bytes of random data acknowledged under a $LIMIT limit"
used_max=$(mm_stat_field ml 4)
((used_max <= LIMIT)) || fail "mem_used_max $used_max is above mem_limit $LIMIT"
pass "3 clients: $total_acked blocks of 64 KiB acknowledged, $total_failed refused with ENOSPC," \
    "mem_used_max $used_max <= $LIMIT"

verify_all() { # what
    local i out
    for i in $(seq 0 $((CLIENTS - 1))); do
        out=$(client verify "$URI" "$WORK/state$i" 2>&1) || fail "$1: client $i: $out"
    done
}
verify_all "after ENOSPC"
pass "every acknowledged block reads back intact"

# --- phase 2: trims free memory and writes fit again ---
# The client that got the most room trims everything it has; the next one writes again.
other=$(((most + 1) % CLIENTS))
read -r trimmed _ < <(client trim "$URI" "$WORK/state$most" -1) || fail "trim failed"
[[ $trimmed -gt 0 ]] || fail "client $most had nothing to trim"
# Random pages are stored whole, so every page trimmed makes room for one new page. Three
# quarters leaves slack for the pool's per-size-class slabs.
refill=$((trimmed * 3 / 4))
out=$(client fill "$URI" "$WORK/state$other" $((other * REGION)) $REGION 201 $refill 2>&1) ||
    fail "writes after trimming $trimmed blocks: $out"
verify_all "after trim and refill"
pass "trimmed $trimmed blocks, then $refill new blocks fit and everything verifies"

# --- phase 3: a raised limit lets every remaining write through ---
"$UZRAM" attr ml mem_limit 256M || fail "raising mem_limit"
[[ $(mm_stat_field ml 3) -eq $((256 * MiB)) ]] || fail "mem_limit not raised"
for i in $(seq 0 $((CLIENTS - 1))); do
    missing=$($PY -c 'import json, sys; print(sum(v == "failed" for v in json.load(open(sys.argv[1])).values()))' "$WORK/state$i")
    if [[ $missing -gt 0 ]]; then
        out=$(client fill "$URI" "$WORK/state$i" $((i * REGION)) $REGION $((300 + i)) "$missing" 2>&1) ||
            fail "client $i after raising the limit: $out"
    fi
done
verify_all "after raising the limit"
pass "after raising mem_limit every refused block was written and verifies"

# --- the same server process served everything and stops cleanly ---
[[ ${SERVER_PID[ml]} == "$PID" ]] && server_alive ml || fail "the server died"
stop_server ml
pass "server stopped cleanly"
