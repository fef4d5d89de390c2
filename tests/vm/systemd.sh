#!/usr/bin/env bash
# systemd.sh - VM scenario of issue 29 under a real service manager: Debian's systemd (the
# host's /lib/systemd/systemd) as PID 1 of a new PID + mount namespace in the guest runs the
# project's uzram@.service exactly as `make install` writes it, for a device with
# `persist = yes`: its state is a memfd in systemd's file descriptor store (no PATH).
#
# The namespace's /usr/local is the `make install DESTDIR=` tree of this build (prefix
# /usr/local, sysconfdir /usr/local/etc: the unit in /usr/local/lib/systemd/system, where
# systemd looks); the host's unit folders and generators are hidden behind the few units a
# service's default dependencies need (sysinit, basic, sockets and shutdown targets, all
# empty) and journald, so nothing of the host's starts. On a ublk device attached from the
# unit's server, with 32 MiB of random data written through it and rounds of fio's verified
# random writes after them:
#   reload:  `systemctl reload` (ExecReload=uzram restart) under fio: the same pid, the same
#            disk (its diskseq), no restart counted, one copy of the state in the store
#   crash:   SIGKILL of the main pid under fio: Restart=on-failure starts a new one, which takes
#            the state from the store (its log says so; the pages are counted before any read)
#            and the same disk over; fio's rounds go on without an error
#   restart: `systemctl restart` (a stop, then a start): the store keeps the state across it
#            and the new server takes it over; the stop ends the attachment (uzram(1), RESTART
#            AND CRASHES), attached again the data read back
#   stop:    `systemctl stop`: PID 1 holds no state any more, the next start is empty;
#            hot-remove sends FDSTOREREMOVE=1 and PID 1 lets the state go
#   socket:  uzram@.socket starts the server for a client; SIGKILLed, the next one is handed
#            the socket and the state together (LISTEN_FDNAMES nbd:state-NAME) and takes the
#            device over
# Each step checks every byte of the 32 MiB (sha256 after O_DIRECT reads). The manager's own
# log goes to the guest's console (OUT/console.log), the unit's journal with a failure.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

vm_init
need_module ublk_drv
need_tools fio sha256sum nbdinfo
NAME=sd0
UNIT=uzram@$NAME.service
ROOT=$WORK/root
DATA=$WORK/data
BIN=/usr/local/bin/uzram # the installed program, in the namespace

# --- systemd as PID 1 of a new PID and mount namespace, the installed tree ---
systemd_namespace
ROOT=$SD_ROOT
printf '[%s]\nsize = 256M\npersist = yes\n' "$NAME" >"$ROOT/usr/local/etc/uzram/uzram.conf"
# A failure shows the unit's journal: lib.bash's fail prints $WORK/server-*.err.
eval "lib_$(declare -f fail)"
fail() {
    [[ -z ${SD_PID:-} ]] ||
        sd journalctl --no-pager -o short-monotonic -u "$UNIT" >"$WORK/server-$NAME.err" 2>&1 || true
    lib_fail "$@"
}
at_exit "sd systemctl stop uzram@$NAME.socket $UNIT"
pass "systemd $SD_VERSION is PID 1 of its namespace (pid $SD_PID here), uzram-vm.target reached"

