#!/usr/bin/python3
# checker.py - one soak client: random verified I/O on its own region of a uzram NBD export,
# with a journal so that a SIGKILL at any instant and a restart still check every byte.
"""
Usage: checker.py run    URI STATE_DIR START LENGTH SEED DEADLINE
       checker.py verify URI STATE_DIR START LENGTH SEED

The model is one generation number per 512-byte sector of the region; the
bytes of a sector are a pure function of (sector, generation), so the model
stays small and anything read can be checked. Generation 0 is zeros. The
content kinds of a generation exercise every storage path of the engine:
incompressible, compressible text, same-filled pages (one repeated word),
and a small palette of pages that repeat across the region (dedup).

Before each write-like request the client appends "I <op> <start> <count>
<gen>" to STATE_DIR/journal and after its reply "A" (or "F" when the server
refused it). A client killed in between leaves an intent without an answer:
at the next start the client reads that range and requires each 4 KiB page
of it to be wholly old or wholly new (an NBD write is all or nothing per
page here), then takes what the device holds. The final `verify` mode
resolves the journal the same way and reads back the whole region.

Prints one line at exit: "ops=N bytes_verified=N errors=N". Exit status 1 on
any mismatch or unexpected error (the message on stderr says which).
"""
import errno
import hashlib
import os
import random
import struct
import sys
import time

import nbd

SECTOR = 512
PAGE = 4096
SECTORS_PER_PAGE = PAGE // SECTOR
MAX_REQUEST = 256 * 1024
ZERO_SECTOR = bytes(SECTOR)
KINDS = 5
PALETTE = 4


