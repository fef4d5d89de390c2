#!/usr/bin/python3
# protocol.py - raw-socket NBD clients that drive `uzram serve` byte by byte: malformed and
# truncated handshakes and requests, edge-case errors, BLOCK_STATUS and structured reads.
#
# Run by protocol.sh: protocol.py SOCKET READ_ONLY_SOCKET SERVER_PID READ_ONLY_PID.
# Throughout, a well-behaved libnbd client stays connected and keeps working, and data written
# at the start must be intact at the end. Prints one line per check; exits 1 if any failed.
import errno
import hashlib
import os
import random
import socket
import struct
import sys
import time

import nbd
import nbd_raw
from nbd_raw import *  # noqa: F401,F403 (wire constants, packed, expect, Check, Closed)

SOCK, RO_SOCK = sys.argv[1], sys.argv[2]
SERVER_PID, RO_PID = int(sys.argv[3]), int(sys.argv[4])



class Raw(nbd_raw.Raw):
    """A raw connection to the server under test (default: the read-write one)."""

    def __init__(self, path=None):
        super().__init__(path or SOCK)


# ---------------------------------------------------------------------------
# The well-behaved companion, the server's liveness, and the check runner
# ---------------------------------------------------------------------------

companion = nbd.NBD()
companion.connect_uri("nbd+unix:///?socket=" + SOCK)
SIZE = companion.get_size()
rng = random.Random(20240601)
KNOWN_OFFSET, KNOWN = 16 * MiB, rng.randbytes(4 * MiB)
companion.pwrite(KNOWN, KNOWN_OFFSET)
KNOWN_SUM = hashlib.sha256(KNOWN).hexdigest()
companion_round = 0


def servers_healthy(what):
    for pid, label in ((SERVER_PID, "server"), (RO_PID, "read-only server")):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            raise Check(f"after {what}: the {label} process {pid} is gone")
    # The companion, connected all along, does a write and a read of its own page.
    global companion_round
    companion_round += 1
    page = struct.pack(">Q", companion_round) * 512
    try:
        companion.pwrite(page, 60 * MiB)
        expect(companion.pread(4096, 60 * MiB) == page, "companion read back other data")
    except nbd.Error as e:
        raise Check(f"after {what}: the companion client failed: {e}")
    # And a new connection still gets through the handshake.
    fresh = Raw().go()
    fresh.read(0, 512)
    fresh.close()


check = checker(after=servers_healthy)


# ---------------------------------------------------------------------------
# Handshake
# ---------------------------------------------------------------------------

@check("unknown client flag bits: connection dropped")
def _():
    c = Raw()
    c.greeting(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES | 0x40)
    c.expect_closed("client flags 0x43")


@check("garbage instead of client flags: connection dropped")
def _():
    c = Raw()
    c.greeting(0xDEADBEEF)
    c.expect_closed("client flags 0xdeadbeef")


@check("bad option magic: connection dropped")
def _():
    c = Raw()
    c.greeting()
    c.send(struct.pack(">QII", 0x1122334455667788, OPT_GO, 0))
    c.expect_closed("option magic 0x1122334455667788")


@check("unknown option: ERR_UNSUP, the session continues to GO")
def _():
    c = Raw()
    c.greeting()
    c.option(0x1234, b"some data")
    rtype, _ = c.reply(0x1234)
    expect(rtype == ERR_UNSUP, f"unknown option answered with {rtype:#x}, expected ERR_UNSUP")
    c.option(4)  # PEEK_EXPORT: withdrawn from the spec, so unknown too
    expect(c.reply(4)[0] == ERR_UNSUP, "PEEK_EXPORT not ERR_UNSUP")
    c.go()
    expect(c.size == SIZE, f"size {c.size} after GO, expected {SIZE}")
    c.read(0, 4096)


@check("option with a 1 GiB length (no data sent): error or disconnect")
def _():
    c = Raw()
    c.greeting()
    c.send(struct.pack(">QII", IHAVEOPT, OPT_LIST, 1 << 30))
    try:
        rtype, _ = c.reply(OPT_LIST)
    except Closed:
        return
    expect(rtype & 0x80000000, f"1 GiB option answered with {rtype:#x}, expected an error")


@check("option with 200 KiB of data: error reply and in step, or disconnect")
def _():
    c = Raw()
    c.greeting()
    try:
        c.option(0x4321, bytes(200 * 1024))
        rtype, _ = c.reply(0x4321)
    except (Closed, BrokenPipeError, ConnectionResetError):
        return
    expect(rtype & 0x80000000, f"200 KiB option answered with {rtype:#x}")
    c.go()  # the server read (or skipped) the whole option: still in step
    c.read(0, 512)


