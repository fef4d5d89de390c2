#!/usr/bin/env bash
# runtime.sh - integration test: `make run`, `serve`, `status` and `attr` agree on where the
# sockets are. make run's device is found by status and attr in another process with no option;
# without XDG_RUNTIME_DIR a user's server and status meet in the same directory; status -u and
# attr -u take whatever serve -u was given (an NBD socket path, relative or absolute, or the
# control socket), also when the control socket had to go beside it.
# Skips and fails as tests/integration/lib.bash says (exit 0/1/77).
set -euo pipefail

. "$(dirname "$0")/lib.bash"
need_tools nbdinfo nbdcopy
lib_init
REPO=$(cd "$(dirname "$0")/../.." && pwd)

# --- make run (scripts/run.sh, with a small sample) and another shell ---
if [[ $UZRAM != "$REPO/build/uzram" ]]; then
    skip_check "make run: scripts/run.sh serves build/uzram, and this test was given $UZRAM"
else
    UZRAM_RUN_SAMPLE_MIB=4 setsid "$REPO/scripts/run.sh" >"$WORK/run.out" 2>"$WORK/run.err" &
    run_pid=$!
    at_exit "kill -INT -- -$run_pid; sleep 1; kill -- -$run_pid"
    for _ in $(seq 300); do
        grep -q "From another shell" "$WORK/run.out" 2>/dev/null && break
        kill -0 $run_pid 2>/dev/null || fail "make run ended: $(cat "$WORK/run.err")"
        sleep 0.1
    done
    grep -q "From another shell" "$WORK/run.out" || fail "make run did not get to serving: $(cat "$WORK/run.out" "$WORK/run.err")"
    # Another shell: the same environment, no option; the lines make run prints, as printed.
    sed -n '/From another shell/,$p' "$WORK/run.out" | sed -n 's/^  \(.*\)$/\1/p' >"$WORK/printed.sh"
    [[ $(wc -l <"$WORK/printed.sh") -eq 3 ]] || fail "make run's lines for another shell: $(cat "$WORK/printed.sh")"
    (cd "$REPO" && bash -e "$WORK/printed.sh") >"$WORK/printed.out" 2>&1 || fail "make run's lines: $(cat "$WORK/printed.out")"
    grep -q '^uzram0 .* 4M ' "$WORK/printed.out" || fail "build/uzram status does not show make run's device: $(cat "$WORK/printed.out")"
    grep -qx "disksize  *$((1 << 30))" "$WORK/printed.out" || fail "build/uzram attr uzram0: $(cat "$WORK/printed.out")"
    grep -q "export-size: $((1 << 30))" "$WORK/printed.out" || fail "make run's nbdinfo line: $(cat "$WORK/printed.out")"
    grep -q "served until Ctrl-C" "$WORK/run.out" || fail "make run does not say it serves until Ctrl-C"
    kill -INT -- -"$run_pid"
    for _ in $(seq 100); do kill -0 $run_pid 2>/dev/null || break; sleep 0.1; done
    kill -0 $run_pid 2>/dev/null && fail "make run still running 10 s after Ctrl-C"
    wait $run_pid || fail "make run ended with status $? on Ctrl-C: $(cat "$WORK/run.err")"
    [[ ! -e $(sock_of uzram0) ]] || fail "make run's socket is left after Ctrl-C"
    pass "make run: its three lines for another shell work as printed; Ctrl-C ends it with status 0"

    # Ctrl-C on a terminal, through make itself: make must not say it failed ("Error 1").
    cat >"$WORK/ctrl-c.py" <<'EOF'
import os, pty, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execvp("make", ["make", "-s", "-C", sys.argv[1], "run"])
out, deadline, sent = b"", time.time() + 120, False
while time.time() < deadline:
    try:
        data = os.read(fd, 4096)
    except OSError:
        break
    if not data:
        break
    out += data
    if not sent and b"served until Ctrl-C" in out:
        time.sleep(0.5)
        os.write(fd, b"\x03")
        sent = True
