#!/usr/bin/python3
# stalls.py - raw-socket clients that try to stall `uzram serve` for everyone else: request
# payloads that never finish, a handshake that does not read its replies, a thousand idle
# connections, a control peer that trickles its request. Each check asserts that well-behaved
# clients are still served within a bound, and that the stalling client is dropped when its
# deadline passes. No check measures speed: the bounds are far above a normal answer.
#
# Run by stalls.sh: stalls.py CHECK SOCKET CONTROL_SOCKET SERVER_PID [DEADLINE]
#   CHECK     payload | handshake-send | idle | helpers | control
#   DEADLINE  the server's request/handshake deadline in seconds (UZRAM_SERVE_TIMEOUT)
import os
import random
import select
import socket
import struct
import sys
import threading
import time

import nbd
from nbd_raw import *  # noqa: F401,F403 (wire constants, Raw, packed, expect, checker)

CHECK, SOCK, CTL, PID = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
DEADLINE = float(sys.argv[5]) if len(sys.argv) > 5 else 30.0
# How long a well-behaved client may wait for an answer while others stall: far above a normal
# answer (milliseconds), far below the server's deadlines that would end a stall anyway.
PATIENCE = 10.0

rng = random.Random(11)


def server_alive(what):
    try:
        os.kill(PID, 0)
    except ProcessLookupError:
        raise Check(f"after {what}: the server process {PID} is gone")


check = checker(after=server_alive)


def clients():
    """Connected clients as the server counts them (handshaking and transmitting)."""
    answer = control(CTL, "clients")
    expect(answer.startswith("ok\n"), f"control 'clients' answered {answer!r}")
    return int(answer.split()[1])


def wait_clients(at_most, within, what):
    """Wait until the server counts at most `at_most` clients."""
    deadline = time.monotonic() + within
    while True:
        n = clients()
        if n <= at_most:
            return
        if time.monotonic() > deadline:
            raise Check(f"{what}: {n} clients still connected after {within:.0f} s "
                        f"(expected at most {at_most})")
        time.sleep(0.2)


