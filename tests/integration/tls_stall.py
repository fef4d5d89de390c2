#!/usr/bin/python3
# tls_stall.py - raw TLS clients (Python ssl over memory BIOs, so the test decides which bytes
# go out) that stall `uzram serve --tls`: MODE handshake sends half a ClientHello; record
# sends half of the TLS record that carries a READ request; noread sends 32 READs of 32 MiB
# and takes no reply for SECONDS. Prints how long the server took to close the connection
# (handshake, record) or how many bytes came before it did (noread).
# Usage: tls_stall.py MODE SOCKET CA_CERT [SECONDS]
import socket, ssl, struct, sys, time
mode, path, ca = sys.argv[1:4]
MAGIC = 0x49484156454F5054
s = socket.socket(socket.AF_UNIX)
s.settimeout(30)
s.connect(path)
def read(n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        assert c, "server closed"
        b += c
    return b
read(18)
s.sendall(struct.pack(">I", 3))
s.sendall(struct.pack(">QII", MAGIC, 5, 0))
_, opt, rtype, length = struct.unpack(">QIII", read(20))
assert opt == 5 and rtype == 1, hex(rtype)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.load_verify_locations(ca)
incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
tls = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
if mode == "handshake":
    # Half a ClientHello, then nothing: the server must give up at its deadline.
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    hello = outgoing.read()
    s.sendall(hello[: len(hello) // 2])
    start = time.monotonic()
    s.settimeout(60)
    try:
        while s.recv(4096):
            pass
    except ConnectionResetError:
        pass
    print("%.1f" % (time.monotonic() - start))
    sys.exit(0)
# A whole TLS handshake through the memory BIOs.
while True:
    try:
        tls.do_handshake()
        break
    except ssl.SSLWantReadError:
        out = outgoing.read()
        if out:
            s.sendall(out)
        data = s.recv(65536)
        assert data, "server closed in the TLS handshake"
        incoming.write(data)
out = outgoing.read()
if out:
    s.sendall(out)
def tls_send(data):
    tls.write(data)
    s.sendall(outgoing.read())
def tls_read(n):
    b = b""
    while len(b) < n:
        try:
            b += tls.read(n - len(b))
        except ssl.SSLWantReadError:
            data = s.recv(65536)
            assert data, "server closed"
            incoming.write(data)
    return b
# GO inside TLS, then transmission.
tls_send(struct.pack(">QII", MAGIC, 7, 6) + struct.pack(">IH", 0, 0))
while True:
    _, opt, rtype, length = struct.unpack(">QIII", tls_read(20))
    tls_read(length)
    assert rtype < 0x80000000, hex(rtype)
    if rtype == 1:
        break
if mode == "record":
    # One READ request in a record of which only half is sent, then nothing: the server
    # must drop the connection at its request deadline, as for a plain half request.
    tls.write(struct.pack(">IHHQQI", 0x25609513, 0, 0, 1, 0, 4096))
    record = outgoing.read()
    s.sendall(record[: len(record) // 2])
    start = time.monotonic()
    print("stalled", flush=True)
    s.settimeout(60)
    try:
        while s.recv(4096):
            pass
    except ConnectionResetError:
        pass
    print("%.1f" % (time.monotonic() - start))
elif mode == "noread":
    # 32 READs of 32 MiB, replies never read: the server must drop us at its reply deadline.
    for i in range(32):
        tls.write(struct.pack(">IHHQQI", 0x25609513, 0, 0, i, 0, 32 << 20))
    s.sendall(outgoing.read())
    start = time.monotonic()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    time.sleep(float(sys.argv[4]))
    # Now read: the server must have given up, so the stream ends well before 1 GiB.
    got = 0
    s.settimeout(30)
    try:
        while True:
            c = s.recv(1 << 20)
            if not c:
                break
            got += len(c)
    except (ConnectionResetError, socket.timeout):
        pass
    print("got %d bytes" % got)
