#!/usr/bin/python3
# starttls_relay.py - lets a plain TLS client (gnutls-cli, with a priority string of the test's
# choosing) talk TLS to `uzram serve`, which speaks TLS only after NBD's STARTTLS: for each
# connection on 127.0.0.1:PORT it connects to the server's Unix socket, does the NBD handshake
# up to the acknowledged NBD_OPT_STARTTLS, then relays bytes both ways, so that the TLS
# handshake that follows is the client's own. Prints the port, then serves until killed.
# Usage: starttls_relay.py NBD_SOCKET
import select
import socket
import struct
import sys
import threading

MAGIC = 0x49484156454F5054  # IHAVEOPT
NBD_OPT_STARTTLS = 5
NBD_REP_ACK = 1


def read(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise EOFError("server closed")
        b += c
    return b


def starttls(path):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(path)
    read(s, 18)  # NBDMAGIC, IHAVEOPT, handshake flags
    s.sendall(struct.pack(">I", 3))  # FIXED_NEWSTYLE | NO_ZEROES
    s.sendall(struct.pack(">QII", MAGIC, NBD_OPT_STARTTLS, 0))
    _, option, reply, length = struct.unpack(">QIII", read(s, 20))
    read(s, length)
    if option != NBD_OPT_STARTTLS or reply != NBD_REP_ACK:
        raise EOFError("STARTTLS refused: reply 0x%x" % reply)
    s.settimeout(None)
    return s


def relay(client, path):
    try:
        server = starttls(path)
    except (OSError, EOFError):
        client.close()
        return
    ends = {client: server, server: client}
    try:
        while True:
            ready, _, _ = select.select(list(ends), [], [], 60)
            if not ready:
                break
            for s in ready:
                data = s.recv(65536)
                if not data:
                    raise EOFError
                ends[s].sendall(data)
    except (OSError, EOFError):
        pass
    client.close()
    server.close()


listener = socket.socket(socket.AF_INET)
listener.bind(("127.0.0.1", 0))
listener.listen(8)
print(listener.getsockname()[1], flush=True)
while True:
    client, _ = listener.accept()
    threading.Thread(target=relay, args=(client, sys.argv[1]), daemon=True).start()
