# nbd_raw.py - an NBD client driven byte by byte over a Unix socket, for the integration tests
# (protocol.py, stalls.py): wire constants, request packing, handshake and reply parsing.
# Imported, not run. Raw(path) connects; Check and Closed are what its methods raise.
import random
import socket
import struct
import sys
import time
import traceback

NBDMAGIC = 0x4E42444D41474943
IHAVEOPT = 0x49484156454F5054
REP_MAGIC = 0x0003E889045565A9
REQ_MAGIC = 0x25609513
SIMPLE_MAGIC = 0x67446698
STRUCT_MAGIC = 0x668E33EF

FLAG_FIXED_NEWSTYLE, FLAG_NO_ZEROES = 1, 2
OPT_EXPORT_NAME, OPT_ABORT, OPT_LIST, OPT_STARTTLS = 1, 2, 3, 5
OPT_INFO, OPT_GO, OPT_STRUCTURED_REPLY = 6, 7, 8
OPT_LIST_META_CONTEXT, OPT_SET_META_CONTEXT, OPT_EXTENDED_HEADERS = 9, 10, 11
REP_ACK, REP_SERVER, REP_INFO, REP_META_CONTEXT = 1, 2, 3, 4
ERR_UNSUP, ERR_POLICY, ERR_INVALID = 0x80000001, 0x80000002, 0x80000003
ERR_UNKNOWN, ERR_TOO_BIG = 0x80000006, 0x80000009
INFO_EXPORT, INFO_NAME, INFO_BLOCK_SIZE = 0, 1, 3
TFLAG_READ_ONLY, TFLAG_MULTI_CONN = 0x2, 0x100

CMD_READ, CMD_WRITE, CMD_DISC, CMD_FLUSH, CMD_TRIM = 0, 1, 2, 3, 4
CMD_CACHE, CMD_WRITE_ZEROES, CMD_BLOCK_STATUS = 5, 6, 7
CMD_FLAG_FUA, CMD_FLAG_NO_HOLE, CMD_FLAG_DF, CMD_FLAG_REQ_ONE = 1, 2, 4, 8
CHUNK_NONE, CHUNK_DATA, CHUNK_HOLE, CHUNK_BLOCK_STATUS = 0, 1, 2, 5
CHUNK_ERROR, CHUNK_ERROR_OFFSET = 0x8001, 0x8002
STATE_HOLE, STATE_ZERO = 1, 2
EPERM, EINVAL, ENOSPC, EOVERFLOW = 1, 22, 28, 75

MiB = 1 << 20
TIMEOUT = 5.0


class Closed(Exception):
    """The server closed the connection (EOF or reset)."""


class Check(Exception):
    """A check failed; the message says what was expected and what came."""


def expect(condition, message):
    if not condition:
        raise Check(message)


def packed(cmd, offset=0, length=0, flags=0, cookie=0, payload=b""):
    """One request as the client sends it."""
    return struct.pack(">IHHQQI", REQ_MAGIC, flags, cmd, cookie, offset, length) + payload