@check("LIST with data: ERR_INVALID; LIST: the export, then ACK")
def _():
    c = Raw()
    c.greeting()
    c.option(OPT_LIST, b"junk")
    rtype, _ = c.reply(OPT_LIST)
    expect(rtype == ERR_INVALID, f"LIST with data answered with {rtype:#x}, expected ERR_INVALID")
    c.option(OPT_LIST)
    r = c.replies(OPT_LIST)
    expect([t for t, _ in r] == [REP_SERVER, REP_ACK], f"LIST replies {[hex(t) for t, _ in r]}")
    n, = struct.unpack(">I", r[0][1][:4])
    expect(r[0][1][4:4 + n] == b"proto", f"LIST names {r[0][1][4:4 + n]!r}, expected b'proto'")
    c.option(OPT_ABORT)


@check("INFO and GO with an unknown export: ERR_UNKNOWN, session continues")
def _():
    c = Raw()
    c.greeting()
    for option in (OPT_INFO, OPT_GO):
        c.option(option, struct.pack(">I", 5) + b"nosuc" + struct.pack(">H", 0))
        rtype, _ = c.reply(option)
        expect(rtype == ERR_UNKNOWN, f"option {option} for 'nosuc' answered {rtype:#x}")
    c.option(OPT_INFO, struct.pack(">I", 5) + b"proto" + struct.pack(">HHH", 2, INFO_NAME, INFO_BLOCK_SIZE))
    infos = {}
    for rtype, data in c.replies(OPT_INFO):
        if rtype == REP_INFO:
            infos[struct.unpack(">H", data[:2])[0]] = data[2:]
        else:
            expect(rtype == REP_ACK, f"INFO reply {rtype:#x}")
    size, flags = struct.unpack(">QH", infos[INFO_EXPORT])
    expect(size == SIZE and flags & TFLAG_MULTI_CONN, f"INFO_EXPORT size {size} flags {flags:#x}")
    mn, pref, mx = struct.unpack(">III", infos[INFO_BLOCK_SIZE])
    expect((mn, pref, mx) == (512, 4096, 32 * MiB), f"block sizes {mn} {pref} {mx}")
    if INFO_NAME in infos:
        expect(infos[INFO_NAME] == b"proto", f"INFO_NAME {infos[INFO_NAME]!r}")
    c.go(b"proto")
    c.read(0, 512)


@check("malformed INFO/GO bodies: ERR_INVALID, session continues")
def _():
    c = Raw()
    c.greeting()
    for body in (b"", b"\0\0", struct.pack(">I", 1000) + b"x",
                 struct.pack(">I", 0) + struct.pack(">H", 5) + b"\0\0",
                 struct.pack(">I", 0xFFFFFFFF) + b"\0\0"):
        c.option(OPT_INFO, body)
        rtype, _ = c.reply(OPT_INFO)
        expect(rtype == ERR_INVALID, f"INFO body {body!r} answered {rtype:#x}, expected ERR_INVALID")
    c.go()
    c.read(0, 512)


@check("SET_META_CONTEXT before STRUCTURED_REPLY: ERR_INVALID")
def _():
    c = Raw()
    c.greeting()
    q = b"base:allocation"
    c.option(OPT_SET_META_CONTEXT, struct.pack(">I", 0) + struct.pack(">II", 1, len(q)) + q)
    rtype, _ = c.reply(OPT_SET_META_CONTEXT)
    expect(rtype == ERR_INVALID, f"answered {rtype:#x}, expected ERR_INVALID")
    c.go(structured=True, meta=True)  # and the proper order still works
    c.read(0, 512)


@check("LIST_META_CONTEXT offers base:allocation")
def _():
    c = Raw()
    c.greeting()
    c.option(OPT_STRUCTURED_REPLY)
    expect(c.reply(OPT_STRUCTURED_REPLY)[0] == REP_ACK, "STRUCTURED_REPLY")
    c.option(OPT_LIST_META_CONTEXT, struct.pack(">II", 0, 0))
    r = c.replies(OPT_LIST_META_CONTEXT)
    names = [d[4:] for t, d in r if t == REP_META_CONTEXT]
    expect(r[-1][0] == REP_ACK and b"base:allocation" in names, f"LIST_META_CONTEXT {r!r}")
    c.option(OPT_ABORT)


