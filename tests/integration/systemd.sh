#!/usr/bin/env bash
# systemd.sh - integration test of what uzram@.service relies on, without systemd: a fake
# service manager's NOTIFY_SOCKET (a path, and a name in the abstract namespace) gets READY=1
# only once the NBD and control sockets accept connections, and STOPPING=1 on SIGTERM.
# Skips and fails as tests/integration/lib.bash says (exit 0/1/77).
set -euo pipefail

. "$(dirname "$0")/lib.bash"
need_tools nbdinfo
lib_init

# notify_check NAME ADDRESS: serve NAME with NOTIFY_SOCKET=ADDRESS (a path, or @name) as a
# service manager would, and check the order of what the server says.
notify_check() {
    $PY - "$UZRAM" "$1" "$2" "$XDG_RUNTIME_DIR/uzram" "$WORK" <<'EOF'
import os, signal, socket, subprocess, sys
uzram, name, address, rundir, work = sys.argv[1:]
manager = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
manager.bind("\0" + address[1:] if address.startswith("@") else address)
manager.settimeout(10)
with open(f"{work}/server-{name}.err", "w") as err:
    server = subprocess.Popen([uzram, "serve", "-n", name, "-s", "16M"], stdout=subprocess.DEVNULL,
                              stderr=err, env=dict(os.environ, NOTIFY_SOCKET=address))
try:
    message = manager.recv(4096).decode()
    # READY=1 promises listening sockets: connecting must work at once, with no retry.
    for suffix in ("sock", "ctl"):
        probe = socket.socket(socket.AF_UNIX)
        probe.connect(f"{rundir}/{name}.{suffix}")
        probe.close()
    lines = message.split("\n")
    assert "READY=1" in lines, message
    assert f"STATUS=serving {name}" in lines, message
    subprocess.run(["nbdinfo", "--size", f"nbd+unix:///?socket={rundir}/{name}.sock"], check=True,
                   stdout=subprocess.DEVNULL)
    server.send_signal(signal.SIGTERM)
    message = manager.recv(4096).decode()
    assert "STOPPING=1" in message.split("\n"), message
    assert server.wait(timeout=20) == 0, "exit status"
finally:
    if server.poll() is None:
        server.kill()
        server.wait()
EOF
}

notify_check pathnotify "$WORK/notify.sock" || fail "sd_notify over a path socket"
pass "NOTIFY_SOCKET path: READY=1 (and STATUS) once the sockets accept, STOPPING=1 on SIGTERM, exit 0"
notify_check abstractnotify "@uzram-test-notify-$$" || fail "sd_notify over an abstract socket"
pass "NOTIFY_SOCKET @abstract: the same"

# Without NOTIFY_SOCKET (Type=simple, or no service manager) nothing changes.
start_server plain -s 16M
nbdinfo --size "$(uri_of plain)" >/dev/null || fail "serving without NOTIFY_SOCKET"
stop_server plain
pass "without NOTIFY_SOCKET the server runs as before"

echo "PASS: systemd.sh"
