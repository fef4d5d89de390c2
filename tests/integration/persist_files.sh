#!/usr/bin/env bash
# persist_files.sh - `serve --persist=PATH` takes only a state file that is the server's user's
# alone (issue 39), the backing store's rule: a file another user made first in a directory
# anybody can write (/dev/shm), empty or holding a state of that user's own server, is refused
# with who owns it and what to do, and left exactly as it was (the other user can neither read
# the server's data through it nor have the server take over its own); so is the server's own
# file with a mode that lets others in, or with a second hard link, or a symbolic link. A new
# state in a sticky directory anybody can write is made by the server's user, mode 0600, one
# link. Runs as root, the other user being nobody (setpriv).
# Skips and fails as tests/integration/lib.bash says (exit 0/1/77).
set -euo pipefail

. "$(dirname "$0")/lib.bash"
need_tools nbdcopy setpriv cmp
[[ $(id -u) -eq 0 ]] || skip "planting a file as another user needs root"
id nobody >/dev/null 2>&1 || skip "no user nobody"
[[ -d /dev/shm && $(stat -f -c %T /dev/shm) == tmpfs ]] || skip "/dev/shm is not tmpfs"
lib_init

NOBODY_GROUP=$(id -gn nobody)
as_nobody() { setpriv --reuid=nobody --regid="$NOBODY_GROUP" --clear-groups "$@"; }
# A directory anybody may write, sticky, as /dev/shm and /tmp are.
SHARED=/dev/shm/uzram-persist-files-$$
mkdir -m 1777 "$SHARED"
at_exit 'rm -rf "$SHARED"'

# refused WHAT PATH EXPECTED: `uzram serve --persist=PATH` exits at once saying EXPECTED.
refused() {
    local what=$1 path=$2 expected=$3
    if timeout 20 "$UZRAM" serve -n pf -s 64M --persist="$path" >"$WORK/refused.out" 2>"$WORK/refused.err"; then
        fail "$what: serve started"
    fi
    grep -qF -- "$expected" "$WORK/refused.err" ||
        fail "$what: said '$(cat "$WORK/refused.err")', not '$expected'"
}
# snapshot PATH: owner, group, mode, links, size, blocks and the first 64 KiB's checksum
# (the header, where a takeover writes its pid first).
snapshot() {
    stat -c '%U %G %a %h %s %b' "$1"
    head -c 65536 "$1" | cksum
}

# --- nobody's empty file: refused, still nobody's and empty ---
as_nobody touch "$SHARED/empty.state"
before=$(snapshot "$SHARED/empty.state")
refused "nobody's empty file" "$SHARED/empty.state" \
    "--persist '$SHARED/empty.state': it belongs to user nobody, not root: the state must be the server's own file"
[[ $(snapshot "$SHARED/empty.state") == "$before" ]] ||
    fail "nobody's empty file changed: $before -> $(snapshot "$SHARED/empty.state")"
pass "a file another user made first is refused, naming its owner ($(cat "$WORK/refused.err")), and left as it was"

# --- nobody's own state, with its own data: refused, nothing of it taken over ---
if as_nobody test -x "$UZRAM"; then
    NOBODY_RUN=$SHARED/nobody-run
    as_nobody mkdir -m 700 "$NOBODY_RUN"
    # (not through the function: $! must be the server's pid)
    setpriv --reuid=nobody --regid="$NOBODY_GROUP" --clear-groups env XDG_RUNTIME_DIR="$NOBODY_RUN" \
        "$UZRAM" serve -n pn -s 64M \
        --persist="$SHARED/planted.state" >"$WORK/server-pn.out" 2>"$WORK/server-pn.err" &
    planter=$!
    SERVER_PID[pn]=$planter
    for _ in $(seq 100); do
        [[ -S $NOBODY_RUN/uzram/pn.sock ]] && break
        kill -0 "$planter" 2>/dev/null || fail "nobody's server did not start: $(cat "$WORK/server-pn.err")"
        sleep 0.1
    done
    { printf 'PLANTED BY NOBODY'; head -c $((4096 - 17)) /dev/zero; } >"$WORK/planted"
    nbdcopy "$WORK/planted" "nbd+unix:///?socket=$NOBODY_RUN/uzram/pn.sock" || fail "writing nobody's page"
    kill -TERM "$planter"
    rc=0
    wait "$planter" || rc=$?
    [[ $rc -eq 0 ]] || fail "nobody's server did not stop cleanly ($rc): $(cat "$WORK/server-pn.err")"
    unset 'SERVER_PID[pn]'
    [[ $(stat -c %U "$SHARED/planted.state") == nobody ]] || fail "nobody's state is not nobody's"
    before=$(snapshot "$SHARED/planted.state")
    refused "nobody's state" "$SHARED/planted.state" "it belongs to user nobody, not root"
    [[ $(snapshot "$SHARED/planted.state") == "$before" ]] ||
        fail "nobody's state changed: $before -> $(snapshot "$SHARED/planted.state")"
    pass "another user's state, holding its own device, is refused and left as it was (not taken over)"
else
    skip_check "nobody cannot run $UZRAM here: the check of another user's state holding a device"
fi

# --- the server's own file, open to others: refused, left as it was ---
(umask 022 && : >"$SHARED/open.state")
refused "a 0644 file" "$SHARED/open.state" \
    "its mode 0644 lets other users in, and the state holds the device's data: chmod 600 $SHARED/open.state"
[[ $(stat -c '%a %s' "$SHARED/open.state") == "644 0" ]] || fail "the 0644 file changed: $(stat -c '%a %s' "$SHARED/open.state")"
# a state the server made, whose mode was widened since: not taken over
start_server pg -s 64M --persist="$SHARED/group.state"
stop_server pg
chmod 640 "$SHARED/group.state"
before=$(snapshot "$SHARED/group.state")
refused "a state of mode 0640" "$SHARED/group.state" "its mode 0640 lets other users in"
[[ $(snapshot "$SHARED/group.state") == "$before" ]] || fail "the 0640 state changed"
pass "a file with group or other permission bits is refused with its mode and what to do, and left as it was"

# --- a second hard link, a symbolic link ---
(umask 077 && : >"$SHARED/linked.state")
ln "$SHARED/linked.state" "$SHARED/other-name"
refused "a file with two hard links" "$SHARED/linked.state" \
    "it has 2 hard links, and any other name of it reaches the device's data"
[[ $(stat -c '%h %s' "$SHARED/linked.state") == "2 0" ]] || fail "the linked file changed"
as_nobody ln -s "$SHARED/linked.state" "$SHARED/symlink.state"
refused "a symbolic link" "$SHARED/symlink.state" "cannot open --persist '$SHARED/symlink.state'"
pass "a hard-linked file and a symbolic link are refused"

# --- a new state in a sticky directory anybody can write: the server's, 0600, one link ---
start_server pn2 -s 64M --persist="$SHARED/new.state"
[[ $(stat -c '%U %a %h' "$SHARED/new.state") == "root 600 1" ]] ||
    fail "the new state is $(stat -c '%U %a %h' "$SHARED/new.state"), not root 600 1"
stop_server pn2
start_server pn2 -s 64M --persist="$SHARED/new.state"
stop_server pn2
pass "a new state in a sticky directory anybody can write is made root's, mode 0600, one link, and taken over again"