@check("STARTTLS: ERR_UNSUP or ERR_POLICY; EXTENDED_HEADERS: ERR_UNSUP")
def _():
    c = Raw()
    c.greeting()
    c.option(OPT_STARTTLS)
    rtype, _ = c.reply(OPT_STARTTLS)
    expect(rtype in (ERR_UNSUP, ERR_POLICY), f"STARTTLS answered {rtype:#x}")
    c.option(OPT_EXTENDED_HEADERS)
    rtype, _ = c.reply(OPT_EXTENDED_HEADERS)
    expect(rtype == ERR_UNSUP, f"EXTENDED_HEADERS answered {rtype:#x}, expected ERR_UNSUP")
    c.go()
    c.read(0, 512)


@check("ABORT: ACK, then the server closes")
def _():
    c = Raw()
    c.greeting()
    c.option(OPT_ABORT)
    try:
        rtype, _ = c.reply(OPT_ABORT)
        expect(rtype == REP_ACK, f"ABORT answered {rtype:#x}")
    except Closed:
        pass  # the spec lets the server close without the ACK too
    c.expect_closed("after ABORT")


@check("EXPORT_NAME: size+flags (10 bytes with NO_ZEROES, 134 without); unknown name closes")
def _():
    c = Raw()
    c.greeting()
    c.option(OPT_EXPORT_NAME, b"proto")
    size, flags = struct.unpack(">QH", c.recv(10))
    expect(size == SIZE, f"EXPORT_NAME size {size}")
    c.read(0, 512)  # no zero padding: the next bytes are our reply
    c = Raw()
    c.greeting(FLAG_FIXED_NEWSTYLE)
    c.option(OPT_EXPORT_NAME, b"")
    data = c.recv(134)
    expect(data[10:] == bytes(124), "124 zero bytes of padding expected without NO_ZEROES")
    c.read(0, 512)
    c = Raw()
    c.greeting()
    c.option(OPT_EXPORT_NAME, b"nosuch")
    c.expect_closed("EXPORT_NAME of an unknown export")
    # a name past what the server takes: no ERR_TOO_BIG (EXPORT_NAME has no option reply),
    # the connection closes
    c = Raw()
    c.greeting()
    try:
        c.option(OPT_EXPORT_NAME, b"x" * 70000)
    except (BrokenPipeError, ConnectionResetError):
        pass  # closed before the name was all sent: the answer expected
    c.expect_closed("EXPORT_NAME of 70000 bytes")


@check("truncated handshakes at every boundary: server survives")
def _():
    cuts = [b"",                                                     # right after the greeting
            b"\0\0",                                                 # mid client flags
            struct.pack(">I", 3),                                    # after client flags
            struct.pack(">I", 3) + struct.pack(">Q", IHAVEOPT)[:5],  # mid option magic
            struct.pack(">I", 3) + struct.pack(">QI", IHAVEOPT, OPT_GO),  # mid option header
            struct.pack(">I", 3) + struct.pack(">QII", IHAVEOPT, OPT_GO, 30) + b"\0\0\0\5pro"]
    for i, cut in enumerate(cuts):
        for how in ("close", "shutdown"):
            c = Raw()
            c.greeting(None)
            c.send(cut)
            if how == "shutdown":  # half-close: the server sees EOF but could still write
                c.sock.shutdown(socket.SHUT_WR)
                c.expect_closed(f"EOF after {len(cut)} handshake bytes")
            c.close()
    # also: connect and close before even reading the greeting
    for _ in range(5):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(SOCK)
        s.close()


# ---------------------------------------------------------------------------
# Transmission
# ---------------------------------------------------------------------------

def block_status(c, offset, length, flags=0):
    """[(length, state)] of one BLOCK_STATUS reply."""
    cookie = c.request(CMD_BLOCK_STATUS, offset, length, flags)
    chunks = c.chunks(cookie)
    expect(len(chunks) == 1 and chunks[0][0] == CHUNK_BLOCK_STATUS,
           f"BLOCK_STATUS reply chunks {[t for t, _ in chunks]}")
    payload = chunks[0][1]
    cid, = struct.unpack(">I", payload[:4])
    expect(cid == c.context_id, f"context id {cid}, negotiated {c.context_id}")
    extents = [struct.unpack(">II", payload[i:i + 8]) for i in range(4, len(payload), 8)]
    expect(extents and sum(n for n, _ in extents) <= length or len(extents) == 1,
           f"extents {extents} reach past the request")
    return extents


def state_at(c, offset):
    return block_status(c, offset, 4096, CMD_FLAG_REQ_ONE)[0][1]