show() { sd systemctl show -p "$1" --value "$UNIT"; }
# stored: how many descriptors of the state the manager (PID 1) holds.
stored() {
    local fd count=0
    for fd in /proc/"$SD_PID"/fd/*; do
        [[ $(readlink "$fd" 2>/dev/null) != "/memfd:uzram-state-$NAME (deleted)" ]] || count=$((count + 1))
    done
    echo "$count"
}
orig_size() { sd "$BIN" attr "$NAME" mm_stat | awk '{print $1}'; }
# The unit's log lines of process PID (as journald tagged them).
logged() { sd journalctl --no-pager -o cat _PID="$1" 2>/dev/null; }
attach() {
    DEV=$(sd "$BIN" attach --via ublk "$NAME") || fail "uzram attach --via ublk $NAME"
    [[ -b $DEV ]] || fail "attach printed '$DEV', not a block device"
}
diskseq() { cat "/sys/block/${DEV#/dev/}/diskseq"; }
check_data() { # STEP: the 32 MiB read back
    local sum
    sum=$(dd if="$DEV" bs=1M count=32 iflag=direct status=none | sha256sum | cut -d' ' -f1)
    [[ $sum == "$SUM" ]] || fail "$1: the 32 MiB written read back differently"
}
active() { [[ $(show ActiveState) == active && $(show StatusText) == serving* ]]; }

# Rounds of fio's verified random writes beyond the data (32-160 MiB) until $WORK/stop exists.
load_rounds() {
    local round=0
    while [[ ! -e $WORK/stop ]]; do
        round=$((round + 1))
        fio --name=v --filename="$DEV" --offset=32M --size=128M --io_size=4M --ioengine=libaio \
            --direct=1 --rw=randwrite --bsrange=4k-64k --iodepth=16 --verify=crc32c \
            --do_verify=1 --verify_fatal=1 --randseed=$((RANDOM + round)) \
            --output="$WORK/load.out" >/dev/null 2>&1 || return 1
        echo "$round" >"$WORK/load.rounds"
    done
}
start_load() {
    rm -f "$WORK/stop" "$WORK/load.rounds"
    load_rounds &
    LOAD_PID=$!
    wait_for 120 "a first fio round" test -s "$WORK/load.rounds"
}
stop_load() { # STEP
    touch "$WORK/stop"
    wait "$LOAD_PID" || fail "$1: a fio round failed: $(grep -m 5 -iE 'error|bad|verify|err=' "$WORK/load.out")"
}

# --- start, attach, write ---
sd systemctl start "$UNIT" || fail "systemctl start $UNIT"
pid=$(show MainPID)
(($(stored) == 1)) || fail "after the start PID 1 holds $(stored) copies of the state, not 1"
attach
head -c $((32 << 20)) /dev/urandom >"$DATA"
SUM=$(sha256sum <"$DATA" | cut -d' ' -f1)
dd if="$DATA" of="$DEV" bs=1M oflag=direct status=none || fail "writing $DEV"
check_data "after the write"
seq0=$(diskseq)
pass "$UNIT started (pid $pid), its state in the store (FDSTORE=1), $DEV attached, 32 MiB written and read back"

# --- reload: uzram restart in place, under fio ---
start_load
sd systemctl reload "$UNIT" || fail "systemctl reload $UNIT"
wait_for 30 "$UNIT active after the reload" active
sleep 2
stop_load "reload"
[[ $(show MainPID) == "$pid" ]] || fail "reload: the main pid changed from $pid to $(show MainPID)"
[[ $(diskseq) == "$seq0" ]] || fail "reload: $DEV is another disk now (diskseq $seq0 -> $(diskseq))"
[[ $(show NRestarts) == 0 ]] || fail "reload: NRestarts $(show NRestarts)"
(($(stored) == 1)) || fail "reload: PID 1 holds $(stored) copies of the state, not 1"
logged "$pid" | grep -q "took $DEV over from process $pid" || fail "reload: no 'took $DEV over' in the log"
check_data "after the reload"
pass "systemctl reload: pid $pid kept, $DEV the same disk, $(cat "$WORK/load.rounds") fio rounds verified, every byte back"

# --- crash: SIGKILL of the main pid, Restart=on-failure ---
start_load
sd kill -KILL "$pid"
another_pid() { [[ $(show MainPID) != @(0|$pid) ]]; }
wait_for 60 "a new main pid after the SIGKILL" another_pid
wait_for 60 "$UNIT active after the SIGKILL" active
new=$(show MainPID)
before_read=$(orig_size)
sleep 2
stop_load "crash"
[[ $(show NRestarts) == 1 ]] || fail "crash: NRestarts $(show NRestarts), not 1"
((before_read >= 32 << 20)) || fail "crash: the new server counts $before_read bytes stored, not the 32 MiB and more"
logged "$new" | grep -q "$NAME: taken over with its data" || fail "crash: the new server's log does not say it took the state over"
logged "$new" | grep -q "took $DEV over from process $pid" || fail "crash: no 'took $DEV over from process $pid' in the new server's log"
[[ $(diskseq) == "$seq0" ]] || fail "crash: $DEV is another disk now"
(($(stored) == 1)) || fail "crash: PID 1 holds $(stored) copies of the state, not 1"
check_data "after the SIGKILL"
pass "SIGKILL of pid $pid: Restart=on-failure started pid $new, which took the state from the store ($before_read bytes before any read) and $DEV over; $(cat "$WORK/load.rounds") fio rounds verified, every byte back"
pid=$new

# --- systemctl restart: stop, then start ---
sd systemctl restart "$UNIT" || fail "systemctl restart $UNIT"
new=$(show MainPID)
[[ $new != "$pid" ]] || fail "restart: the same main pid"
logged "$new" | grep -q "$NAME: taken over with its data" || fail "restart: the new server did not take the state over"
(($(orig_size) >= 32 << 20)) || fail "restart: the new server counts $(orig_size) bytes stored"
(($(stored) == 1)) || fail "restart: PID 1 holds $(stored) copies of the state, not 1"
[[ ! -e /sys/block/${DEV#/dev/} || $(diskseq) != "$seq0" ]] || fail "restart: $DEV stayed through the stop, which uzram(1) says ends it"
attach
check_data "after systemctl restart"
pass "systemctl restart: the state stayed in the store through the stop, pid $new took it over; the stop ended the attachment (as documented), attached again as $DEV: every byte back"
pid=$new

# --- stop: the store empties; hot-remove: FDSTOREREMOVE ---
sd systemctl stop "$UNIT" || fail "systemctl stop $UNIT"
[[ ! -e /sys/block/${DEV#/dev/} ]] || fail "stop: $DEV is still there"
(($(stored) == 0)) || fail "stop: PID 1 still holds $(stored) copies of the state"
sd systemctl start "$UNIT" || fail "systemctl start $UNIT after the stop"
new=$(show MainPID)
[[ $(orig_size) == 0 ]] || fail "start after stop: $(orig_size) bytes stored, not an empty device"
! logged "$new" | grep -q "taken over" || fail "start after stop: the server took a state over"
(($(stored) == 1)) || fail "start after stop: PID 1 holds $(stored) copies of the new state, not 1"
sd "$BIN" hot-remove "$NAME" >"$WORK/hot-remove.out" 2>&1 || fail "hot-remove $NAME: $(cat "$WORK/hot-remove.out")"
none_stored() { (($(stored) == 0)); }
wait_for 10 "PID 1 letting the state of $NAME go (FDSTOREREMOVE=1)" none_stored
sd systemctl stop "$UNIT" || fail "systemctl stop $UNIT"
pass "systemctl stop: PID 1 let the state go, the next start (pid $new) was empty; hot-remove: FDSTOREREMOVE=1, PID 1 let it go"

# --- socket activation and the store together: a crash hands back the socket and the state ---
SOCKET=uzram@$NAME.socket
URI="nbd+unix:///$NAME?socket=/run/uzram/$NAME.sock"
sd systemctl start "$SOCKET" || fail "systemctl start $SOCKET"
[[ $(show ActiveState) != active ]] || fail "socket: $UNIT runs before a client came"
sd nbdinfo --size "$URI" >"$WORK/nbdinfo.out" 2>&1 || fail "nbdinfo through $SOCKET: $(cat "$WORK/nbdinfo.out")"
wait_for 60 "$UNIT active after a client came to $SOCKET" active
pid=$(show MainPID)
logged "$pid" | grep -q "(1 socket from the service manager)" || fail "socket: the server did not serve the socket it was handed"
attach
dd if="$DATA" of="$DEV" bs=1M oflag=direct status=none || fail "writing $DEV"
seq0=$(diskseq)
sd kill -KILL "$pid"
wait_for 60 "a new main pid after the SIGKILL" another_pid
wait_for 60 "$UNIT active after the SIGKILL" active
new=$(show MainPID)
logged "$new" | grep -q "(1 socket from the service manager)" || fail "socket: the new server did not serve the socket it was handed"
logged "$new" | grep -q "$NAME: taken over with its data" || fail "socket: the new server did not take the state over"
[[ $(diskseq) == "$seq0" ]] || fail "socket: $DEV is another disk now"
check_data "after the SIGKILL of a socket-activated server"
sd nbdinfo --size "$URI" >"$WORK/nbdinfo.out" 2>&1 || fail "nbdinfo after the SIGKILL: $(cat "$WORK/nbdinfo.out")"
sd systemctl stop "$SOCKET" "$UNIT" || fail "systemctl stop $SOCKET $UNIT"
(($(stored) == 0)) || fail "socket: PID 1 still holds $(stored) copies of the state after the stop"
pass "$SOCKET: a client started pid $pid, SIGKILLed under ublk: pid $new got the socket and the state back (LISTEN_FDNAMES), took $DEV over, every byte back"
echo "PASS: systemd.sh"