_, status = os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace"))
print("\nsent %s, status %d" % (sent, os.waitstatus_to_exitcode(status)))
EOF
    UZRAM_RUN_SAMPLE_MIB=4 /usr/bin/python3 "$WORK/ctrl-c.py" "$REPO" >"$WORK/ctrl-c.out" 2>&1 || true
    grep -q "^sent True" "$WORK/ctrl-c.out" || fail "make run on a terminal did not get to serving: $(cat "$WORK/ctrl-c.out")"
    # GNU make 4.3 itself sometimes loses the race between its SIGINT handler and its main loop
    # over reaping the recipe ("*** wait: No child processes", then "Waiting for unfinished
    # jobs"; seen in 2 of about 10 make checks, never from the recipe): those lines are make's,
    # any other error line (the recipe's "Error N") still fails.
    if tr -d '\r' <"$WORK/ctrl-c.out" | grep "make.*\*\*\*\|Error [0-9]" |
        grep -qv '\*\*\* wait: No child processes\.  Stop\.$\|\*\*\* Waiting for unfinished jobs\.*$'; then
        fail "make run reports an error on Ctrl-C: $(cat "$WORK/ctrl-c.out")"
    fi
    grep -q "SIG[A-Z]* received: stopping; discarding" "$WORK/ctrl-c.out" || fail "the server did not stop on Ctrl-C: $(cat "$WORK/ctrl-c.out")"
    pass "make run on a terminal: Ctrl-C stops the server, and make reports no error"
fi

# --- serve -u PATH: status -u and attr -u take the same PATH (relative or absolute) ---
mkdir -m 700 "$WORK/elsewhere"
start_server away -s 16M -u "$WORK/elsewhere/disk.sock"
[[ $("$UZRAM" status -n -o name,socket) == "away $WORK/elsewhere/disk.sock" ]] ||
    fail "status does not show the --unix socket: $("$UZRAM" status -n -o name,socket)"
for given in "$WORK/elsewhere/disk.sock" "$(ctl_of away)"; do
    [[ $("$UZRAM" status -n -o name -u "$given") == away ]] || fail "status -u $given"
    [[ $("$UZRAM" attr -u "$given" away disksize) -eq $((16 << 20)) ]] || fail "attr -u $given"
done
(cd "$WORK/elsewhere" && [[ $("$UZRAM" status -n -o name -u disk.sock) == away ]]) || fail "status -u with a relative path"
(cd "$WORK" && [[ $("$UZRAM" attr -u elsewhere/disk.sock away disksize) -eq $((16 << 20)) ]]) ||
    fail "attr -u with a relative path"
"$UZRAM" attr -u "$WORK/elsewhere/disk.sock" other disksize 2>"$WORK/err" && fail "attr -u SOCKET with another device name"
grep -q "which serves away, not 'other'" "$WORK/err" || fail "attr -u, wrong name: $(cat "$WORK/err")"
# -u means the same to every subcommand (control_locate): hot-remove and detach take the
# server's socket too, and refuse a device it does not serve rather than ask it.
for command in hot-remove detach; do
    "$UZRAM" "$command" -u "$WORK/elsewhere/disk.sock" other 2>"$WORK/err" && fail "$command -u SOCKET with another device name"
    grep -q "which serves away, not 'other'" "$WORK/err" || fail "$command -u SOCKET, wrong name: $(cat "$WORK/err")"
done
[[ $("$UZRAM" status -n -o name -u "$WORK/elsewhere/disk.sock") == away ]] || fail "away is gone after hot-remove -u of another name"
# serve -u with a relative path: the server makes it absolute, so status shows where it is.
env -C "$WORK/elsewhere" "$UZRAM" serve -q -n rel -s 8M -u rel.sock >/dev/null 2>"$WORK/server-rel.err" &
SERVER_PID[rel]=$!
for _ in $(seq 100); do [[ -S $(ctl_of rel) ]] && break; sleep 0.1; done
[[ $("$UZRAM" status -n -o socket rel) == "$WORK/elsewhere/rel.sock" ]] || fail "a relative --unix is shown as given"
[[ $("$UZRAM" status -n -o name -u "$WORK/elsewhere/rel.sock") == rel ]] || fail "status -u of a relative --unix"
kill "${SERVER_PID[rel]}"; wait "${SERVER_PID[rel]}" || true; unset "SERVER_PID[rel]"
stop_server away
pass "status -u, attr -u, hot-remove -u and detach -u take serve -u's socket path (absolute or relative) or the control socket"