@check("truncated requests: mid-header, mid-write-payload; server survives")
def _():
    for n in (1, 4, 10, 27):
        c = Raw().go()
        c.send(packed(CMD_READ, 0, 4096, cookie=1)[:n])
        c.close()
    for structured in (False, True):
        c = Raw().go(structured=structured)
        c.send(packed(CMD_WRITE, 32 * MiB, 65536, cookie=2, payload=b"\x55" * 1000))
        c.close()
    # A big write cut off half way must not have been applied even in part.
    c = Raw().go()
    c.send(packed(CMD_WRITE, 36 * MiB, 4 * MiB, cookie=3, payload=b"\x66" * (2 * MiB)))
    c.close()
    time.sleep(0.2)
    got = companion.pread(4 * MiB, 36 * MiB)
    expect(got == bytes(4 * MiB), "a WRITE whose payload was cut off changed the device")


@check("bad request magic: connection dropped")
def _():
    c = Raw().go()
    c.send(struct.pack(">IHHQQI", 0x12345678, 0, CMD_READ, 1, 0, 512))
    c.expect_closed("request magic 0x12345678")
    c = Raw().go()
    c.send(struct.pack(">IHHQQI", 0x21E41C71, 0, CMD_READ, 1, 0, 512) + bytes(4))
    c.expect_closed("extended request magic without extended headers")


@check("unknown command and unknown flags: EINVAL, stream in step")
def _():
    for structured in (False, True):
        c = Raw().go(structured=structured)
        for cmd, flags, what in ((42, 0, "command 42"), (9, 0, "command 9"),
                                 (CMD_READ, 0x8000, "READ flag 0x8000"),
                                 (CMD_READ, CMD_FLAG_NO_HOLE, "READ with NO_HOLE"),
                                 (CMD_WRITE_ZEROES, CMD_FLAG_REQ_ONE, "WRITE_ZEROES with REQ_ONE"),
                                 (CMD_FLUSH, CMD_FLAG_NO_HOLE, "FLUSH with NO_HOLE")):
            error, _ = c.do(cmd, 0, 4096, flags)
            expect(error == EINVAL, f"{what} (structured={structured}): error {error}, expected EINVAL")
            c.in_step(what)
        if not structured:
            error, _ = c.do(CMD_READ, 0, 4096, CMD_FLAG_DF)
            expect(error == EINVAL, f"READ with DF without structured replies: {error}, expected EINVAL")
            c.in_step("DF")
        # a WRITE with a bad flag: refused, but its payload must still be consumed
        error, _ = c.do(CMD_WRITE, 0, 4096, 0x4000, payload=b"\x77" * 4096)
        expect(error == EINVAL, f"WRITE with flag 0x4000: {error}, expected EINVAL")
        c.in_step("WRITE with a bad flag")
        expect(c.read(0, 4096) != b"\x77" * 4096, "a refused WRITE was applied")


@check("past the end: READ/TRIM/BLOCK_STATUS EINVAL, WRITE/WRITE_ZEROES ENOSPC, in step")
def _():
    for structured in (False, True):
        c = Raw().go(structured=structured, meta=structured)
        cases = [(CMD_READ, SIZE, 4096, EINVAL), (CMD_READ, SIZE - 4096, 8192, EINVAL),
                 (CMD_TRIM, SIZE - 512, 1024, EINVAL), (CMD_CACHE, SIZE, 512, EINVAL),
                 (CMD_WRITE_ZEROES, SIZE, 4096, ENOSPC),
                 (CMD_WRITE_ZEROES, SIZE - 4096, 1 << 30, ENOSPC),
                 (CMD_READ, (1 << 64) - 512, 1024, EINVAL),        # offset + length wraps
                 (CMD_TRIM, (1 << 64) - 4096, 8192, EINVAL)]
        if structured:
            cases.append((CMD_BLOCK_STATUS, SIZE, 4096, EINVAL))
        for cmd, off, length, want in cases:
            error, _ = c.do(cmd, off, length)
            expect(error == want, f"cmd {cmd} at {off}+{length} (structured={structured}): "
                   f"error {error}, expected {want}")
            c.in_step(f"cmd {cmd} past the end")
        for off in (SIZE, SIZE - 512, (1 << 64) - 4096):
            error, _ = c.do(CMD_WRITE, off, 4096, payload=b"\x99" * 4096)
            expect(error == ENOSPC, f"WRITE at {off}+4096: error {error}, expected ENOSPC")
            c.in_step("WRITE past the end")
        expect(companion.pread(512, SIZE - 512) != b"\x99" * 512, "a WRITE past the end was applied in part")


