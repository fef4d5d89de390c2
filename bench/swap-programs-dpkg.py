#!/usr/bin/env python3
# swap-programs-dpkg.py - the python3 workload of bench/vm-swap-programs.sh: builds, in the heap,
# an index of a Debian system's packages from a copy of dpkg's database (the status file, the
# info/*.list file lists and info/*.md5sums) and writes it as one JSON document to stdout.
# The structure is held whole until it is written (json.dumps builds the text in memory too):
# the program's footprint is what the swap benchmark pushes past the guest's memory.
#
#   swap-programs-dpkg.py DPKG_DIR COPIES
#
# COPIES (a decimal number) scales it: copy k (from 0) is the same database with every package
# name suffixed "~<k>" and every path prefixed "/k<k>" for k > 0, as if more systems were
# indexed; copy 0 is the database as it is; a fraction takes that share of the packages (in the
# status file's order) for the last copy. The output depends only on DPKG_DIR and COPIES (keys
# sorted, no set iterated), so the host's sha256 of it checks the guest's.
import json
import os
import sys


def stanzas(text):
    """The status file's paragraphs as dicts; continuation lines kept as lists of lines."""
    for block in text.split("\n\n"):
        fields, last = {}, None
        for line in block.split("\n"):
            if not line:
                continue
            if line[0] in " \t" and last is not None:
                fields.setdefault(last + ":lines", []).append(line[1:])
            else:
                key, _, value = line.partition(":")
                last = key
                fields[key] = value.strip()
        if "Package" in fields:
            yield fields


def relations(value, suffix):
    """Depends-like fields: a list of alternatives, each a list of [name, constraint]."""
    out = []
    for group in value.split(","):
        alts = []
        for alt in group.split("|"):
            alt = alt.strip()
            if not alt:
                continue
            name, _, rest = alt.partition(" ")
            alts.append([name + suffix, rest.strip("() ")])
        if alts:
            out.append(alts)
    return out


def read_lines(path):
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def load(dpkg):
    with open(os.path.join(dpkg, "status"), encoding="utf-8", errors="surrogateescape") as f:
        packages = list(stanzas(f.read()))
    info = os.path.join(dpkg, "info")
    lists, sums = {}, {}
    for p in packages:
        name, arch = p["Package"], p.get("Architecture", "")
        base = os.path.join(info, name)
        qualified = os.path.join(info, f"{name}:{arch}")
        lists[name] = read_lines(base + ".list") or read_lines(qualified + ".list")
        sums[name] = read_lines(base + ".md5sums") or read_lines(qualified + ".md5sums")
    return packages, lists, sums


def index_copy(k, packages, lists, sums, out):
    suffix = f"~{k}" if k else ""
    prefix = f"/k{k}" if k else ""
    for p in packages:
        name = p["Package"] + suffix
        record = {key: value for key, value in p.items() if not key.endswith(":lines")}
        record["Package"] = name
        desc = p.get("Description:lines", [])
        record["Description"] = {"summary": p.get("Description", ""), "long": desc,
                                  "words": len(" ".join(desc).split())}
        for field in ("Depends", "Pre-Depends", "Recommends", "Suggests", "Breaks",
                      "Conflicts", "Replaces", "Provides"):
            if field in p:
                record[field] = relations(p[field], suffix)
        if "Conffiles:lines" in p:
            record["Conffiles"] = {prefix + c.split()[0]: c.split()[-1]
                                   for c in p["Conffiles:lines"] if c.split()}
        files = [prefix + path for path in lists[p["Package"]]]
        record["files"] = files
        record["md5sums"] = {prefix + "/" + line[34:]: line[:32] for line in sums[p["Package"]]
                             if len(line) > 34}
        out["packages"][name] = record
        for path in files:
            out["owners"].setdefault(path, []).append(name)
            parent, _, leaf = path.rpartition("/")
            entry = out["dirs"].setdefault(parent or "/", {"entries": [], "packages": {}})
            entry["entries"].append(leaf)
            entry["packages"][name] = entry["packages"].get(name, 0) + 1
        for dep in record.get("Depends", []):
            for alt in dep:
                out["rdepends"].setdefault(alt[0], []).append(name)


def main():
    dpkg, copies = sys.argv[1], float(sys.argv[2])
    packages, lists, sums = load(dpkg)
    out = {"packages": {}, "owners": {}, "dirs": {}, "rdepends": {}}
    k = 0
    while k < copies:
        share = packages[:round(len(packages) * min(1.0, copies - k))]
        index_copy(k, share, lists, sums, out)
        k += 1
    out["summary"] = {"packages": len(out["packages"]), "paths": len(out["owners"]),
                      "dirs": len(out["dirs"]), "copies": copies}
    text = json.dumps(out, sort_keys=True)
    sys.stdout.buffer.write(text.encode("utf-8", "surrogateescape"))
    sys.stdout.buffer.write(b"\n")


if __name__ == "__main__":
    main()
