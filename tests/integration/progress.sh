#!/usr/bin/env bash
# progress.sh - integration test: long work shows a progress line on a terminal, and nothing
# when standard error is not one (issue 28). Run on a pseudo-terminal (python3's pty) with
# UZRAM_PROGRESS_AFTER_MS=0, so that the first line comes at once however fast the machine
# is: `uzram estimate` of a directory counts its files first and then shows bytes done of the
# directory's total with the time left (uzram(1) promises it), of a file the same; a
# recompression and a writeback pass started with `uzram attr` show the pages done of those
# they may take; `uzram attach` shows how long the server has been at it (root, FUSE, loop).
# Every line is erased at the end, and the results are those of a run without a terminal.
# Skips and fails as tests/integration/lib.bash says (exit 0/1/77).
set -euo pipefail

. "$(dirname "$0")/lib.bash"
need_tools nbdcopy
[[ -x $PY ]] || skip "$PY is missing"
lib_init

cat >"$WORK/on_pty.py" <<'EOF'
# on_pty.py OUT COMMAND...: run COMMAND on a pseudo-terminal, everything it writes into OUT.
import os, pty, sys
pid, fd = pty.fork()
if pid == 0:
    os.environ["UZRAM_PROGRESS_AFTER_MS"] = "0"
    os.execvp(sys.argv[2], sys.argv[2:])
out = b""
while True:
    try:
        data = os.read(fd, 65536)
    except OSError:
        break
    if not data:
        break
    out += data
_, status = os.waitpid(pid, 0)
open(sys.argv[1], "wb").write(out)
sys.exit(os.waitstatus_to_exitcode(status))
EOF
on_pty() { $PY "$WORK/on_pty.py" "$@"; }
# lines OUT: what was drawn over the line (the text after each \r), one a line.
lines() { tr '\r' '\n' <"$1" | sed 's/\x1b\[K//g'; }

# --- estimate of a directory: counted first, then bytes of the total with the time left ---
mkdir -p "$WORK/tree/a/b"
for i in $(seq 40); do head -c $((256 * 1024)) /dev/urandom >"$WORK/tree/a/file$i"; done
for i in $(seq 40); do seq 1 40000 >"$WORK/tree/a/b/text$i"; done
ln -s /etc/passwd "$WORK/tree/link" # not followed, not counted
total=$(find "$WORK/tree" -type f -printf '%s\n' | awk '{n += $1} END {print n}')
on_pty "$WORK/estimate.tty" "$UZRAM" estimate "$WORK/tree" || fail "estimate on a terminal: $(cat "$WORK/estimate.tty")"
lines "$WORK/estimate.tty" >"$WORK/estimate.lines"
grep -q "^counting $WORK/tree: [0-9]* files" "$WORK/estimate.lines" || fail "no counting line: $(head -5 "$WORK/estimate.lines")"
human=$("$UZRAM" estimate --json "$WORK/tree" | $PY -c 'import json,sys; print(json.load(sys.stdin)["sources"][0]["bytes"])')
[[ $human -eq $total ]] || fail "estimate read $human bytes of the tree's $total"
shown=$(sed -n "s|^$WORK/tree: .* of \([0-9.]*[KMG]\), .* left.*|\1|p" "$WORK/estimate.lines" | head -1)
[[ -n $shown ]] || fail "no 'of TOTAL, ... left' line for the directory: $(grep "^$WORK/tree" "$WORK/estimate.lines" | head -3)"
want=$(awk -v b="$total" 'BEGIN {printf "%.1fM", b / 1048576}')
[[ $shown == "$want" ]] || fail "the directory's total shown as $shown, not $want ($total bytes)"
grep -q "^source " "$WORK/estimate.lines" || fail "no report after the progress lines"
"$UZRAM" estimate "$WORK/tree" >/dev/null 2>"$WORK/estimate.err" || fail "estimate without a terminal"
[[ ! -s $WORK/estimate.err ]] || fail "estimate wrote to a stderr that is no terminal: $(cat -A "$WORK/estimate.err" | head -3)"
on_pty "$WORK/quiet.tty" "$UZRAM" estimate -q "$WORK/tree" || fail "estimate -q"
if grep -q $'\r\x1b\[K' "$WORK/quiet.tty"; then fail "estimate -q drew a progress line"; fi
pass "estimate DIR on a terminal: counting, then bytes of its $want with the time left; silent otherwise"