@check("misaligned requests (not multiples of 512): EINVAL, in step; libnbd strict mode off")
def _():
    c = Raw().go()
    for cmd, off, length in ((CMD_READ, 100, 512), (CMD_READ, 0, 100), (CMD_TRIM, 512, 1000),
                             (CMD_WRITE_ZEROES, 1, 4096)):
        error, _ = c.do(cmd, off, length, data_length=0)
        expect(error == EINVAL, f"cmd {cmd} at {off}+{length}: error {error}, expected EINVAL")
        c.in_step("misaligned")
    error, _ = c.do(CMD_WRITE, 4096, 100, payload=b"\x42" * 100)
    expect(error == EINVAL, f"WRITE of 100 bytes: error {error}, expected EINVAL")
    c.in_step("misaligned WRITE")
    # libnbd with strict mode off sends them too
    h = nbd.NBD()
    h.connect_uri("nbd+unix:///?socket=" + SOCK)
    h.set_strict_mode(0)
    for f in (lambda: h.pread(100, 0), lambda: h.pread(512, 7), lambda: h.pwrite(b"x" * 513, 0)):
        try:
            f()
            raise Check("libnbd unaligned request succeeded")
        except nbd.Error as e:
            expect(e.errno in (errno.EINVAL, "EINVAL"), f"libnbd unaligned: {e}")
    # and out-of-range ones
    for f, want in ((lambda: h.pread(4096, SIZE), "EINVAL"), (lambda: h.pwrite(b"x" * 4096, SIZE), "ENOSPC"),
                    (lambda: h.zero(8192, SIZE - 4096), "ENOSPC"), (lambda: h.trim(4096, SIZE), "EINVAL")):
        try:
            f()
            raise Check(f"libnbd out-of-range request succeeded (wanted {want})")
        except nbd.Error as e:
            expect(e.errno in (getattr(errno, want), want), f"libnbd out of range: {e}, wanted {want}")
    h.pread(512, 0)
    h.shutdown()


@check("READ over 32 MiB: EINVAL/EOVERFLOW or disconnect; WRITE over 32 MiB: error or disconnect")
def _():
    for structured in (False, True):
        c = Raw().go(structured=structured)
        cookie = c.request(CMD_READ, 0, 32 * MiB + 4096)
        try:
            error, _ = c.result(cookie)
            expect(error in (EINVAL, EOVERFLOW), f"READ of 32 MiB + 4 KiB: error {error}")
            c.in_step("oversized READ")
        except Closed:
            pass
        # exactly 32 MiB is normal
        c = Raw().go(structured=structured)
        data = c.read(0, 32 * MiB)
        expect(len(data) == 32 * MiB, "32 MiB READ")
        # a 40 MiB WRITE with its payload sent: an error and in step, or a disconnect
        c.base = 0
        cookie = c.request(CMD_WRITE, 8 * MiB, 40 * MiB)
        try:
            c.send(b"\xee" * (40 * MiB))
            error, _ = c.result(cookie)
            expect(error != 0, "a 40 MiB WRITE succeeded (above the advertised maximum)")
            c.in_step("40 MiB WRITE")
        except (Closed, BrokenPipeError, ConnectionResetError):
            pass
        # a 1 GiB WRITE whose payload never comes: the server may refuse at once (an error
        # reply, or a disconnect) or wait for the payload; it must never apply it, and the
        # client giving up must not hurt the server.
        c = Raw().go(structured=structured)
        cookie = c.request(CMD_WRITE, 0, 1 << 30)
        c.sock.settimeout(1.0)
        try:
            error, _ = c.result(cookie)
            expect(error != 0, "a 1 GiB WRITE succeeded")
        except Closed:
            pass
        except Check as e:
            expect("no answer" in str(e), str(e))
        c.close()
    expect(companion.pread(4096, 8 * MiB) != b"\xee" * 4096, "an oversized WRITE was applied")


@check("zero-length READ and WRITE succeed; zero-length TRIM/WRITE_ZEROES keep the stream")
def _():
    for structured in (False, True):
        c = Raw().go(structured=structured)
        for cmd in (CMD_READ, CMD_WRITE):
            error, data = c.do(cmd, 4096, 0)
            expect(error == 0 and data == b"", f"zero-length cmd {cmd}: error {error}")
        for cmd in (CMD_TRIM, CMD_WRITE_ZEROES, CMD_CACHE, CMD_FLUSH):
            error, _ = c.do(cmd, 4096 if cmd != CMD_FLUSH else 0, 0)
            expect(error in (0, EINVAL), f"zero-length cmd {cmd}: error {error}")
            c.in_step(f"zero-length cmd {cmd}")
        error, _ = c.do(CMD_READ, SIZE, 0)  # zero-length at the very end is in range
        expect(error in (0, EINVAL), f"zero-length READ at the end: {error}")
        c.in_step("zero-length READ at the end")


