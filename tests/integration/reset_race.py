#!/usr/bin/python3
# reset_race.py - clients that connect, write a page and read it back on the same connection
# while other threads send `set reset 1` to the control socket as fast as they can. A reset may
# come before a client chooses the export or after it has gone, never while it is connected:
# every acknowledged write must read back as written. Used by users.sh.
#
# usage: reset_race.py NBD_SOCKET CTL_SOCKET SECONDS
# Prints "connections N resets-accepted N resets-refused N" and exits 1 on any lost write.
import os
import socket
import sys
import threading
import time

import nbd

sock, ctl, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
CLIENTS, RESETTERS = 6, 3
stop = time.monotonic() + seconds
lock = threading.Lock()
counts = {"connections": 0, "accepted": 0, "refused": 0}
errors = []


def client(number):
    offset = number * 4096
    serial = 0
    while time.monotonic() < stop and not errors:
        serial += 1
        page = (b"%02d:%08d:" % (number, serial)) * (4096 // 12) + b"\0" * (4096 % 12)
        h = nbd.NBD()
        try:
            h.connect_unix(sock)
            h.pwrite(page, offset)
            back = h.pread(4096, offset)
            h.shutdown()
        except nbd.Error as e:
            errors.append("client %d: %s" % (number, e))
            return
        if back != page:
            what = "zeros" if back == bytes(4096) else "other bytes"
            errors.append("client %d: an acknowledged write read back as %s on the same "
                          "connection (connection %d)" % (number, what, serial))
            return
        with lock:
            counts["connections"] += 1


def resetter():
    while time.monotonic() < stop and not errors:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(ctl)
        s.sendall(b"set reset 1\n")
        reply = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
        s.close()
        with lock:
            if reply.startswith(b"ok\n"):
                counts["accepted"] += 1
            elif reply.startswith(b"error EBUSY"):
                counts["refused"] += 1
            else:
                errors.append("reset reply: %r" % reply)


threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
threads += [threading.Thread(target=resetter) for _ in range(RESETTERS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("connections %d resets-accepted %d resets-refused %d" %
      (counts["connections"], counts["accepted"], counts["refused"]))
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