# --- the control socket beside the --unix socket, when the runtime directory is not private ---
mkdir -p -m 777 "$WORK/open-runtime/uzram"
chmod 777 "$WORK/open-runtime/uzram"
XDG_RUNTIME_DIR=$WORK/open-runtime "$UZRAM" serve -q -n beside -s 8M -u "$WORK/elsewhere/beside.sock" \
    >/dev/null 2>"$WORK/server-beside.err" &
SERVER_PID[beside]=$!
for _ in $(seq 100); do [[ -S $WORK/elsewhere/beside.ctl ]] && break; sleep 0.1; done
[[ -S $WORK/elsewhere/beside.ctl ]] || fail "no control socket beside: $(cat "$WORK/server-beside.err")"
[[ $("$UZRAM" status -n -o name -u "$WORK/elsewhere/beside.sock") == beside ]] || fail "status -u finds a control socket beside the NBD socket"
[[ $("$UZRAM" attr -u "$WORK/elsewhere/beside.sock" beside disksize) -eq $((8 << 20)) ]] || fail "attr -u beside"
kill "${SERVER_PID[beside]}"; wait "${SERVER_PID[beside]}" || true; unset "SERVER_PID[beside]"
pass "status -u and attr -u find a control socket put beside the NBD socket"
"$UZRAM" status -u "$WORK/elsewhere/nosuch.sock" 2>"$WORK/err" && fail "status -u of a missing socket"
grep -q "No such file" "$WORK/err" || fail "status -u missing: $(cat "$WORK/err")"
mkfifo "$WORK/elsewhere/pipe"
"$UZRAM" status -u "$WORK/elsewhere/pipe" 2>"$WORK/err" && fail "status -u of a pipe"
pass "status -u of what is not there, or not a socket: one line, exit 1"