cat "$WORK"/tree/a/b/* "$WORK"/tree/a/file* >"$WORK/big"
truncate -s $(($(stat -c %s "$WORK/big") / 4096 * 4096)) "$WORK/big"
on_pty "$WORK/file.tty" "$UZRAM" estimate "$WORK/big" || fail "estimate FILE on a terminal"
lines "$WORK/file.tty" | grep -q "^$WORK/big: .* of [0-9.]*M, .* left" || fail "no progress for a file: $(lines "$WORK/file.tty" | head -3)"
pass "estimate FILE on a terminal: bytes of its size and the time left"

# --- passes started from the command line ---
start_server pass -s 256M --backing-file "$WORK/backing"
nbdcopy "$WORK/big" "$(uri_of pass)"
"$UZRAM" attr pass recomp_algorithm "algo=zstd priority=1"
"$UZRAM" attr pass idle all
idle=$(stat_json_field pass idle_pages)
on_pty "$WORK/recompress.tty" "$UZRAM" attr pass recompress type=idle || fail "recompress pass on a terminal: $(cat "$WORK/recompress.tty")"
lines "$WORK/recompress.tty" >"$WORK/recompress.lines"
grep -q "^recompressing pass (type=idle): [0-9]* of $idle pages" "$WORK/recompress.lines" ||
    fail "no progress line for the recompress pass ($idle idle pages): $(cat "$WORK/recompress.lines")"
[[ $(stat_json_field pass recomp_pages) -gt 0 ]] || fail "the pass recompressed nothing"
tail -c 4 "$WORK/recompress.tty" | grep -q $'\x1b\[K' || fail "the recompress line was not erased at the end"
"$UZRAM" attr pass idle all
on_pty "$WORK/writeback.tty" "$UZRAM" attr pass writeback idle || fail "writeback pass on a terminal: $(cat "$WORK/writeback.tty")"
grep -q "^writing back pass (idle): [0-9]* of [0-9]* pages" <(lines "$WORK/writeback.tty") ||
    fail "no progress line for the writeback pass: $(lines "$WORK/writeback.tty")"
[[ $(stat_json_field pass bd_writes) -gt 0 ]] || fail "the writeback pass wrote nothing back"
"$UZRAM" attr pass idle all
"$UZRAM" attr pass recompress type=idle 2>"$WORK/pass.err" || fail "recompress pass without a terminal"
[[ ! -s $WORK/pass.err ]] || fail "a pass wrote to a stderr that is no terminal: $(cat "$WORK/pass.err")"
pass "recompress and writeback passes from uzram attr: pages done of the $idle idle pages on a terminal; silent otherwise"

# --- attach: how long the server has been at it ---
if [[ $(id -u) -ne 0 || ! -c /dev/fuse || ! -e /dev/loop-control ]]; then
    skip_check "attach on a terminal: needs root, /dev/fuse and loop devices"
else
    on_pty "$WORK/attach.tty" "$UZRAM" attach --via loop pass || fail "attach on a terminal: $(cat "$WORK/attach.tty")"
    at_exit "'$UZRAM' detach pass"
    lines "$WORK/attach.tty" | grep -q "^attaching pass (via loop): 0:0[0-9]" || fail "no attach line: $(lines "$WORK/attach.tty")"
    lines "$WORK/attach.tty" | grep -qx "/dev/loop[0-9]*" || fail "attach printed no node: $(lines "$WORK/attach.tty")"
    on_pty "$WORK/detach.tty" "$UZRAM" detach pass || fail "detach on a terminal"
    lines "$WORK/detach.tty" | grep -q "^detaching pass: 0:0[0-9]" || fail "no detach line: $(lines "$WORK/detach.tty")"
    pass "attach and detach on a terminal: how long the server has been at it"
fi
stop_server pass

echo "PASS: progress.sh"
