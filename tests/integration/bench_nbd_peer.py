#!/usr/bin/env python3
"""bench_nbd_peer.py - a misbehaving NBD server for bench-nbd.sh: listens on a Unix socket and
answers one `uzram bench nbd` connection the way SCENARIO says, so that each way a server can
go wrong is seen to end in a clear error, never a hang or a crash.

Usage: bench_nbd_peer.py SOCKET SCENARIO
  garbage    a greeting that is not NBD
  cut        half a greeting, then close
  refuse     NBD_OPT_GO answered with NBD_REP_ERR_POLICY and a message
  short      a good handshake, then half a reply to the first request and close
  handle     a good handshake, then a reply with a handle no request had
  error      a good handshake, then EIO for the first request
  trickle    a good handshake, then one byte of a read reply every 0.5 s
"""
import os
import socket
import struct
import sys
import time

NBD_MAGIC = 0x4E42444D41474943
OPT_MAGIC = 0x49484156454F5054
REP_MAGIC = 0x0003E889045565A9
REQUEST_MAGIC = 0x25609513
SIMPLE_REPLY_MAGIC = 0x67446698
OPT_GO = 7
REP_ACK, REP_INFO = 1, 3
REP_ERR_POLICY = (1 << 31) | 2
SIZE = 1 << 20


def read_exact(conn, n):
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def handshake(conn, refuse=False):
    conn.sendall(struct.pack(">QQH", NBD_MAGIC, OPT_MAGIC, 3))
    read_exact(conn, 4)
    _, option, length = struct.unpack(">QII", read_exact(conn, 16))
    read_exact(conn, length)
    if refuse:
        message = b"not for you"
        conn.sendall(struct.pack(">QIII", REP_MAGIC, option, REP_ERR_POLICY, len(message)) + message)
        return False
    info = struct.pack(">HQH", 0, SIZE, 1)
    conn.sendall(struct.pack(">QIII", REP_MAGIC, OPT_GO, REP_INFO, len(info)) + info)
    conn.sendall(struct.pack(">QIII", REP_MAGIC, OPT_GO, REP_ACK, 0))
    return True


def first_request(conn):
    magic, _, _, cookie, _, _ = struct.unpack(">IHHQQI", read_exact(conn, 28))
    assert magic == REQUEST_MAGIC
    return cookie


def serve(conn, scenario):
    if scenario == "garbage":
        conn.sendall(b"HELLO, this is not NBD at all\r\n")
        time.sleep(5)
        return
    if scenario == "cut":
        conn.sendall(struct.pack(">Q", NBD_MAGIC))
        return
    if not handshake(conn, refuse=scenario == "refuse"):
        time.sleep(5)
        return
    cookie = first_request(conn)
    if scenario == "short":
        conn.sendall(struct.pack(">II", SIMPLE_REPLY_MAGIC, 0))
    elif scenario == "handle":
        conn.sendall(struct.pack(">IIQ", SIMPLE_REPLY_MAGIC, 0, cookie ^ 0xFFFF0000))
        time.sleep(5)
    elif scenario == "error":
        conn.sendall(struct.pack(">IIQ", SIMPLE_REPLY_MAGIC, 5, cookie))
        time.sleep(5)
    elif scenario == "trickle":
        reply = struct.pack(">IIQ", SIMPLE_REPLY_MAGIC, 0, cookie) + bytes(4096)
        for byte in reply:
            conn.sendall(bytes([byte]))
            time.sleep(0.5)


def main():
    path, scenario = sys.argv[1], sys.argv[2]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    conn, _ = listener.accept()
    try:
        serve(conn, scenario)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass
    conn.close()
    listener.close()
    os.unlink(path)


if __name__ == "__main__":
    main()
