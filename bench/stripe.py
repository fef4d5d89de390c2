#!/usr/bin/python3
# stripe.py - a striping (raid0) or mirroring (raid1) NBD client for bench/scale-out.sh, in
# libnbd's Python binding: what md does over /dev/nbdN where the kernel has nbd, in user space
# where it has not. The disk is the servers' exports side by side, CHUNK bytes from each in
# turn (stripe), or the same bytes on every server (mirror). It writes FILE over the start
# of the disk, reads it back and checks it, keeping DEPTH requests of CHUNK bytes in flight
# over all servers; prints one JSON line with the seconds each phase took.
# Usage: stripe.py stripe|mirror FILE CHUNK DEPTH URI...
import json, sys, time

import nbd

mode, path, chunk, depth, uris = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
data = open(path, "rb").read()
handles = []
for uri in uris:
    h = nbd.NBD()
    h.set_uri_allow_local_file(True)
    h.connect_uri(uri)
    handles.append(h)
n = len(handles)
size = min(h.get_size() for h in handles) * (n if mode == "stripe" else 1)
assert len(data) % chunk == 0 and len(data) <= size, "FILE must be whole chunks, within the disk"


def place(index):
    """Where chunk `index` of the disk lives: [(handle, offset)]."""
    if mode == "stripe":
        return [(handles[index % n], (index // n) * chunk)]
    return [(h, index * chunk) for h in handles]


def in_flight():
    return sum(h.aio_in_flight() for h in handles)


def wait_below(limit):
    while in_flight() >= limit:
        for h in handles:
            if h.aio_in_flight() > 0:
                h.poll(0)
        busy = [h for h in handles if h.aio_in_flight() > 0]
        if busy and in_flight() >= limit:
            busy[0].poll(-1)


def run(write):
    buffers = []
    start = time.monotonic()
    for i in range(len(data) // chunk):
        for h, offset in place(i):
            wait_below(depth)
            if write:
                h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(data[i * chunk:(i + 1) * chunk])), offset)
            elif h is place(i)[0][0]:  # a mirror is read from its first server only
                b = nbd.Buffer(chunk)
                h.aio_pread(b, offset)
                buffers.append((i, b))
    wait_below(1)
    took = time.monotonic() - start
    if not write:
        for i, b in buffers:
            if b.to_bytearray() != data[i * chunk:(i + 1) * chunk]:
                sys.exit("stripe.py: chunk %d read back differs" % i)
    return took


result = {"mode": mode, "servers": n, "bytes": len(data), "chunk": chunk, "depth": depth}
result["write_s"] = run(True)
result["read_s"] = run(False)
for h in handles:
    h.shutdown()
print(json.dumps(result))