class Raw:
    """One NBD connection driven by hand over a Unix socket."""

    def __init__(self, path, timeout=TIMEOUT):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.timeout = timeout
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.size = None
        self.flags = None
        self.structured = False
        self.greeted = False

    def close(self):
        self.sock.close()

    def send(self, data):
        self.sock.sendall(data)

    def recv(self, n):
        out = bytearray()
        while len(out) < n:
            try:
                part = self.sock.recv(min(n - len(out), 1 << 20))
            except (ConnectionResetError, BrokenPipeError):
                raise Closed()
            except socket.timeout:
                raise Check(f"no answer from the server within {self.timeout} s "
                            f"(wanted {n} bytes, got {len(out)})")
            if not part:
                raise Closed()
            out += part
        return bytes(out)

    def expect_closed(self, what):
        """The server must close this connection within the timeout (any bytes before EOF are
        drained)."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            try:
                part = self.sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                return
            except socket.timeout:
                break
            if not part:
                return
        raise Check(f"{what}: expected the server to drop the connection, it stayed open")

    # --- handshake ---
    def greeting(self, client_flags=FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES):
        self.greeted = True
        magic, opt, hflags = struct.unpack(">QQH", self.recv(18))
        expect(magic == NBDMAGIC and opt == IHAVEOPT, f"bad greeting {magic:#x} {opt:#x}")
        expect(hflags & FLAG_FIXED_NEWSTYLE, "server does not offer FIXED_NEWSTYLE")
        if client_flags is not None:
            self.send(struct.pack(">I", client_flags))
        return hflags

    def option(self, option, data=b""):
        self.send(struct.pack(">QII", IHAVEOPT, option, len(data)) + data)

    def reply(self, option):
        """One option reply: (type, data). Checks magic and the echoed option."""
        magic, opt, rtype, length = struct.unpack(">QIII", self.recv(20))
        expect(magic == REP_MAGIC, f"option reply magic {magic:#x}")
        expect(opt == option, f"option reply echoes option {opt}, sent {option}")
        return rtype, self.recv(length)

    def replies(self, option):
        """Replies up to and including the final one (ACK or an error)."""
        out = []
        while True:
            rtype, data = self.reply(option)
            out.append((rtype, data))
            if rtype == REP_ACK or rtype & 0x80000000:
                return out

    def go(self, name=b"", structured=False, meta=False):
        if not self.greeted:
            self.greeting()
        if structured:
            self.option(OPT_STRUCTURED_REPLY)
            expect(self.reply(OPT_STRUCTURED_REPLY)[0] == REP_ACK, "STRUCTURED_REPLY not ACKed")
            self.structured = True
        if meta:
            query = b"base:allocation"
            data = struct.pack(">I", len(name)) + name + struct.pack(">II", 1, len(query)) + query
            self.option(OPT_SET_META_CONTEXT, data)
            r = self.replies(OPT_SET_META_CONTEXT)
            expect([t for t, _ in r] == [REP_META_CONTEXT, REP_ACK],
                   f"SET_META_CONTEXT replies {[hex(t) for t, _ in r]}")
            self.context_id = struct.unpack(">I", r[0][1][:4])[0]
            expect(r[0][1][4:] == query, f"context name {r[0][1][4:]!r}")
        self.option(OPT_GO, struct.pack(">I", len(name)) + name + struct.pack(">HH", 1, INFO_BLOCK_SIZE))
        for rtype, data in self.replies(OPT_GO):
            expect(rtype in (REP_INFO, REP_ACK), f"GO reply type {rtype:#x}")
            if rtype == REP_INFO and struct.unpack(">H", data[:2])[0] == INFO_EXPORT:
                self.size, self.flags = struct.unpack(">QH", data[2:12])
        expect(self.size is not None, "GO gave no INFO_EXPORT")
        return self

    # --- transmission ---
    def request(self, cmd, offset=0, length=0, flags=0, cookie=None, payload=b""):
        if cookie is None:
            cookie = random.getrandbits(64)
        self.send(packed(cmd, offset, length, flags, cookie, payload))
        return cookie

    def simple_reply(self, cookie, data_length=0):
        """A simple reply: (error, data). data only for a successful READ."""
        magic, error, got = struct.unpack(">IIQ", self.recv(16))
        expect(magic == SIMPLE_MAGIC, f"simple reply magic {magic:#x}")
        expect(got == cookie, f"reply cookie {got:#x}, expected {cookie:#x}")
        data = self.recv(data_length) if error == 0 and data_length else b""
        return error, data

    def chunks(self, cookie):
        """Structured chunks of one reply until DONE: list of (type, payload)."""
        out = []
        while True:
            magic, = struct.unpack(">I", self.recv(4))
            if magic == SIMPLE_MAGIC:  # allowed for non-READ replies
                error, got = struct.unpack(">IQ", self.recv(12))
                expect(got == cookie, f"reply cookie {got:#x}, expected {cookie:#x}")
                out.append(("simple", error))
                return out
            expect(magic == STRUCT_MAGIC, f"structured reply magic {magic:#x}")
            flags, ctype, got, length = struct.unpack(">HHQI", self.recv(16))
            expect(got == cookie, f"chunk cookie {got:#x}, expected {cookie:#x}")
            out.append((ctype, self.recv(length)))
            if flags & 1:
                return out

    def result(self, cookie, data_length=0):
        """Error code of any reply (simple or structured), and the READ data if any."""
        if not self.structured:
            return self.simple_reply(cookie, data_length)
        error, data = 0, bytearray(data_length)
        for ctype, payload in self.chunks(cookie):
            if ctype == "simple":
                error = payload
            elif ctype in (CHUNK_ERROR, CHUNK_ERROR_OFFSET):
                error = struct.unpack(">I", payload[:4])[0]
                expect(error != 0, "ERROR chunk with error 0")
            elif ctype == CHUNK_DATA:
                off, = struct.unpack(">Q", payload[:8])
                data[off - self.base:off - self.base + len(payload) - 8] = payload[8:]
        return error, bytes(data)

    def do(self, cmd, offset=0, length=0, flags=0, payload=b"", data_length=0):
        self.base = offset
        cookie = self.request(cmd, offset, length, flags, payload=payload)
        return self.result(cookie, data_length)

    def read(self, offset, length, flags=0):
        error, data = self.do(CMD_READ, offset, length, flags, data_length=length)
        expect(error == 0, f"READ {offset}+{length} failed with {error}")
        return data

    def write(self, offset, data, flags=0):
        error, _ = self.do(CMD_WRITE, offset, len(data), flags, payload=data)
        expect(error == 0, f"WRITE {offset}+{len(data)} failed with {error}")

    def in_step(self, what):
        """After an error: a normal READ on the same connection must still work."""
        try:
            self.read(0, 4096)
        except Closed:
            raise Check(f"{what}: the connection was dropped, expected it to stay in step")


# ---------------------------------------------------------------------------
# Running checks: one "ok"/"not ok" line each, a summary and the exit status at the end
# ---------------------------------------------------------------------------

failures = []


def checker(after=None):
    """A decorator that runs a check at once, then after(name) (e.g. a health check) if given.
    A failing check prints why and is remembered; the others still run."""
    def check(name):
        def run(function):
            try:
                function()
                if after is not None:
                    after(name)
                print(f"ok - {name}", flush=True)
            except Exception as e:  # a bug in one check must not hide the others
                detail = str(e) or type(e).__name__
                if isinstance(e, Closed):
                    detail = "the server closed the connection unexpectedly"
                if not isinstance(e, (Check, Closed)):
                    detail = f"{type(e).__name__}: {detail} at " + \
                        traceback.format_exc().strip().splitlines()[-3].strip()
                failures.append(f"{name}: {detail}")
                print(f"not ok - {name}: {detail}", flush=True)
            return function
        return run
    return check


def finish(what):
    """Exit 1 with a list of the failed checks, or 0."""
    if failures:
        print(f"{len(failures)} {what} check(s) failed:", file=sys.stderr)
        for f in failures:
            print(f"  {f}", file=sys.stderr)
        sys.exit(1)
    print(f"all {what} checks passed")


def control(path, line, timeout=TIMEOUT):
    """One request on a control socket (NAME.ctl): the whole answer as text."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    s.sendall(line.encode() + b"\n")
    out = b""
    try:
        while True:
            part = s.recv(65536)
            if not part:
                break
            out += part
    except socket.timeout:
        raise Check(f"control socket: no whole answer to {line!r} within {timeout} s (got {out!r})")
    finally:
        s.close()
    return out.decode()