def closed_by_server(sock):
    """True once the server has closed `sock` (EOF or reset); never blocks."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(65536, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except (ConnectionResetError, BrokenPipeError):
        return True


def threads():
    return len(os.listdir(f"/proc/{PID}/task"))


def maps():
    with open(f"/proc/{PID}/maps") as f:
        return sum(1 for _ in f)


# ---------------------------------------------------------------------------
# Request payloads that never finish
# ---------------------------------------------------------------------------

def stalled_client(data):
    """A client that sent `data` after its handshake. On a loaded machine this client's own
    handshake can outlast the server's deadline (the server then drops it, as it should):
    try again, a bounded number of times."""
    for _ in range(5):
        try:
            c = Raw(SOCK).go()
            c.send(data)
            return c
        except (Closed, BrokenPipeError, ConnectionResetError):
            continue
    raise Check("the server dropped 5 handshakes in a row before they could stall a request")


def check_payload():
    STALLED = 32
    base = 128 * MiB  # the stalled WRITEs aim here; the good client stays below

    @check(f"{STALLED} clients announce 32 MiB WRITEs and go silent: others are still served")
    def _():
        stalled = []
        for i in range(STALLED):
            # One byte of the payload: the request has started, and then nothing more comes.
            stalled.append(stalled_client(
                packed(CMD_WRITE, base + (i % 4) * 32 * MiB, 32 * MiB, cookie=i) + b"\xab"))
        # A request can also stall in its header, or in a small payload (read into the
        # connection's input buffer rather than a request buffer): both must end the same way.
        stalled.append(stalled_client(packed(CMD_READ, 0, 4096, cookie=100)[:10]))
        stalled.append(stalled_client(
            packed(CMD_WRITE, base, 4096, cookie=101, payload=b"\xab" * 100)))
        time.sleep(0.5)  # let the server read every header (ordering only, nothing is timed)
        good = Raw(SOCK, timeout=PATIENCE).go()
        good.read(0, MiB)  # raises "no answer within 10 s" while the stalled ones pin buffers
        data = rng.randbytes(MiB)
        good.write(4 * MiB, data)
        expect(good.read(4 * MiB, MiB) == data, "1 MiB written during the stall reads back wrong")
        # A full-size request too: its bytes do arrive, so it must get buffer space.
        big = rng.randbytes(32 * MiB)
        good.write(32 * MiB, big)
        expect(good.read(32 * MiB, 32 * MiB) == big, "32 MiB written during the stall reads back wrong")
        # And a real client copying 8 MiB in 2 MiB requests (what nbdcopy does).
        h = nbd.NBD()
        h.connect_unix(SOCK)
        chunk = rng.randbytes(2 * MiB)
        for off in range(64 * MiB, 72 * MiB, 2 * MiB):
            h.pwrite(chunk, off)
        expect(h.pread(2 * MiB, 70 * MiB) == chunk, "libnbd data written during the stall")
        h.shutdown()
        good.close()

        # The stalled requests have started: each must be dropped once the deadline passes
        # (one of them keeps trickling 4 KiB every 0.2 s, which must not extend it).
        trickler = stalled[0]
        limit = time.monotonic() + DEADLINE + PATIENCE
        open_ = list(stalled)
        while open_ and time.monotonic() < limit:
            if trickler in open_:
                try:
                    trickler.sock.send(b"\xab" * 4096, socket.MSG_DONTWAIT)
                except (BlockingIOError, BrokenPipeError, ConnectionResetError):
                    pass
            open_ = [c for c in open_ if not closed_by_server(c.sock)]
            time.sleep(0.2)
        expect(not open_, f"{len(open_)} of {len(stalled)} unfinished requests still connected "
               f"{DEADLINE + PATIENCE:.0f} s after they stalled (deadline {DEADLINE:.0f} s)")
        for c in stalled:
            c.close()
        # Unfinished WRITEs are never applied, not even in part.
        h = nbd.NBD()
        h.connect_unix(SOCK)
        for i in range(4):
            expect(h.pread(4096, base + i * 32 * MiB) == bytes(4096),
                   f"an unfinished WRITE at {base + i * 32 * MiB} changed the device")
        h.shutdown()

    wait_clients(0, DEADLINE + PATIENCE, "after the payload checks")


# ---------------------------------------------------------------------------
# The handshake deadline covers sending too
# ---------------------------------------------------------------------------

def check_handshake_send():
    @check("a handshake client that never reads its option replies is dropped at the deadline")
    def _():
        wait_clients(0, PATIENCE, "before the check")
        c = Raw(SOCK)
        c.greeting()
        # LIST options until neither side can take more: the server is then stuck sending
        # replies nobody reads (receiving alone would never reach the deadline).
        c.sock.setblocking(False)
        option = struct.pack(">QII", IHAVEOPT, OPT_LIST, 0) * 256
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < 1.0:
            try:
                c.sock.send(option)
                quiet_since = time.monotonic()
            except BlockingIOError:
                time.sleep(0.05)
        started = time.monotonic()
        expect(clients() == 1, "the stuck handshake is not counted as a client")
        wait_clients(0, DEADLINE + PATIENCE, f"a handshake stuck sending ({DEADLINE:.0f} s deadline)")
        print(f"# dropped {time.monotonic() - started:.1f} s after it stopped reading", flush=True)
        c.close()


# ---------------------------------------------------------------------------
# A thousand idle connections at --threads 64
# ---------------------------------------------------------------------------

def check_idle():
    CONNECTIONS = 1000  # NBD_SERVER_MAX_CONNECTIONS
    # An idle connection is one sleeping thread (its stack: 2 maps): old servers started 64
    # per client (about 190 maps each) and ran into the kernel's 65530 maps at ~350 clients.
    THREADS_IDLE = CONNECTIONS + 16  # + main, control and helpers on their way out
    # + the program and its libraries, and glibc's malloc arenas (up to 8 per CPU, 2 maps each)
    MAPS_IDLE = 2 * CONNECTIONS + 16 * (os.cpu_count() or 1) + 500

    @check(f"{CONNECTIONS} connections (999 idle + 1 busy) all served; the next one is refused")
    def _():
        busy = nbd.NBD()
        busy.connect_unix(SOCK)
        idle = []
        for i in range(CONNECTIONS - 1):
            try:
                idle.append(Raw(SOCK).go())
            except (Closed, Check, OSError) as e:
                raise Check(f"idle connection {i + 1} of {CONNECTIONS - 1} failed: {e or type(e).__name__}")
            # At most a thread per connection still finishing its handshake: stop early rather
            # than let a server that starts --threads workers per client use up the machine.
            if i % 10 == 9:
                expect(threads() <= 2 * len(idle) + 16,
                       f"{threads()} server threads for {len(idle)} new idle connections")
        extra = Raw(SOCK)
        extra.expect_closed(f"connection {CONNECTIONS + 1} (the cap is {CONNECTIONS})")
        extra.close()

        # An idle connection keeps one thread and gives its buffers back (after
        # NBD_SERVER_IDLE_MS): a bounded wait for the counts to settle.
        deadline = time.monotonic() + PATIENCE
        bounded_maps = not os.environ.get("UZRAM_SANITIZED")
        while (threads() > THREADS_IDLE or (bounded_maps and maps() > MAPS_IDLE)) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        expect(threads() <= THREADS_IDLE,
               f"{threads()} server threads with {CONNECTIONS} idle connections "
               f"(expected at most {THREADS_IDLE})")
        if os.environ.get("UZRAM_SANITIZED"):
            # ASan and TSan map shadow memory for every thread: the bound is the plain build's.
            print(f"SKIPPED CHECK: memory maps of a sanitizer build ({maps()}) are not bounded "
                  f"like those of a plain build", flush=True)
        else:
            expect(maps() <= MAPS_IDLE, f"{maps()} memory maps with {CONNECTIONS} idle "
                   f"connections (expected at most {MAPS_IDLE})")
        print(f"# {threads()} threads, {maps()} maps with {CONNECTIONS} connections", flush=True)

        # The busy client works throughout: 16 MiB written in 1 MiB requests and verified.
        data = rng.randbytes(16 * MiB)
        for off in range(0, 16 * MiB, MiB):
            busy.pwrite(data[off:off + MiB], off)
        expect(busy.pread(16 * MiB, 0) == data, "the busy client's 16 MiB read back wrong")

        # Every idle connection still answers (each wakes up and goes idle again).
        for i, c in enumerate(idle):
            expect(c.read(0, 4096) == data[:4096], f"idle connection {i + 1} read wrong data")
        for c in idle:
            c.close()
        busy.shutdown()
        wait_clients(0, PATIENCE, "after closing every connection")


# ---------------------------------------------------------------------------
# Helpers come for a backlog of costly requests and leave when it is gone
# ---------------------------------------------------------------------------

def check_helpers():
    @check("bursts of pipelined 64 KiB writes with idle pauses: right data, helpers leave")
    def _():
        base_threads = threads()
        h = nbd.NBD()
        h.connect_unix(SOCK)
        mirror = {}
        peak = 0
        for burst in range(3):
            # 32 writes in flight: a backlog of costly (zstd, 64 KiB) requests for the helpers.
            for i in range(32):
                data = rng.randbytes(32 * 1024) * 2
                off = (burst * 32 + i) * 64 * 1024
                h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(data)), off)
                mirror[off] = data
            while h.aio_in_flight() > 0:
                h.poll(-1)
                peak = max(peak, threads() - base_threads)
            for off in list(mirror)[-32:]:
                expect(h.pread(64 * 1024, off) == mirror[off], f"burst {burst}: data at {off}")
            # Idle: the helpers leave and the connection gives its buffers back.
            deadline = time.monotonic() + PATIENCE
            while threads() > base_threads + 1 and time.monotonic() < deadline:
                time.sleep(0.2)
            expect(threads() <= base_threads + 1,
                   f"after burst {burst}: {threads()} threads for one idle connection "
                   f"(the server had {base_threads} without it)")
        for off, data in mirror.items():
            expect(h.pread(64 * 1024, off) == data, f"data at {off} after the bursts")
        h.shutdown()
        print(f"# at most {peak} threads for the connection during the bursts (--threads 4)",
              flush=True)


# ---------------------------------------------------------------------------
# The control socket is not served on the accept loop
# ---------------------------------------------------------------------------

def check_control():
    @check("a control peer trickling one byte per second delays no one and is dropped")
    def _():
        stop = threading.Event()
        dropped = []

        def trickle():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(CTL)
            start = time.monotonic()
            try:
                while not stop.is_set():
                    s.send(b"g")  # "get ..." without ever finishing the line
                    if stop.wait(1.0):
                        break
                    if closed_by_server(s):
                        dropped.append(time.monotonic() - start)
                        break
            except (BrokenPipeError, ConnectionResetError):
                dropped.append(time.monotonic() - start)
            s.close()

        peer = threading.Thread(target=trickle)
        peer.start()
        try:
            time.sleep(1.5)  # the peer has started its request
            c = Raw(SOCK, timeout=3.0)  # greeting within 3 s (raises otherwise)
            c.go()
            c.read(0, 4096)
            c.close()
            answer = control(CTL, "get disksize", timeout=3.0)
            expect(answer.startswith("ok\n"), f"control request during the trickle: {answer!r}")
            peer.join(timeout=PATIENCE + 5)
            expect(dropped, f"the trickling control peer was still connected after {PATIENCE + 5:.0f} s")
            print(f"# trickling control peer dropped after {dropped[0]:.1f} s", flush=True)
        finally:
            stop.set()
            peer.join()


{"payload": check_payload, "handshake-send": check_handshake_send, "idle": check_idle,
 "helpers": check_helpers, "control": check_control}[CHECK]()
finish(CHECK)