@check("FLUSH, CACHE, FUA writes, FAST_ZERO and FUA trims succeed")
def _():
    c = Raw().go()
    c.write(48 * MiB, b"\x31" * 8192, CMD_FLAG_FUA)
    for cmd in (CMD_FLUSH, CMD_CACHE):
        error, _ = c.do(cmd, 0 if cmd == CMD_FLUSH else 48 * MiB, 0 if cmd == CMD_FLUSH else 8192)
        expect(error == 0, f"cmd {cmd}: error {error}")
    expect(c.read(48 * MiB, 8192) == b"\x31" * 8192, "FUA write not read back")
    error, _ = c.do(CMD_WRITE_ZEROES, 48 * MiB, 4096, 0x10 | CMD_FLAG_FUA)  # FAST_ZERO
    expect(error == 0, f"WRITE_ZEROES with FAST_ZERO|FUA: error {error}")
    error, _ = c.do(CMD_TRIM, 48 * MiB + 4096, 4096, CMD_FLAG_FUA)
    expect(error == 0, f"TRIM with FUA: error {error}")
    expect(c.read(48 * MiB, 8192) == bytes(8192), "zeroed and trimmed pages do not read as zeros")


@check("sub-page TRIM and WRITE_ZEROES (512-byte units) leave the rest of the page intact")
def _():
    c = Raw().go(structured=True, meta=True)
    base = 54 * MiB
    page = rng.randbytes(4096)
    c.write(base, page + page)
    error, _ = c.do(CMD_TRIM, base + 512, 1024)
    expect(error == 0, f"TRIM of 1 KiB inside a page: {error}")
    got = c.read(base, 4096)
    expect(got[:512] == page[:512] and got[1536:] == page[1536:],
           "bytes outside a sub-page TRIM changed")
    error, _ = c.do(CMD_WRITE_ZEROES, base + 4096 + 1024, 2048)
    expect(error == 0, f"WRITE_ZEROES of 2 KiB inside a page: {error}")
    got = c.read(base + 4096, 4096)
    expect(got == page[:1024] + bytes(2048) + page[3072:], "sub-page WRITE_ZEROES wrong")
    expect(state_at(c, base + 4096) == 0, "a partly zeroed page is not reported as data")


@check("pipelined requests: every reply echoes its cookie, data right")
def _():
    c = Raw().go()
    pages = {i: bytes([i]) * 4096 for i in range(1, 49)}
    cookies = {}
    for i, page in pages.items():
        cookies[c.request(CMD_WRITE, 50 * MiB + i * 4096, 4096, payload=page)] = i
    seen = set()
    for _ in pages:
        magic, error, cookie = struct.unpack(">IIQ", c.recv(16))
        expect(magic == SIMPLE_MAGIC and error == 0, f"pipelined write reply {magic:#x} {error}")
        expect(cookie in cookies and cookie not in seen, f"unexpected cookie {cookie:#x}")
        seen.add(cookie)
    reads = {c.request(CMD_READ, 50 * MiB + i * 4096, 4096): i for i in pages}
    for _ in pages:
        magic, error, cookie = struct.unpack(">IIQ", c.recv(16))
        expect(magic == SIMPLE_MAGIC and error == 0 and cookie in reads, "pipelined read reply")
        expect(c.recv(4096) == pages[reads.pop(cookie)], "pipelined read returned other data")


def simple_replies(c, count):
    """`count` simple replies in any order: {cookie: error}."""
    got = {}
    for _ in range(count):
        magic, error, cookie = struct.unpack(">IIQ", c.recv(16))
        expect(magic == SIMPLE_MAGIC, f"reply magic {magic:#x}")
        expect(cookie not in got, f"cookie {cookie:#x} answered twice")
        got[cookie] = error
    return got


