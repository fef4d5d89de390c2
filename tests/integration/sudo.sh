#!/usr/bin/env bash
# sudo.sh - integration test: what a new user meets between their own server and sudo (issue
# 28): `uzram status` with no server says where it looked (exit 0, like zramctl); root under
# sudo (SUDO_UID, no XDG_RUNTIME_DIR) finds the server of the user who ran sudo in that
# user's runtime directory (status, attr, attach), and without SUDO_UID says it looked in
# /run/uzram; attach to a server that is not root says that the server needs the privilege,
# naming its user, instead of "cannot open /dev/loop-control".
# Skips and fails as tests/integration/lib.bash says (exit 0/1/77).
set -euo pipefail

. "$(dirname "$0")/lib.bash"
lib_init

# --- no server: exit 0, and a line on stderr naming the directory ---
"$UZRAM" status >"$WORK/out" 2>"$WORK/err" || fail "status with no server failed: $(cat "$WORK/err")"
[[ ! -s $WORK/out ]] || fail "status with no server printed a table: $(cat "$WORK/out")"
grep -qx "uzram: no device is running (no server in $XDG_RUNTIME_DIR/uzram)" "$WORK/err" ||
    fail "status with no server: '$(cat "$WORK/err")'"
"$UZRAM" status --json >"$WORK/out" 2>"$WORK/err" || fail "status --json with no server failed"
[[ ! -s $WORK/err ]] || fail "status --json with no server wrote to stderr: $(cat "$WORK/err")"
pass "status with no server: exit 0, 'no device is running (no server in DIR)' on stderr"

# --- root under sudo: the invoking user's server (as nobody, in a mount namespace with its
# own /run/user so that the machine's is left alone) ---
if [[ $(id -u) -ne 0 ]] || ! command -v unshare >/dev/null || ! command -v setpriv >/dev/null; then
    skip_check "root under sudo: needs root, unshare and setpriv"
    echo "PASS: sudo.sh"
    exit 0
fi
nobody=$(id -u nobody)
cat >"$WORK/inside.sh" <<EOF
set -u
mount -t tmpfs -o mode=755 tmpfs /run/user
mkdir -m 700 /run/user/$nobody && chown nobody /run/user/$nobody
env -u XDG_RUNTIME_DIR setpriv --reuid=$nobody --regid=$(id -g nobody) --clear-groups \
    "$UZRAM" serve -q -s 16M -n theirs 2>"$WORK/server.err" &
for _ in \$(seq 100); do [ -S /run/user/$nobody/uzram/theirs.ctl ] && break; sleep 0.1; done
as_root() { env -u XDG_RUNTIME_DIR -u SUDO_UID "\$@"; }
under_sudo() { env -u XDG_RUNTIME_DIR SUDO_UID=$nobody "\$@"; }
as_root "$UZRAM" attach theirs >"$WORK/root-attach.out" 2>&1; echo "root attach \$?"
under_sudo "$UZRAM" status -n -o name,disksize >"$WORK/sudo-status.out" 2>&1; echo "sudo status \$?"
under_sudo "$UZRAM" attr theirs disksize >"$WORK/sudo-attr.out" 2>&1; echo "sudo attr \$?"
under_sudo "$UZRAM" attach --via loop theirs >"$WORK/sudo-attach.out" 2>&1; echo "sudo attach \$?"
under_sudo "$UZRAM" attach --via loop nosuch >"$WORK/sudo-nosuch.out" 2>&1; echo "sudo nosuch \$?"
kill %1
wait
EOF
unshare -m bash "$WORK/inside.sh" >"$WORK/codes" 2>&1 || fail "the namespace script failed: $(cat "$WORK/codes")"
expect_code() { grep -qx "$1 $2" "$WORK/codes" || fail "$1: exit status not $2 ($(cat "$WORK/codes")): $(cat "$WORK/$3")"; }
expect_code "root attach" 1 root-attach.out
grep -q "no device theirs is running (no server in /run/uzram serves it)" "$WORK/root-attach.out" ||
    fail "root without sudo: $(cat "$WORK/root-attach.out")"
expect_code "sudo status" 0 sudo-status.out
grep -qx "theirs *16M" "$WORK/sudo-status.out" || fail "status under sudo: $(cat "$WORK/sudo-status.out")"
expect_code "sudo attr" 0 sudo-attr.out
[[ $(cat "$WORK/sudo-attr.out") == $((16 * MiB)) ]] || fail "attr under sudo: $(cat "$WORK/sudo-attr.out")"
pass "root under sudo finds the invoking user's server (status, attr); plain root looks in /run/uzram and says so"
expect_code "sudo attach" 1 sudo-attach.out
grep -qx "uzram: cannot attach theirs: the server of theirs runs as nobody (uid $nobody) without CAP_SYS_ADMIN, and it is the server that attaches (its FUSE file and a loop device, or nbd-client): stop it and start it as root (sudo uzram serve ...), then attach as root (sudo uzram attach theirs)" \
    "$WORK/sudo-attach.out" || fail "attach to a server that is not root: $(cat "$WORK/sudo-attach.out")"
expect_code "sudo nosuch" 1 sudo-nosuch.out
grep -q "no server in /run/uzram serves it).*nor does any server in /run/user/$nobody/uzram (the runtime directory of the user who ran sudo)" \
    "$WORK/sudo-nosuch.out" || fail "a device nobody serves, under sudo: $(cat "$WORK/sudo-nosuch.out")"
pass "attach to a server that is not root names the server's user and says to start it as root"

echo "PASS: sudo.sh"
