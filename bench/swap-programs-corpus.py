#!/usr/bin/env python3
# swap-programs-corpus.py - the text GNU sort sorts in bench/vm-swap-programs.sh: real files of
# this machine, not generated or repeated bytes (a swap device that deduplicates or compresses
# must see what a real program holds).
#
#   swap-programs-corpus.py corpus OUT      writes the corpus to OUT, its make-up to OUT.manifest
#   swap-programs-corpus.py cut CORPUS BYTES OUT
#                                           OUT: the first BYTES of CORPUS, cut at a line's end;
#                                           past its end, copies of it with a prefix on each line
#
# The corpus: C headers (/usr/include, *.h), documentation (/usr/share/doc: every text file,
# gzip'd ones uncompressed), man pages (/usr/share/man, uncompressed roff), python sources
# (/usr/lib/python3*, *.py) and perl sources (*.pm, *.pl, *.pod). Files with a NUL byte are left
# out, and so is a file whose bytes an earlier one had (packages of one source ship the same
# changelog and copyright: a real system holds them, a program reading them once would not).
# The five sources are interleaved in proportion to their sizes, file by file (each file
# placed at the middle of its byte range within its source), so that any prefix holds the
# same mix; within a source, files come in path order. Copy k (from 1) past the end has "~k "
# before every line: no page of it equals a page of the first copy.
import glob
import hashlib
import gzip
import os
import sys

SOURCES = [
    ("C headers", ["/usr/include"], (".h",)),
    ("documentation", ["/usr/share/doc"], None),
    ("man pages", ["/usr/share/man"], (".gz",)),
    ("python sources", sorted(glob.glob("/usr/lib/python3*")), (".py",)),
    ("perl sources", ["/usr/share/perl", "/usr/share/perl5"]
     + sorted(glob.glob("/usr/lib/x86_64-linux-gnu/perl*")), (".pm", ".pl", ".pod")),
]


def paths(dirs, suffixes):
    for top in dirs:
        for root, subdirs, files in os.walk(top):
            subdirs.sort()
            for name in sorted(files):
                path = os.path.join(root, name)
                if os.path.isfile(path) and not os.path.islink(path) and (
                        suffixes is None or name.endswith(suffixes)):
                    yield path


def text_of(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
        if path.endswith(".gz"):
            data = gzip.decompress(data)
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    if not data or b"\0" in data:
        return None
    return data if data.endswith(b"\n") else data + b"\n"


def corpus(out):
    placed, manifest, seen = [], [], set()
    for name, dirs, suffixes in SOURCES:
        texts = []
        for path in paths(dirs, suffixes):
            t = text_of(path)
            digest = t and hashlib.sha256(t).digest()
            if t is None or digest in seen:
                continue
            seen.add(digest)
            texts.append(t)
        total = sum(len(t) for t in texts) or 1
        done = 0
        for t in texts:
            placed.append(((done + len(t) / 2) / total, len(manifest), t))
            done += len(t)
        manifest.append(f"{name}: {len(texts)} files, {done} bytes, from {' '.join(dirs)}")
    placed.sort(key=lambda p: (p[0], p[1]))
    with open(out, "wb") as f:
        for _, _, t in placed:
            f.write(t)
    with open(out + ".manifest", "w") as f:
        f.write("\n".join(manifest) + "\n")


def cut(src, size, out):
    with open(src, "rb") as f:
        data = f.read()
    if not data.endswith(b"\n"):
        sys.exit(f"{src}: empty, or not whole lines")
    with open(out, "wb") as f:
        left, copy = size, 0
        while left > 0:
            chunk = data
            if copy:
                chunk = b"".join(b"~%d %s\n" % (copy, line) for line in data.split(b"\n")[:-1])
            if len(chunk) > left:
                chunk = chunk[:chunk.rfind(b"\n", 0, left) + 1]
                left = 0
            f.write(chunk)
            left -= len(chunk)
            copy += 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["corpus"] and len(sys.argv) == 3:
        corpus(sys.argv[2])
    elif sys.argv[1:2] == ["cut"] and len(sys.argv) == 5:
        cut(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit("usage: swap-programs-corpus.py corpus OUT | cut CORPUS BYTES OUT")