@check("a burst in one segment (replies held back while more is buffered) is answered whole")
def _():
    # Short replies wait while further whole requests are buffered; none may be left behind
    # when the burst ends, whatever ends it: the last request, an error, or DISC.
    c = Raw().go()
    base = 56 * MiB
    pages = [rng.randbytes(4096) for _ in range(9)]
    burst = b"".join(packed(CMD_WRITE, base + i * 4096, 4096, cookie=100 + i, payload=p)
                     for i, p in enumerate(pages))
    burst += packed(CMD_FLUSH, cookie=200) + packed(CMD_TRIM, base + 8 * 4096, 4096, cookie=201)
    burst += packed(99, cookie=202)                                   # unknown command: EINVAL
    c.send(burst)
    got = simple_replies(c, 12)
    expect(got[202] == EINVAL, f"unknown command in a burst: {got[202]}, expected EINVAL")
    expect(all(got[k] == 0 for k in got if k != 202), f"burst replies {got}")
    # A read in the middle of short replies: its data and the held replies all arrive.
    c.send(packed(CMD_TRIM, base, 4096, cookie=300) + packed(CMD_READ, base + 4096, 4096, cookie=301)
           + packed(CMD_WRITE_ZEROES, base + 2 * 4096, 4096, cookie=302))
    seen = set()
    for _ in range(3):
        magic, error, cookie = struct.unpack(">IIQ", c.recv(16))
        expect(magic == SIMPLE_MAGIC and error == 0, f"reply {magic:#x} error {error}")
        if cookie == 301:
            expect(c.recv(4096) == pages[1], "READ inside a burst returned other data")
        seen.add(cookie)
    expect(seen == {300, 301, 302}, f"burst with a READ answered {seen}")
    # Replies must not wait for a request whose payload has not all arrived yet.
    half = packed(CMD_WRITE, base + 3 * 4096, 4096, cookie=401, payload=pages[3])[:28 + 2048]
    c.send(packed(CMD_FLUSH, cookie=400) + half)
    got = simple_replies(c, 1)
    expect(got == {400: 0}, f"FLUSH before a half-sent WRITE: {got}")
    c.send(pages[3][2048:])
    expect(simple_replies(c, 1) == {401: 0}, "the completed WRITE was not answered")
    # DISC ends a burst: every request before it is answered, then the server closes.
    c.send(packed(CMD_WRITE, base + 4 * 4096, 4096, cookie=500, payload=pages[4])
           + packed(CMD_FLUSH, cookie=501) + packed(CMD_DISC, cookie=502))
    expect(simple_replies(c, 2) == {500: 0, 501: 0}, "requests before DISC not answered")
    c.expect_closed("DISC after a burst")
    d = Raw().go()
    for i, page in enumerate(pages[:8]):
        want = bytes(4096) if i in (0, 2) else page
        expect(d.read(base + i * 4096, 4096) == want, f"page {i} of the burst reads back wrong")


@check("read-only export: WRITE/TRIM/WRITE_ZEROES EPERM, in step, READ works")
def _():
    c = Raw(RO_SOCK).go()
    expect(c.flags & TFLAG_READ_ONLY, f"read-only export flags {c.flags:#x} lack READ_ONLY")
    for cmd, payload in ((CMD_WRITE, b"\x13" * 4096), (CMD_TRIM, b""), (CMD_WRITE_ZEROES, b"")):
        error, _ = c.do(cmd, 0, 4096, payload=payload)
        expect(error == EPERM, f"read-only cmd {cmd}: error {error}, expected EPERM")
        c.in_step(f"read-only cmd {cmd}")
    expect(c.read(0, 4096) == bytes(4096), "read-only export does not read zeros")
    for flags in (0, CMD_FLAG_FUA):
        error, _ = c.do(CMD_FLUSH, 0, 0, flags)
        expect(error == 0, f"FLUSH on the read-only export: {error}")