# --- without XDG_RUNTIME_DIR (the case make run used to get wrong): a user's make run, serve,
# status and attr meet. Run as nobody, in a mount namespace of its own with a fresh /tmp, so
# that no other test's /tmp/uzram-UID is touched; the checks run inside and print what they
# saw, and why when they saw nothing. ---
inner=$(cat <<'EOF'
set -u
mount -t tmpfs -o size=64M,mode=1777 uzram-test /tmp || exit 3
as=(setpriv --reuid=65534 --regid=65534 --clear-groups env -u XDG_RUNTIME_DIR)
uzram=$1
UZRAM_RUN_SAMPLE_MIB=4 "${as[@]}" setsid ./scripts/run.sh >/tmp/run.out 2>&1 &
run=$!
for _ in $(seq 200); do grep -q "From another shell" /tmp/run.out && break; kill -0 $run 2>/dev/null || break; sleep 0.1; done
grep -q "From another shell" /tmp/run.out || echo "make run as nobody did not serve: $(tail -n 3 /tmp/run.out | tr '\n' ' ')"
"${as[@]}" "$uzram" serve -q -n second -s 8M >/dev/null 2>/tmp/second.err &
second=$!
for _ in $(seq 100); do "${as[@]}" "$uzram" status second >/dev/null 2>&1 && break; kill -0 $second 2>/dev/null || break; sleep 0.1; done
kill -0 $second 2>/dev/null || echo "serve as nobody ended: $(tr '\n' ' ' </tmp/second.err)"
echo "status: $("${as[@]}" "$uzram" status -n -o name,socket 2>&1 | tr '\n' ';')"
echo "attr: $("${as[@]}" "$uzram" attr uzram0 disksize 2>&1)"
uri=$(sed -n "s/^  nbdinfo '\(.*\)'$/\1/p" /tmp/run.out)
echo "nbdinfo: $uri $(nbdinfo --size "$uri" 2>&1)"
kill -INT -- -$run; kill $second
for _ in $(seq 100); do kill -0 $run 2>/dev/null || break; sleep 0.1; done
kill -0 $run 2>/dev/null && { kill -- -$run; echo "make run did not stop"; }
wait $second
EOF
)
# Whether user nobody can run this tree's make run: through the same commands as the check
# (setpriv keeps root's capabilities up to the program it starts, which may then open what
# nobody cannot; env, started by it, runs without them), with the reason when not.
cannot_run_as_nobody() {
    (cd "$REPO" && setpriv --reuid=65534 --regid=65534 --clear-groups env -u XDG_RUNTIME_DIR \
        sh -c 'test -r scripts/run.sh || { echo "cannot read scripts/run.sh"; exit 1; }
               "$1" --version >/dev/null' probe "$UZRAM") >"$WORK/probe.out" 2>&1 && return 1
    sed 's/^probe: [0-9]*: //' "$WORK/probe.out" | tr '\n' ' '
}
if [[ $(id -u) -ne 0 ]] || ! command -v setpriv >/dev/null || ! command -v unshare >/dev/null; then
    skip_check "make run without XDG_RUNTIME_DIR: needs root, setpriv and unshare (to be user nobody with a /tmp of its own)"
elif why=$(cannot_run_as_nobody); then
    skip_check "make run without XDG_RUNTIME_DIR: user nobody cannot run $UZRAM in $REPO: ${why:-no reason given}"
elif [[ $REPO == /tmp || $REPO == /tmp/* ]]; then
    skip_check "make run without XDG_RUNTIME_DIR: the tree is under /tmp, which this check hides behind a tmpfs of its own; run it from a tree elsewhere"
elif [[ $UZRAM != "$REPO/build/uzram" ]]; then
    skip_check "make run without XDG_RUNTIME_DIR: scripts/run.sh serves build/uzram, and this test was given $UZRAM"
else
    rc=0
    (cd "$REPO" && timeout 60 unshare -m --propagation private bash -c "$inner" inner "$UZRAM") >"$WORK/inner.out" 2>&1 || rc=$?
    if [[ $rc -eq 3 ]]; then
        skip_check "make run without XDG_RUNTIME_DIR: no tmpfs can be mounted in a new mount namespace here"
    else
        [[ $rc -ne 124 ]] || fail "the check as nobody did not end within 60 s; it printed: $(cat "$WORK/inner.out")"
        # What the runtime directory rule gives a user without XDG_RUNTIME_DIR (uzram(1)).
        want=/tmp/uzram-65534
        [[ -d /run/user/65534 && $(stat -c %u /run/user/65534) -eq 65534 ]] && want=/run/user/65534/uzram
        grep -qx "status: second $want/second.sock;uzram0 $want/uzram0.sock;" "$WORK/inner.out" ||
            fail "a user's make run, serve and status without XDG_RUNTIME_DIR: $(cat "$WORK/inner.out")"
        grep -qx "attr: $((1 << 30))" "$WORK/inner.out" || fail "attr without XDG_RUNTIME_DIR: $(cat "$WORK/inner.out")"
        grep -qx "nbdinfo: nbd+unix:///uzram0?socket=$want/uzram0.sock $((1 << 30))" "$WORK/inner.out" ||
            fail "make run's nbdinfo line: $(cat "$WORK/inner.out")"
        grep -q "did not stop" "$WORK/inner.out" && fail "make run did not stop on Ctrl-C (SIGINT)"
        [[ $rc -eq 0 ]] || fail "the check as nobody ended with status $rc: $(cat "$WORK/inner.out")"
        pass "without XDG_RUNTIME_DIR, a user's make run, serve, status and attr meet in $want"
    fi
fi

echo "PASS: runtime.sh"