def sector_bytes(sector, gen):
    """The 512 bytes sector `sector` (absolute on the disk) holds at generation `gen`."""
    if gen == 0:
        return ZERO_SECTOR
    kind = gen % KINDS
    if kind == 0:  # incompressible
        seed = hashlib.blake2b(struct.pack("<QQ", sector, gen), digest_size=16).digest()
        return random.Random(seed).randbytes(SECTOR)
    if kind == 1:  # compressible text
        line = b"uzram soak sector %d generation %d\n" % (sector, gen)
        return (line * (SECTOR // len(line) + 1))[:SECTOR]
    if kind == 2:  # same-filled: one 8-byte word repeated over whole pages
        return struct.pack("<Q", gen * 0x9E3779B97F4A7C15 % (1 << 64)) * (SECTOR // 8)
    if kind == 3:  # palette: the same pages at many offsets (dedup shares them)
        which = gen // KINDS % PALETTE
        line = b"palette page %d part %d " % (which, sector % SECTORS_PER_PAGE)
        return (line * (SECTOR // len(line) + 1))[:SECTOR]
    # half zeros, half random: partly compressible
    seed = hashlib.blake2b(struct.pack("<QQ", sector, gen), digest_size=16).digest()
    return bytes(SECTOR // 2) + random.Random(seed).randbytes(SECTOR // 2)


class Checker:
    def __init__(self, uri, state_dir, start, length, seed):
        self.uri = uri
        self.start = start
        self.sectors = length // SECTOR
        self.rng = random.Random(seed ^ os.getpid() ^ int(time.time() * 1000))
        self.gens = [0] * self.sectors
        self.journal_path = os.path.join(state_dir, "journal")
        self.stats_path = os.path.join(state_dir, "stats")
        self.next_gen = 1
        self.ops = 0
        self.bytes_verified = 0
        self.errors = 0
        self.handle = None
        self.pending = None  # an intent without an answer, from a previous life

    # -- journal ------------------------------------------------------------------------------

    def load_journal(self):
        if not os.path.exists(self.journal_path):
            return
        with open(self.journal_path, "rb") as f:
            data = f.read()
        intent = None
        for line in data.split(b"\n")[:-1]:  # a torn last line has no newline: ignore it
            fields = line.split()
            if not fields:
                continue
            if fields[0] == b"I":
                intent = (fields[1].decode(), int(fields[2]), int(fields[3]), int(fields[4]))
                self.next_gen = max(self.next_gen, intent[3] + 1)
            elif fields[0] == b"A" and intent:
                self.apply(intent)
                intent = None
            elif fields[0] == b"F":
                intent = None
            elif fields[0] == b"R" and intent:  # resolved after a kill: gens listed
                first = intent[1]
                for i, g in enumerate(fields[1:]):
                    self.gens[first + i] = int(g)
                intent = None
        self.pending = intent
        # Generations must stay unique across lives, even for refused writes.
        self.next_gen += 1000

    def journal(self, text):
        fd = os.open(self.journal_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, text.encode() + b"\n")
        finally:
            os.close(fd)

    def apply(self, intent):
        op, first, count, gen = intent
        for i in range(first, first + count):
            self.gens[i] = gen if op == "W" else 0

    # -- device access ------------------------------------------------------------------------

    def connect(self):
        self.handle = nbd.NBD()
        self.handle.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
        self.handle.connect_uri(self.uri)

    def expected(self, first, count, gens=None):
        gens = gens or self.gens
        base = self.start // SECTOR
        return b"".join(sector_bytes(base + i, gens[i]) for i in range(first, first + count))

    def fail(self, message):
        self.errors += 1
        sys.stderr.write("checker %d: %s\n" % (self.start, message))
        self.write_stats()
        sys.exit(1)

    def read_check(self, first, count):
        data = self.handle.pread(count * SECTOR, self.start + first * SECTOR)
        want = self.expected(first, count)
        if data != want:
            bad = next(i for i in range(count)
                       if data[i * SECTOR:(i + 1) * SECTOR] != want[i * SECTOR:(i + 1) * SECTOR])
            self.fail("sector %d (disk offset %d) differs from the model (generation %d)"
                      % (first + bad, self.start + (first + bad) * SECTOR, self.gens[first + bad]))
        self.bytes_verified += len(data)

    def resolve_pending(self):
        """After a kill: the last write-like request may or may not have happened."""
        if self.pending is None:
            return
        op, first, count, gen = self.pending
        new_gens = list(self.gens)
        for i in range(first, first + count):
            new_gens[i] = gen if op == "W" else 0
        data = self.handle.pread(count * SECTOR, self.start + first * SECTOR)
        old = self.expected(first, count)
        new = self.expected(first, count, new_gens)
        resolved = []
        # Per page of the disk: wholly old or wholly new (sectors equal in both count as either).
        page_state = {}
        for i in range(count):
            got = data[i * SECTOR:(i + 1) * SECTOR]
            is_old = got == old[i * SECTOR:(i + 1) * SECTOR]
            is_new = got == new[i * SECTOR:(i + 1) * SECTOR]
            if not is_old and not is_new:
                self.fail("after a kill, sector %d is neither its old nor its new content"
                          % (first + i))
            page = (self.start // SECTOR + first + i) // SECTORS_PER_PAGE
            if is_old != is_new:
                state = "new" if is_new else "old"
                if page_state.setdefault(page, state) != state:
                    self.fail("after a kill, page %d holds old and new sectors (torn write)" % page)
            resolved.append(new_gens[first + i] if is_new else self.gens[first + i])
        for i, g in enumerate(resolved):
            self.gens[first + i] = g
        self.journal("R " + " ".join(str(g) for g in resolved))
        self.bytes_verified += len(data)
        self.pending = None

    def random_range(self):
        if self.rng.random() < 0.7:  # page-aligned, the common case for file systems
            pages = self.sectors // SECTORS_PER_PAGE
            first_page = self.rng.randrange(pages)
            count = min(self.rng.choice((1, 1, 2, 4, 8, 16, 32, 64)), pages - first_page)
            return first_page * SECTORS_PER_PAGE, count * SECTORS_PER_PAGE
        first = self.rng.randrange(self.sectors)
        count = min(self.rng.randint(1, MAX_REQUEST // SECTOR), self.sectors - first)
        return first, count

    def write_like(self, op, first, count):
        gen = self.next_gen
        self.next_gen += 1
        self.journal("I %s %d %d %d" % (op, first, count, gen))
        offset = self.start + first * SECTOR
        try:
            if op == "W":
                base = self.start // SECTOR
                data = b"".join(sector_bytes(base + i, gen) for i in range(first, first + count))
                self.handle.pwrite(data, offset)
            elif op == "T":
                self.handle.trim(count * SECTOR, offset)
            else:
                self.handle.zero(count * SECTOR, offset)
        except nbd.Error as e:
            self.fail("%s at %d+%d failed: %s" % (op, offset, count * SECTOR, e))
        self.journal("A")
        self.apply((op, first, count, gen))

    def block_status_check(self, first, count):
        zero_ranges = []

        def extent(metacontext, offset, entries, err):
            if metacontext == nbd.CONTEXT_BASE_ALLOCATION:
                position = offset
                for i in range(0, len(entries), 2):
                    if entries[i + 1] & nbd.STATE_ZERO:
                        zero_ranges.append((position, entries[i]))
                    position += entries[i]
            return 0

        self.handle.block_status(count * SECTOR, self.start + first * SECTOR, extent)
        for offset, length in zero_ranges:
            end = min(offset + length, self.start + (first + count) * SECTOR)
            for s in range((offset - self.start) // SECTOR, (end - self.start) // SECTOR):
                if self.gens[s] != 0 and sector_bytes(self.start // SECTOR + s,
                                                      self.gens[s]) != ZERO_SECTOR:
                    self.fail("BLOCK_STATUS says sector %d is zero; it holds generation %d"
                              % (s, self.gens[s]))

    def step(self):
        first, count = self.random_range()
        choice = self.rng.random()
        if choice < 0.45:
            self.write_like("W", first, count)
        elif choice < 0.80:
            self.read_check(first, count)
        elif choice < 0.87:
            self.write_like("T", first, count)
        elif choice < 0.93:
            self.write_like("Z", first, count)
        elif choice < 0.97:
            self.block_status_check(first, count)
        else:
            self.handle.flush()
        self.ops += 1

    def write_stats(self):
        # Summed by soak.sh over every life of this client.
        with open(self.stats_path, "a") as f:
            f.write("%d %d %d\n" % (self.ops, self.bytes_verified, self.errors))


def main():
    mode, uri, state_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    start, length, seed = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    os.makedirs(state_dir, exist_ok=True)
    checker = Checker(uri, state_dir, start, length, seed)
    checker.load_journal()
    checker.connect()
    checker.resolve_pending()
    if mode == "run":
        deadline = float(sys.argv[7])
        last_stats = time.time()
        while time.time() < deadline:
            checker.step()
            # Stats of a life that ends in SIGKILL are lost unless written now and then.
            if time.time() - last_stats > 2:
                checker.write_stats()
                checker.ops = checker.bytes_verified = 0
                last_stats = time.time()
    else:
        for first in range(0, checker.sectors, MAX_REQUEST // SECTOR):
            checker.read_check(first, min(MAX_REQUEST // SECTOR, checker.sectors - first))
    checker.handle.shutdown()
    checker.write_stats()
    print("ops=%d bytes_verified=%d errors=%d" % (checker.ops, checker.bytes_verified,
                                                  checker.errors))


if __name__ == "__main__":
    main()
