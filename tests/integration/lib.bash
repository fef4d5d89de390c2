# lib.bash - helpers shared by the integration tests (sourced, not run): start and stop real
# `uzram serve` processes, bounded waits, and an EXIT trap that cleans up even after a failure.
#
# (Named .bash so that scripts/check.sh, which runs every tests/integration/*.sh, skips it.)
# A test sources this after `set -euo pipefail`, then calls lib_init. Conventions: exit 0 pass,
# 77 skip (with a printed reason), 1 fail (with a message naming the failed check); a check
# that cannot run while the others can is announced with skip_check. A missing uzram binary
# is a failure (lib_init), never a skip.

UZRAM=${UZRAM:-build/uzram}
PY=/usr/bin/python3 # the Debian python that has the libnbd `nbd` module
TEST_NAME=$(basename "$0" .sh)
MiB=$((1024 * 1024))

WORK=
CLEANUP_HOOKS=()  # commands run (last first) by the EXIT trap, e.g. umount, losetup -d
declare -A SERVER_PID=()

skip() {
    echo "SKIP: $*"
    exit 77
}

# skip_check REASON: one check of this test cannot run here; the rest goes on. scripts/check.sh
# collects these lines from the log and lists them in its summary, so that a check that did
# not run is never reported as passed without a word.
skip_check() { echo "SKIPPED CHECK: $*"; }

# Print every server's stderr so a failure shows what the server said about it.
dump_server_logs() {
    local f
    [[ -n $WORK && -d $WORK ]] || return 0
    for f in "$WORK"/server-*.err; do
        [[ -s $f ]] || continue
        echo "--- $(basename "$f") (last 30 lines)" >&2
        tail -n 30 "$f" | sed 's/^/  server: /' >&2
    done
}

fail() {
    echo "FAIL: $TEST_NAME: $*" >&2
    dump_server_logs
    exit 1
}

# Each check's line ends with the seconds since the one before (or the start): where a test's
# time goes, for keeping make check within its budget.
pass() {
    echo "ok - $* [$((SECONDS - ${PASS_MARK:-0})) s]"
    PASS_MARK=$SECONDS
}

need_tools() {
    local tool
    for tool; do
        command -v "$tool" >/dev/null || skip "$tool is not installed"
    done
}

need_python_nbd() {
    [[ -x $PY ]] && $PY -c 'import nbd' 2>/dev/null ||
        skip "$PY with the nbd module (python3-libnbd) is missing"
}

# Register a cleanup command; hooks run in reverse order of registration.
at_exit() { CLEANUP_HOOKS+=("$*"); }

lib_cleanup() {
    local status=$? i name pid
    set +e
    for ((i = ${#CLEANUP_HOOKS[@]} - 1; i >= 0; i--)); do
        eval "${CLEANUP_HOOKS[i]}" >/dev/null 2>&1
    done
    for name in "${!SERVER_PID[@]}"; do
        pid=${SERVER_PID[$name]}
        kill -TERM "$pid" 2>/dev/null || continue
        # Bounded: a server that ignores SIGTERM for 10 s gets SIGKILL.
        for _ in $(seq 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    [[ ${UZRAM_KEEP_LOG:-0} == 1 ]] && dump_server_logs
    [[ -n $WORK ]] && rm -rf "$WORK"
    exit "$status"
}

lib_init() {
    [[ -x $UZRAM ]] || fail "no uzram binary at $UZRAM (build it or set UZRAM)"
    UZRAM=$(realpath "$UZRAM")
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/uzram-$TEST_NAME.XXXXXX")
    trap lib_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    export XDG_RUNTIME_DIR=$WORK/run
    mkdir -m 700 "$XDG_RUNTIME_DIR"
}

sock_of() { echo "$XDG_RUNTIME_DIR/uzram/$1.sock"; }
ctl_of() { echo "$XDG_RUNTIME_DIR/uzram/$1.ctl"; }
uri_of() { echo "nbd+unix:///?socket=$(sock_of "$1")"; }

# start_server NAME [serve options...]: start `uzram serve -n NAME ...` in the background and
# wait (at most 10 s) until its NBD socket (the default one, or the one given with --unix) and
# its control socket exist.
start_server() {
    local name=$1
    shift
    local sock ctl pid arg previous=
    sock=$(sock_of "$name")
    ctl=$(ctl_of "$name")
    for arg; do
        [[ $previous == --unix || $previous == -u ]] && sock=$arg
        previous=$arg
    done
    # SERVER_OWN_SESSION=1 (tests/vm/swap.sh): the server in a session of its own, so that a
    # deadline's signal to the scenario's process group does not stop a server whose device is
    # still swap; the scenario's cleanup turns swap off first, then stops it.
    ${SERVER_OWN_SESSION:+setsid} "$UZRAM" serve -n "$name" "$@" >"$WORK/server-$name.out" \
        2>"$WORK/server-$name.err" &
    pid=$!
    SERVER_PID[$name]=$pid
    for _ in $(seq 100); do
        [[ -S $sock && -S $ctl ]] && return 0
        if ! kill -0 "$pid" 2>/dev/null; then
            unset "SERVER_PID[$name]"
            fail "server $name ($*) exited at startup: $(cat "$WORK/server-$name.err")"
        fi
        sleep 0.1
    done
    fail "server $name: socket $sock did not appear within 10 s"
}

server_alive() { kill -0 "${SERVER_PID[$1]}" 2>/dev/null; }

# stop_server NAME: SIGTERM, wait at most 20 s; fails the test unless it exits 0 and removes
# both socket files.
stop_server() {
    local name=$1 pid rc=0
    pid=${SERVER_PID[$name]}
    kill -TERM "$pid" 2>/dev/null || fail "server $name was already gone before SIGTERM"
    for _ in $(seq 200); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && fail "server $name still running 20 s after SIGTERM"
    wait "$pid" || rc=$?
    unset "SERVER_PID[$name]"
    [[ $rc -eq 0 ]] || fail "server $name exited with status $rc after SIGTERM"
    [[ ! -e $(sock_of "$name") ]] || fail "server $name left its NBD socket behind"
    [[ ! -e $(ctl_of "$name") ]] || fail "server $name left its control socket behind"
    check_server_log "$name"
}

# Sanitizer reports in a server's log fail the test (useful when UZRAM is an ASan build).
check_server_log() {
    if grep -q 'ERROR: \(Address\|Leak\|Thread\)Sanitizer\|WARNING: ThreadSanitizer\|runtime error:' \
        "$WORK/server-$1.err" 2>/dev/null; then
        fail "sanitizer report in the log of server $1"
    fi
}

# mm_stat_field NAME INDEX: one field of mm_stat (0 orig_data_size, 1 compr_data_size, ...).
mm_stat_field() {
    local fields
    read -r -a fields <<<"$("$UZRAM" attr "$1" mm_stat)"
    echo "${fields[$2]}"
}

# stat_json_field NAME KEY: one value from the device's stat_json attribute.
stat_json_field() {
    "$UZRAM" attr "$1" stat_json | $PY -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$2"
}