@check("BLOCK_STATUS: HOLE|ZERO never written, ZERO for zeros, 0 for data, HOLE|ZERO trimmed")
def _():
    c = Raw().go(structured=True, meta=True)
    base = 40 * MiB
    expect(state_at(c, base) == STATE_HOLE | STATE_ZERO, "never-written page is not HOLE|ZERO")
    c.write(base, rng.randbytes(8192))
    c.write(base + 8192, bytes(4096))             # a zero page written with WRITE
    error, _ = c.do(CMD_WRITE_ZEROES, base + 12288, 4096, CMD_FLAG_NO_HOLE)
    expect(error == 0, f"WRITE_ZEROES NO_HOLE: {error}")
    c.write(base + 16384, b"\x5a" * 4096)
    error, _ = c.do(CMD_TRIM, base + 16384, 4096)
    expect(error == 0, f"TRIM: {error}")
    got = [state_at(c, base + i * 4096) for i in range(6)]
    expect(got[0] == 0 and got[1] == 0, f"data pages: states {got[:2]}, expected 0")
    expect(got[2] == STATE_ZERO, f"zero page written with WRITE: state {got[2]}, expected ZERO")
    expect(got[3] == STATE_ZERO, f"WRITE_ZEROES with NO_HOLE: state {got[3]}, expected ZERO only")
    expect(got[4] == STATE_HOLE | STATE_ZERO, f"trimmed page: state {got[4]}, expected HOLE|ZERO")
    expect(got[5] == STATE_HOLE | STATE_ZERO, f"never-written page: state {got[5]}")
    # One request over the whole area: extents cover it in order and agree with the above.
    extents = block_status(c, base, 6 * 4096)
    expect(sum(n for n, _ in extents) == 6 * 4096, f"extents {extents} do not cover 24 KiB")
    expanded = []
    for n, state in extents:
        expanded += [state] * (n // 4096)
    expect(expanded[:2] == [0, 0] and expanded[4:] == [3, 3], f"extents {extents}")
    # REQ_ONE: exactly one extent
    expect(len(block_status(c, base, 6 * 4096, CMD_FLAG_REQ_ONE)) == 1, "REQ_ONE gave several")
    # Without a meta context BLOCK_STATUS is invalid
    d = Raw().go(structured=True)
    error, _ = d.do(CMD_BLOCK_STATUS, 0, 4096)
    expect(error == EINVAL, f"BLOCK_STATUS without a context: {error}, expected EINVAL")
    d.in_step("BLOCK_STATUS without a context")


@check("structured READ of a hole area: OFFSET_HOLE chunks, contents right; DF: one chunk")
def _():
    c = Raw().go(structured=True)
    base = 44 * MiB
    c.write(base, b"\xc3" * 4096)
    c.write(base + 2 * MiB - 4096, b"\x3c" * 4096)
    cookie = c.request(CMD_READ, base, 2 * MiB)
    chunks = c.chunks(cookie)
    covered, data = 0, bytearray(2 * MiB)
    kinds = set()
    for ctype, payload in chunks:
        kinds.add(ctype)
        off, = struct.unpack(">Q", payload[:8])
        expect(base <= off < base + 2 * MiB, f"chunk offset {off} outside the request")
        if ctype == CHUNK_DATA:
            data[off - base:off - base + len(payload) - 8] = payload[8:]
            covered += len(payload) - 8
        elif ctype == CHUNK_HOLE:
            n, = struct.unpack(">I", payload[8:12])
            covered += n
        else:
            raise Check(f"unexpected chunk type {ctype:#x} in a READ")
    expect(CHUNK_HOLE in kinds, f"no OFFSET_HOLE chunk for 2 MiB with 2 MiB - 8 KiB of hole: {kinds}")
    expect(covered == 2 * MiB, f"chunks cover {covered} bytes, not 2 MiB")
    expect(data[:4096] == b"\xc3" * 4096 and data[-4096:] == b"\x3c" * 4096
           and data[4096:-4096] == bytes(2 * MiB - 8192), "structured READ data wrong")
    cookie = c.request(CMD_READ, base, 2 * MiB, CMD_FLAG_DF)
    chunks = c.chunks(cookie)
    expect(len(chunks) == 1 and chunks[0][0] == CHUNK_DATA, f"DF read gave {[t for t, _ in chunks]}")
    # An error on a structured READ is an ERROR chunk with DONE
    cookie = c.request(CMD_READ, SIZE, 4096)
    chunks = c.chunks(cookie)
    expect(len(chunks) == 1 and chunks[0][0] in (CHUNK_ERROR, CHUNK_ERROR_OFFSET, "simple") and
           (chunks[0][0] == "simple" and chunks[0][1] == EINVAL or
            chunks[0][0] != "simple" and struct.unpack(">I", chunks[0][1][:4])[0] == EINVAL),
           f"structured READ past the end gave {chunks}")


@check("DISC: the server closes after replying to what is in flight")
def _():
    c = Raw().go()
    cookie = c.request(CMD_WRITE, 52 * MiB, 4096, payload=b"\x21" * 4096)
    c.request(CMD_DISC)
    error, _ = c.simple_reply(cookie)
    expect(error == 0, f"write before DISC: {error}")
    c.expect_closed("after DISC")
    expect(companion.pread(4096, 52 * MiB) == b"\x21" * 4096, "write before DISC lost")


@check("many malformed connections at once while the companion works")
def _():
    conns = []
    for i in range(40):
        c = Raw()
        if i % 3 == 0:
            c.greeting(0xFFFFFFFF)
        elif i % 3 == 1:
            c.greeting()
            c.send(b"IHAVEOP")
        conns.append(c)
    expect(companion.pread(4 * MiB, KNOWN_OFFSET) == KNOWN, "known data changed")
    # Stalled handshakes must not hold up a new client's handshake.
    fresh = Raw().go(structured=True, meta=True)
    fresh.read(KNOWN_OFFSET, 4096)
    fresh.close()
    for c in conns:
        c.close()


@check("data written at the start is intact at the end")
def _():
    got = companion.pread(4 * MiB, KNOWN_OFFSET)
    expect(hashlib.sha256(got).hexdigest() == KNOWN_SUM, "sha256 of the known region changed")
    fresh = Raw().go(structured=True)
    fresh.base = KNOWN_OFFSET
    error, data = fresh.do(CMD_READ, KNOWN_OFFSET, 4 * MiB, data_length=4 * MiB)
    expect(error == 0 and data == KNOWN, "known region reads differently on a new connection")


companion.shutdown()
finish("protocol")
