#!/usr/bin/python3
# report.py - turns one benchmark run's results (bench/run.sh's folder of JSON and text) into the
# markdown of docs/BENCHMARKS.md: targets table, throughput matrix with ratios, memory table.
#
# Usage: /usr/bin/python3 bench/report.py RESULTS_DIR [--plots REL_DIR] [--doc docs/BENCHMARKS.md]
# Reads RESULTS_DIR/{machine,matrix,memory,micro,micro-dedup,recompress,writeback}.json and zram-compare.txt (each
# optional: a missing part is reported as not run), writes RESULTS_DIR/results.md and prints it.
# With --doc, replaces the part of that file between the RESULTS markers with the same text.
# With --part attach: RESULTS_DIR/attach.json (bench/attach.sh) alone, into attach.md and the
# ATTACH RESULTS part of --doc.
import argparse
import json
import os
import re
import sys

BEGIN = "<!-- BEGIN RESULTS (written by bench/report.py; do not edit by hand) -->"
END = "<!-- END RESULTS -->"

# bench/attach.sh's part has markers of its own: it runs alone or as a part of bench/run.sh.
ATTACH_BEGIN = "<!-- BEGIN ATTACH RESULTS (written by bench/report.py --part attach; do not edit by hand) -->"
ATTACH_END = "<!-- END ATTACH RESULTS -->"
ATTACH_SIDES = (("attach", "`uzram attach` (FUSE file in the server + loop, direct I/O)"),
                ("attach-uring", "`uzram attach`, FUSE over io_uring (Linux 6.14+, `enable_uring`)"),
                ("nbdfuse", "nbdfuse + `losetup --direct-io=on` (same server)"),
                ("zram", "kernel zram lz4 (`/dev/zram0`)"))

SIDE_NAMES = {
    "uzram-off": "uzram lz4",
    "uzram-on": "uzram lz4 dedup",
    "nbdkit-sparse": "nbdkit sparse",
    "nbdkit-zstd": "nbdkit zstd",
    "zram": "kernel zram lz4",
}
UZRAM_SIDES = ("uzram-off", "uzram-on")
PEERS = ("nbdkit-sparse", "nbdkit-zstd", "zram")
WORKLOAD_NAMES = {
    "read": "seq read", "write": "seq write", "rw": "seq mixed 70/30",
    "randread": "rand read", "randwrite": "rand write", "randrw": "rand mixed 70/30",
}
BUFFER_NAMES = {"static": "static pattern (every page identical)", "half": "50% compressible"}


def load_json(directory, name):
    path = os.path.join(directory, name)
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def size(n):
    """Bytes as MiB (or KiB below one MiB), for tables people read."""
    if n is None:
        return "-"
    if abs(n) >= 1 << 20:
        return "%.1f MiB" % (n / (1 << 20))
    return "%.1f KiB" % (n / 1024)


def ratio_text(value, digits=2):
    return "-" if value is None else "%.*fx" % (digits, value)


class Targets:
    """Rows of the "target / measured / met" table."""

    def __init__(self):
        self.rows = []

    def add(self, issue, target, value, want, at_most=False, text=None, note=""):
        if value is None:
            met = "not measured"
        else:
            ok = value <= want if at_most else value >= want
            met = "**yes**" if ok else "**no**"
        if text is None:
            text = "-" if value is None else "%.3f" % value
        self.rows.append((issue, target, text, met, note))

    def markdown(self):
        out = ["| issue | target | measured | met | notes |", "| --- | --- | --- | --- | --- |"]
        out += ["| %s | %s | %s | %s | %s |" % row for row in self.rows]
        return out


def matrix_lookup(matrix):
    table = {}
    if matrix:
        for r in matrix["results"]:
            table[(r["buffer"], r["workload"], r["jobs"], r["side"])] = r
    return table


def cell_value(row):
    if row is None:
        return None
    return row.get("MBps")


def zram_compare_ratio(text, label):
    """Value of a judge line of bench/zram-compare.sh, e.g. "write, 'half' data: uzram / zram"."""
    if not text:
        return None
    for line in text.splitlines():
        if line.startswith(label):
            m = re.match(r"\s*([0-9.]+)", line[len(label):].strip())
            if m:
                return float(m.group(1))
    return None


def zram_compare_skip(text):
    if not text:
        return "bench/zram-compare.sh did not run"
    m = re.search(r"kernel zram: skipped: (.*)", text)
    return m.group(1) if m else None


def targets_section(machine, matrix, memory, micro, dedup, zc_text, rc=None, wb=None):
    t = Targets()
    quick = machine.get("mode") == "quick"
    # ---- issue 2: engine
    skip = zram_compare_skip(zc_text)
    w = zram_compare_ratio(zc_text, "write, 'half' data: uzram / zram")
    r = zram_compare_ratio(zc_text, "read,  'half' data: uzram / zram")
    wf = zram_compare_ratio(zc_text, "write, fio data: uzram / zram (fio, gross)")
    rf = zram_compare_ratio(zc_text, "read,  fio data: uzram / zram (fio)")
    note = "kernel zram skipped: %s" % skip if skip else "same bytes (`uzram bench --dump-data half`); fio's own 50%% data: %s" % (
        "%.2fx" % wf if wf is not None else "-")
    t.add("2 engine", "lz4, 50% data, 1 thread: engine write >= 1.5x kernel zram", w, 1.5,
          text=ratio_text(w), note=note)
    note = "kernel zram skipped: %s" % skip if skip else "fio's own 50%% data: %s" % (
        "%.2fx" % rf if rf is not None else "-")
    t.add("2 engine", "lz4, 50% data, 1 thread: engine read >= 2x kernel zram", r, 2.0,
          text=ratio_text(r), note=note)
    same = None
    zero = None
    if micro:
        for row in micro.get("same_filled_check", []):
            if row["page"].startswith("same-filled page"):
                same = row["GBps"]
            if row["page"].startswith("zero page"):
                zero = row["GBps"]
    t.add("2 engine", "same-filled check of a full page >= 20 GB/s", same, 20.0,
          text="-" if same is None else "%.1f GB/s" % same,
          note="" if zero is None else "zero page: %.1f GB/s" % zero)
    pool = None
    pool_note = "usr-lib data set not measured"
    if memory:
        for ds in memory["datasets"]:
            side = ds.get("sides", {}).get("uzram-off", {})
            if ds["name"] == "usr-lib" and side.get("compr_data_size"):
                pool = side["mem_used_total"] / side["compr_data_size"]
                zr = ds["sides"].get("zram", {})
                pool_note = "%s of /usr/lib" % size(ds["bytes"])
                if zr.get("compr_data_size"):
                    pool_note += "; kernel zram's zsmalloc: %.4f" % (zr["mem_used_total"] / zr["compr_data_size"])
                if quick:
                    pool_note += "; quick mode: small data leaves partly filled spans"
    t.add("2 engine", "pool: mem_used_total / compr_data_size <= 1.03 on /usr/lib", pool, 1.03,
          at_most=True, text="-" if pool is None else "%.4f" % pool, note=pool_note)
    # ---- issue 3: dedup
    checks = {c["check"]: c for c in (dedup or {}).get("dedup_checks", [])}

    def check(name):
        c = checks.get(name)
        return None if c is None else c.get("value")
    t.add("3 dedup", "unique pages: dedup-on / off write >= 0.9 (1 thread)", check("unique_write_on_off_1t"), 0.9,
          note="2 threads: %s" % ratio_text(check("unique_write_on_off_2t"), 3))
    t.add("3 dedup", "identical pages: dedup-on / off write >= 1.0 (1 thread)", check("identical_write_on_off_1t"), 1.0)
    t.add("3 dedup", "identical pages, dedup on: 2 threads / 1 thread write >= 1.5",
          check("identical_dedup_on_write_2t_1t"), 1.5,
          note="dedup off: %s (2 CPUs shared with the load)" % ratio_text(check("identical_dedup_off_write_2t_1t"), 3))
    detail = checks.get("dedup_meta_detail", {})
    t.add("3 dedup", "dedup metadata <= 24 B per unique object", check("dedup_meta_bytes_per_object"), 24.0,
          at_most=True, text=("-" if check("dedup_meta_bytes_per_object") is None
                              else "%.2f B" % check("dedup_meta_bytes_per_object")),
          note=("meta_data_size %s B / %s objects" % (detail.get("meta_data_size"), detail.get("unique_objects"))
                if detail else ""))
    if memory:
        for ds in memory["datasets"]:
            if ds["name"] not in ("build-tree", "py-releases"):
                continue
            off = ds.get("sides", {}).get("uzram-off", {})
            on = ds.get("sides", {}).get("uzram-on", {})
            saved = None
            if off.get("memory") and on.get("memory"):
                saved = 1 - on["memory"] / off["memory"]
            label = {"build-tree": "source tree + build output",
                     "py-releases": "two releases of one source tree"}[ds["name"]]
            t.add("3 dedup", "real data (%s, `%s`): dedup saves vs dedup off; seed: 23-42%% on build outputs"
                  % (label, ds["name"]), None if saved is None else saved * 100, 23.0,
                  text="-" if saved is None else "%.1f%%" % (saved * 100),
                  note=ds.get("skipped", "memory incl. dedup metadata; the seed's data were kernel and Android build trees"))
    # ---- issue 4: NBD
    table = matrix_lookup(matrix)
    jobs = (matrix or {}).get("config", {}).get("jobs", [1, 2])
    for workload, peer, want in (("randwrite", "nbdkit-zstd", 3.0), ("randwrite", "nbdkit-sparse", 1.0),
                                 ("randread", "nbdkit-sparse", 1.0)):
        for j in jobs[:2]:
            mine = cell_value(table.get(("half", workload, j, "uzram-off")))
            theirs = cell_value(table.get(("half", workload, j, peer)))
            value = mine / theirs if mine and theirs else None
            peer_row = table.get(("half", workload, j, peer), {})
            note = "%s vs %s MB/s" % ("%.0f" % mine if mine else "-", "%.0f" % theirs if theirs else "-")
            if peer_row.get("skipped"):
                note = "%s skipped: %s" % (peer, peer_row["skipped"])
            t.add("4 NBD", "fio nbd %s, 50%% data, %d job%s, iodepth 16: uzram >= %gx %s"
                  % (workload, j, "" if j == 1 else "s", want, SIDE_NAMES[peer]),
                  value, want, text=ratio_text(value), note=note)
    # ---- issue 12: recompression
    if rc and not rc.get("skipped"):
        mem, zram, direct = recompress_numbers(rc)
        rec, recd = mem.get("recompress"), mem.get("recompress-dict")
        t.add("12 recompression", "lz4 + dedup + recompression to zstd within 3% of zstd + dedup written directly",
              rec / direct if rec and direct else None, 1.03, at_most=True,
              text=ratio_text(rec / direct, 3) if rec and direct else "-",
              note="vs kernel zram lz4: %s" % (ratio_text(rec / zram, 3) if rec and zram else "-"))
        t.add("12 recompression", "with a trained dictionary <= 0.50x kernel zram lz4",
              recd / zram if recd and zram else None, 0.50, at_most=True,
              text=ratio_text(recd / zram, 3) if recd and zram else "-",
              note="zstd + dedup direct: %s" % (ratio_text(direct / zram, 3) if direct and zram else "-"))
        t.add("12 recompression", "foreground 4 KiB randwrite with the thread busy >= 0.9x idle",
              rc.get("randwrite_busy_vs_idle"), 0.9, text=ratio_text(rc.get("randwrite_busy_vs_idle"), 3),
              note="medians of %d interleaved rounds, recompress_rate %s" % (
                  rc["rounds"], rc.get("busy_rate") or rc.get("rate", "-")))
        total = recompress_total(rc, "recompress-dict-group")
        t.add("27 cold memory", "lz4 + dedup + background recompression, dictionary and bundles of %s "
              "<= 0.45x kernel zram lz4 (index and dictionary counted)" % rc.get("group", "-"),
              total / zram if total and zram else None, 0.45, at_most=True,
              text=ratio_text(total / zram, 3) if total and zram else "-",
              note="without bundles: %s" % (
                  ratio_text(recompress_total(rc, "recompress-dict") / zram, 3)
                  if recompress_total(rc, "recompress-dict") and zram else "-"))
    else:
        t.add("12 recompression", "recompression memory and foreground throughput", None, 0,
              note=(rc or {}).get("skipped", "recompress part not run"))
    # ---- issue 13: writeback
    if wb and not wb.get("skipped") and wb.get("reads") and wb.get("space"):
        x4, x16, kit = wb["reads"]["x4"], wb["reads"]["x16"], wb["reads"]["nbdkit"]
        t.add("13 writeback", "--writeback-when-full serves a working set of 4x mem_limit with 0 errors",
              x4["errors"], 0, at_most=True, text="%d errors" % x4["errors"],
              note="%s stored, mem_limit %s; %.0f%% of its reads from disk"
                   % (size(wb["set_bytes"]), size(x4["mem_limit"]), 100 * x4["from_disk"]))
        lz4 = wb["space"].get("lz4")
        value = lz4["file_allocated"] / lz4["raw_bytes"] if lz4 and lz4["raw_bytes"] else None
        t.add("13 writeback", "disk space <= 0.6x the raw data written back (build image, lz4)",
              value, 0.6, at_most=True, text=ratio_text(value, 3),
              note="lz4 + dedup %s, recompressed to zstd %s" % tuple(
                  ratio_text(wb["space"][k]["file_allocated"] / wb["space"][k]["raw_bytes"], 3)
                  if k in wb["space"] and wb["space"][k]["raw_bytes"] else "-"
                  for k in ("lz4-dedup", "recompressed")))
        value = x16["iops"] / kit["iops"] if kit["iops"] else None
        qemu = wb["reads"].get("qemu")
        t.add("13 writeback", "random 4 KiB reads, working set mostly on disk (16x mem_limit) >= 0.8x nbdkit file",
              value, 0.8, text=ratio_text(value),
              note="%.0f%% from disk (nbdkit: %.2f disk KiB a read); vs qemu-nbd O_DIRECT %s; 4x mem_limit: %s" % (
                  100 * x16["from_disk"], kit.get("disk_bytes_per_read", 0) / 1024,
                  ratio_text(x16["iops"] / qemu["iops"]) if qemu and qemu["iops"] else "-",
                  ratio_text(x4["iops"] / kit["iops"]) if kit["iops"] else "-"))
    else:
        t.add("13 writeback", "writeback disk space and reads", None, 0,
              note=(wb or {}).get("skipped", "writeback part not run"))
    return t.markdown()


def matrix_section(matrix, plots):
    out = []
    if not matrix:
        return ["The throughput matrix did not run."]
    cfg = matrix["config"]
    sides = [s["side"] for s in matrix["sides"]]
    ran = [s["side"] for s in matrix["sides"] if not s["skipped"]]
    out.append("fio, 4 KiB blocks, iodepth %d, %d s per run, region %s, jobs %s; MB/s = 10^6 bytes/s "
               "(read + write for the mixes). NBD sides: `--ioengine=nbd` over a Unix socket, one "
               "connection per job; kernel zram: `--ioengine=libaio --direct=1` on /dev/zram0. "
               "Each cell ran all sides back to back, the order rotated by one side per cell. "
               "Matrix time: %d s." % (cfg["iodepth"], cfg["runtime_s"], size(cfg["region_bytes"]),
                                       ", ".join(map(str, cfg["jobs"])), cfg["seconds"]))
    out.append("")
    for s in matrix["sides"]:
        if s["skipped"]:
            out.append("- %s: **skipped**: %s" % (SIDE_NAMES.get(s["side"], s["side"]), s["skipped"]))
    if any(s["skipped"] for s in matrix["sides"]):
        out.append("")
    table = matrix_lookup(matrix)
    peers = [p for p in PEERS if p in ran]
    for buffer in ("static", "half"):
        cells = sorted({(r["workload"], r["jobs"]) for r in matrix["results"] if r["buffer"] == buffer},
                       key=lambda c: (list(WORKLOAD_NAMES).index(c[0]), c[1]))
        if not cells:
            continue
        out.append("**Buffer: %s** (`%s`)" % (BUFFER_NAMES[buffer], cfg["buffers"][buffer]))
        out.append("")
        head = ["workload", "jobs"] + [SIDE_NAMES.get(s, s) for s in sides]
        head += ["%s / best peer" % SIDE_NAMES[s] for s in UZRAM_SIDES if s in ran]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + " --- |" * 2 + " ---: |" * (len(head) - 2))
        for workload, j in cells:
            values = {s: cell_value(table.get((buffer, workload, j, s))) for s in sides}
            best = max((v for v in values.values() if v), default=None)
            row = [WORKLOAD_NAMES[workload], str(j)]
            for s in sides:
                r = table.get((buffer, workload, j, s), {})
                v = values[s]
                if r.get("skipped"):
                    row.append("skipped")
                elif r.get("failed"):
                    row.append("failed")
                elif v is None:
                    row.append("-")
                else:
                    row.append(("**%.0f**" if v == best else "%.0f") % v)
            best_peer = max((values[p] for p in peers if values.get(p)), default=None)
            for s in UZRAM_SIDES:
                if s in ran:
                    row.append(ratio_text(values[s] / best_peer) if values[s] and best_peer else "-")
            out.append("| " + " | ".join(row) + " |")
        out.append("")
    failures = [r for r in matrix["results"] if r.get("failed")]
    for r in failures:
        out.append("- failed: %s %s %s jobs %d: %s" % (r["side"], r["buffer"], r["workload"], r["jobs"], r["failed"]))
    if failures:
        out.append("")
    out.append("Best peer: the fastest of %s in that row; bold: the fastest side of the row." %
               ", ".join(SIDE_NAMES[p] for p in peers))
    if plots:
        out.append("")
        out.append("![throughput by jobs](%s/throughput.png)" % plots)
    return out


def memory_section(memory, plots):
    if not memory:
        return ["The memory table did not run."]
    out = ["Every side stores the same bytes: the data set's file, written whole (zero pages "
           "too). Memory = mem_used_total + meta_data_size (the dedup index) for uzram, "
           "mem_used_total for kernel zram, and the growth of the server's VmRSS for nbdkit zstd "
           "(no mm_stat there: marked *RSS*). Savings = 1 - memory / original bytes. "
           "Memory table time: %d s." % memory["seconds"], ""]
    head = ["data set", "side", "orig", "compr", "mem_used_total", "same_pages", "dup_data_size",
            "meta_data_size", "savings", "memory vs kernel zram", "process RSS growth"]
    out.append("| " + " | ".join(head) + " |")
    out.append("| --- | --- |" + " ---: |" * (len(head) - 2))
    notes = []
    for ds in memory["datasets"]:
        if ds.get("skipped"):
            out.append("| %s | all | skipped: %s |" % (ds["name"], ds["skipped"]) + " |" * (len(head) - 3))
            continue
        notes.append("- `%s` (%s): %s" % (ds["name"], size(ds["bytes"]), ds["description"]))
        zr = ds["sides"].get("zram", {})
        zmem = zr.get("memory")
        for side, row in ds["sides"].items():
            name = SIDE_NAMES.get(side, side)
            if "skipped" in row or "failed" in row:
                why = row.get("skipped") or row.get("failed")
                out.append("| %s | %s | %s |" % (ds["name"], name, ("skipped: " if "skipped" in row else "failed: ") + why)
                           + " |" * (len(head) - 3))
                continue
            rss = row.get("memory_is_rss")
            cells = [ds["name"], name,
                     size(row.get("orig_data_size", ds["bytes"])),
                     "-" if rss else size(row.get("compr_data_size")),
                     ("*RSS %s*" % size(row["memory"])) if rss else size(row.get("mem_used_total")),
                     "-" if rss else str(row.get("same_pages", "-")),
                     size(row["dup_data_size"]) if "dup_data_size" in row else "-",
                     size(row["meta_data_size"]) if "meta_data_size" in row else "-",
                     "%.1f%%" % (100 * row["savings"]),
                     ratio_text(row["memory"] / zmem, 3) if zmem else "-",
                     size(row["rss_growth"]) if "rss_growth" in row else "-"]
            out.append("| " + " | ".join(cells) + " |")
        off, on = ds["sides"].get("uzram-off", {}), ds["sides"].get("uzram-on", {})
        if off.get("memory") and on.get("memory"):
            notes.append("  dedup on saves %.1f%% against dedup off" % (100 * (1 - on["memory"] / off["memory"])))
    out.append("")
    out += notes
    if plots:
        out.append("")
        out.append("![memory by data set](%s/memory.png)" % plots)
    return out


RECOMPRESS_SIDES = (
    ("zram", "kernel zram lz4"),
    ("lz4-dedup", "uzram lz4 + dedup"),
    ("zstd-dedup", "uzram zstd + dedup, written directly"),
    ("recompress", "uzram lz4 + dedup, recompressed to zstd in the background"),
    ("recompress-dict", "... and with a trained dictionary"),
    ("recompress-dict-group", "... with the dictionary and bundles (`group=`)"),
)


def recompress_total(rc, side):
    """mem_used_total + meta_data_size (the pool, the dictionary, the dedup index and the
    bundles' records) of a side."""
    row = rc.get("sides", {}).get(side, {})
    if "mem_used_total" not in row:
        return None
    return row["mem_used_total"] + row.get("meta_data_size", 0)


def recompress_numbers(rc):
    """mem_used_total of each side, and ratios to kernel zram and to zstd + dedup."""
    sides = rc.get("sides", {})
    mem = {k: v.get("mem_used_total") for k, v in sides.items()}
    zram = mem.get("zram")
    direct = mem.get("zstd-dedup")
    return mem, zram, direct


def recompress_section(rc):
    if not rc:
        return ["The recompression benchmark did not run."]
    if rc.get("skipped"):
        return ["Skipped: %s" % rc["skipped"]]
    mem, zram, direct = recompress_numbers(rc)
    out = []
    if rc.get("command"):
        out += ["Run: `%s` at git %s (load average at the start: %s; at the end: %s; a "
                "machine shared with other work, so take the throughput figures as rough)." % (
                    rc["command"], rc.get("git", "?"), rc.get("load_at_start", "?"),
                    rc.get("load_at_end", "?")), ""]
    out += ["Image: %s, %.1f MiB. zstd level %d, dictionary %s (`dict=auto`), bundles of %s "
           "pages where named; background thread `--recompress-idle 1`, `recompress_rate 0`, run "
           "until it had nothing left to do, then `compact`. Memory is mm_stat's mem_used_total "
           "(uzram: the pool and the dictionary); total adds meta_data_size (the dedup index and the "
           "bundles' records); 'by itself' is the total before that `compact`, as the thread left it. "
           "Took %d s." % (
               rc["image"], rc["image_bytes"] / (1 << 20), rc["level"], rc["dict_size"],
               rc.get("group", "-"), rc["seconds"]), "",
           "| side | mem_used_total | vs kernel zram lz4 | vs zstd + dedup direct | meta_data_size | total vs kernel zram lz4 | by itself | recompressed pages | bundled pages | dict_mem | time to store / to settle |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    if all(v.get("skipped") == "not in STEPS" for v in rc["sides"].values()):
        out = out[:-3] + ["The memory step did not run (STEPS)."]
    for key, name in RECOMPRESS_SIDES:
        row = rc["sides"].get(key, {})
        if row.get("skipped") == "not in STEPS":
            continue
        if "mem_used_total" not in row:
            out.append("| %s | %s | | | | | | | | | |" % (name, row.get("skipped") or row.get("failed") or "-"))
            continue
        m = row["mem_used_total"]
        total = recompress_total(rc, key)
        before = row.get("before_compact")
        alone = before["mem_used_total"] + before["meta_data_size"] if before else None
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            name, size(m), ratio_text(m / zram, 3) if zram else "-",
            ratio_text(m / direct, 3) if direct else "-",
            size(row.get("meta_data_size")) if "meta_data_size" in row else "-",
            ratio_text(total / zram, 3) if zram and total else "-",
            ratio_text(alone / zram, 3) if zram and alone else "-",
            row.get("recomp_pages", "-"), row.get("bundled_pages", "-"),
            size(row.get("dict_mem")) if "dict_mem" in row else "-",
            "%.1f s / %.1f s" % (row["store_seconds"], row["settle_seconds"]) if "store_seconds" in row else "-"))
    out += [""] + recompress_throughput(rc)
    if rc.get("sweep"):
        out += ["", "How the level and dictionary size were chosen: `uzram estimate -r zstd:LEVEL "
                "--dict-size SIZE --hot 0` on the same image (every page recompressed; uzram+dedup "
                "memory, dictionary included, as a ratio to its kernel zram lz4 projection):", "",
                "| zstd level | dictionary | without dictionary | with dictionary | dictionary memory |",
                "| --- | --- | --- | --- | --- |"]
        for row in rc["sweep"]:
            z = row["kernel_zram_lz4"]
            out.append("| %d | %s | %s | %s | %s |" % (
                row["level"], row["dict_size"], ratio_text(row["recompressed"] / z, 3),
                ratio_text(row["recompressed_dict"] / z, 3) if row.get("recompressed_dict") else "-",
                size(row.get("dict_memory"))))
    return out


def recompress_throughput(rc):
    """Foreground randwrite beside the thread, idle and busy at each rate measured."""
    out = []
    if not rc.get("randwrite_idle"):
        return ["The throughput step did not run."]
    if True:
        spin = rc.get("spinners", 0)
        out += [
                "Foreground fio, NBD, 4 KiB randwrite, iodepth 16, %d s a run, 50%%-compressible data, "
                "on a 256 MiB region beside the image; rounds interleaved, the image rewritten in lz4 "
                "form before each run: idle = thread off, busy = the thread recompressing the image "
                "meanwhile%s at the `recompress_rate` in the first column, pages/s, at its own "
                "CPU budget (recompress_cpu) unless the row says normal priority (pages it recompressed or "
                "bundled during the run in brackets; the library's default is %s)%s:" % (
                    rc["runtime"],
                    " (zstd level %d, `dict=auto`, bundles of %d pages)" % (rc["level"], rc["group"])
                    if rc.get("group") else "", rc.get("rate", "-"),
                    "; beside all of it, %d shell loops spinning at nice 0 on %s CPUs, the other work of "
                    "a busy machine" % (spin, rc.get("nproc", "?")) if spin else ""), ""]
        runs_by_state = rc.get("runs")  # per run: the thread's CPU share and p99 latency
        extra = " thread's CPU, median | p99 latency, median |" if runs_by_state else ""
        out.append("| thread | IOPS per round | median | busy / idle |" + extra)
        out.append("| --- | --- | --- | --- |" + (" --- | --- |" if runs_by_state else ""))
        import statistics
        rows = [("idle", "idle", rc.get("randwrite_idle", []), None, None)]
        by_rate = rc.get("by_rate") or {str(rc.get("rate", "-")): {
            "randwrite_busy": rc.get("randwrite_busy", []),
            "recompressed_during_busy": rc.get("recompressed_during_busy", []),
            "busy_vs_idle": rc.get("randwrite_busy_vs_idle")}}
        for rate, r in by_rate.items():
            rows.append(("busy, %s pages/s" % rate, "busy-%s" % rate, r["randwrite_busy"],
                         r["recompressed_during_busy"], r["busy_vs_idle"]))
        normal = rc.get("normal_priority")  # the thread at the normal priority, without its CPU budget
        if normal:
            rows.append(("busy, %s pages/s, normal priority" % normal["rate"], normal.get("state"),
                         normal["randwrite_busy"], normal["recompressed_during_busy"],
                         normal["busy_vs_idle"]))
        for name, state, runs, done, ratio in rows:
            cells = ", ".join("%.0f%s" % (v, " (%d)" % d if done else "")
                              for v, d in zip(runs, done or [0] * len(runs)))
            line = "| %s | %s | %.0f | %s |" % (name, cells, statistics.median(runs) if runs else 0,
                                                ratio_text(ratio, 3) if ratio else "-")
            if runs_by_state:
                r = runs_by_state.get(state) or {}
                cpu, p99 = r.get("thread_cpu"), r.get("clat_p99_us")
                line += " %s | %s |" % ("%.1f%% of one CPU" % (100 * statistics.median(cpu)) if cpu else "-",
                                        "%.0f us" % statistics.median(p99) if p99 else "-")
            out.append(line)
        out.append("")
        out.append("busy / idle at %s pages/s: **%s**. 4 KiB randread over the image: %.0f IOPS in lz4 "
                   "form, %.0f IOPS recompressed (%s)." % (
                       rc.get("busy_rate") or rc.get("rate", "-"),
                       ratio_text(rc.get("randwrite_busy_vs_idle"), 3), rc.get("randread_lz4", 0),
                       rc.get("randread_recompressed", 0),
                       ratio_text(rc["randread_recompressed"] / rc["randread_lz4"], 2)
                       if rc.get("randread_lz4") else "-"))
    return out


def micro_section(micro, dedup):
    out = []
    if micro and micro.get("throughput"):
        out.append("`uzram bench` (in-process, through the public API; best of %d; MB/s = 10^6 B/s; "
                   "load average at its start: %s):" % (micro.get("repeat", 0), micro.get("loadavg_1min")))
        out.append("")
        out.append("| algorithm | data | threads | write MB/s | read MB/s | ratio | mem/compr | pages |")
        out.append("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in micro["throughput"]:
            out.append("| %s | %s | %d | %.1f | %.1f | %s | %s | %d |" % (
                r["algorithm"], r["kind"], r["threads"], r["write_MBps"], r["read_MBps"],
                "-" if r["ratio"] is None else "%.3f" % r["ratio"],
                "-" if r["pool_overhead"] is None else "%.3f" % r["pool_overhead"], r["pages"]))
        out.append("")
    if micro and micro.get("codec"):
        out.append("| codec alone, 'half' pages, 1 thread | compress MB/s | decompress MB/s | ratio |")
        out.append("| --- | ---: | ---: | ---: |")
        for r in micro["codec"]:
            out.append("| %s | %.1f | %.1f | %.3f |" % (r["algorithm"], r["compress_MBps"], r["decompress_MBps"], r["ratio"]))
        out.append("")
    if micro and micro.get("same_filled_check"):
        out.append("| same-filled check | GB/s | ns per call |")
        out.append("| --- | ---: | ---: |")
        for r in micro["same_filled_check"]:
            out.append("| %s | %.2f | %.2f |" % (r["page"], r["GBps"], r["ns_per_call"]))
        out.append("")
    if dedup and dedup.get("dedup"):
        out.append("`uzram bench --dedup` (load average at its start: %s):" % dedup.get("loadavg_1min"))
        out.append("")
        out.append("| workload | threads | dedup | write MB/s | read MB/s | compr | mem_used_total | dup_data_size | meta_data_size |")
        out.append("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in dedup["dedup"]:
            out.append("| %s | %d | %s | %.1f | %.1f | %s | %s | %s | %s |" % (
                r["workload"], r["threads"], "on" if r["dedup"] else "off", r["write_MBps"], r["read_MBps"],
                size(r["compr_data_size"]), size(r["mem_used_total"]), size(r["dup_data_size"]),
                size(r["meta_data_size"])))
        out.append("")
    return out or ["The micro-benchmarks did not run."]


def attach_section(a):
    """The markdown of bench/attach.sh's results (attach.json)."""
    md = ["### `uzram attach` against nbdfuse + loop and kernel zram (`bench/attach.sh`)", ""]
    md.append("- Command: `%s`; uzram git %s; kernel %s, `nproc` %s, load average %s at the start" % (
        a["command"], a.get("git", "not recorded"), a["kernel"], a["nproc"], a.get("load", "not recorded")))
    md.append("- %d rounds, each side in turn (each round starts with the next side); fio %d s per run "
              "on a %s region of a %s device, filled first; untar of `%s` (%d files, %.0f MiB as a tar) "
              "into a fresh ext4, then `sync`. Medians over the rounds." % (
                  a["rounds"], a["runtime"], a["region"], a["size"], a["tree"], a["tree_files"],
                  a["tree_bytes"] / (1 << 20)))
    md.append("- fio: `--ioengine=libaio --direct=1 --bs=4k --iodepth=16 --numjobs=1 "
              "--buffer_compress_percentage=50 --refill_buffers`. Server CPU: user + system time of "
              "the uzram server (and nbdfuse) per request, while fio shares the same cores.")
    md.append("")
    md.append("| target | measured | met |")
    md.append("| --- | ---: | --- |")
    for t in a["targets"]:
        met = "not measured" if t["met"] is None else ("yes" if t["met"] else "**no**")
        md.append("| %s %s | %s | %s |" % (t["what"], t["target"], ratio_text(t["value"]), met))
    md.append("")
    md.append("| side | rand write IOPS | MiB/s | server CPU us/req | rand read IOPS | MiB/s | server CPU us/req | untar + sync s |")
    md.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    fmt = lambda v, f: "-" if v is None else f % v
    for side, name in ATTACH_SIDES:
        m = a["median"].get(side)
        if m is None:
            md.append("| %s | skipped: %s |||||||" % (name, a["skipped"].get(side, "did not run")))
            continue
        md.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            name, fmt(m.get("randwrite_iops"), "%.0f"), fmt(m.get("randwrite_MiBps"), "%.1f"),
            fmt(m.get("randwrite_cpu_us"), "%.1f"), fmt(m.get("randread_iops"), "%.0f"),
            fmt(m.get("randread_MiBps"), "%.1f"), fmt(m.get("randread_cpu_us"), "%.1f"),
            fmt(m.get("untar_s"), "%.2f")))
    md.append("")
    md.append("Every round (IOPS; untar seconds):")
    md.append("")
    md.append("| side | rand write | rand read | untar |")
    md.append("| --- | --- | --- | --- |")
    for side, name in ATTACH_SIDES:
        runs = a["runs"].get(side, {})
        md.append("| %s | %s | %s | %s |" % (
            name, ", ".join(str(r["iops"]) for r in runs.get("randwrite", [])) or "-",
            ", ".join(str(r["iops"]) for r in runs.get("randread", [])) or "-",
            ", ".join("%.2f" % u["seconds"] for u in a["untar"].get(side, [])) or "-"))
    md.append("")
    return md


WRITEBACK_SPACE_SIDES = (
    ("lz4", "lz4, every page written back"),
    ("lz4-dedup", "lz4 + dedup, every page written back"),
    ("recompressed", "lz4 + dedup, recompressed to zstd level 7, then written back"),
    ("when-full", "lz4, mem_limit 1/16 of the image, --writeback-when-full"),
)


def writeback_section(wb):
    if not wb:
        return ["The writeback benchmark did not run."]
    if wb.get("skipped"):
        return ["Skipped: %s" % wb["skipped"]]
    out = []
    for step, run in sorted(wb.get("runs", {}).items(), key=lambda kv: kv[0] != "space"):
        out += ["%s step: `%s` at git %s (load average at its end: %s)." % (
            step.capitalize(), run["command"], run["git"], run["load_at_end"]), ""]
    out += ["Image: %s, %s. Took %d s." % (wb["image"], size(wb["image_bytes"]), wb["seconds"]), ""]
    if wb.get("space"):
        out += ["Disk space of the written-back pages: the backing file's allocated bytes (`stat -c %b`) "
                "after `compact`, against the raw bytes of those pages (pages stored but not "
                "same-filled: those stay in memory; with dedup a shared page once per reference). Time: to store "
                "the image and write it back (recompressed: with the thread's recompression, waited for).", "",
                "| side | raw bytes | file allocated | ratio | bd_data_size | bd_count | objects | time |",
                "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for key, name in WRITEBACK_SPACE_SIDES:
            r = wb["space"].get(key)
            if not r:
                continue
            out.append("| %s | %s | %s | **%s** | %s | %d | %d | %.1f s |" % (
                name, size(r["raw_bytes"]), size(r["file_allocated"]),
                ratio_text(r["file_allocated"] / r["raw_bytes"], 3) if r["raw_bytes"] else "-",
                size(r["bd_data_size"]), r["bd_count"], r["bd_objects"], r["seconds"]))
    if wb.get("reads"):
        reads = wb["reads"]
        kit = reads["nbdkit"]["iops"]
        qemu = "qemu" in reads
        out += ["", "Random 4 KiB reads (fio nbd engine, iodepth 16, %d s a run, %d rounds interleaved) over "
                "%s of the image's pages that are not same-filled (those stay in memory), stored with `--writeback-when-full` under a mem_limit of a "
                "quarter (4x) and a sixteenth (16x) of it (`--threads 16`, as nbdkit's 16 threads; "
                "and once with serve's default, a worker per CPU), against `nbdkit file cache=none "
                "fadvise=random`%s on a copy of the same bytes on the same disk, synced and dropped from "
                "the page cache first. uzram%s reads with O_DIRECT; nbdkit 1.32 has no O_DIRECT, its "
                "cache=none asks the kernel to drop each read from the page cache afterwards, which does "
                "not always happen: disk KiB per read (the server's read_bytes in /proc/PID/io) shows how "
                "many of its reads went to the disk." % (
                    wb["runtime"], wb["rounds"], size(wb["set_bytes"]),
                    " and `qemu-nbd -f raw --cache=none --aio=native`" if qemu else "",
                    " (and qemu-nbd)" if qemu else ""), "",
                "| side | IOPS per round | median | vs nbdkit | reads from disk | disk KiB per read | server CPU us/read |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        for key, name in (("nbdkit", "nbdkit file cache=none"), ("qemu", "qemu-nbd --cache=none (O_DIRECT)"),
                          ("x4", "uzram, 4x mem_limit"),
                          ("x16", "uzram, 16x mem_limit"),
                          ("x16t", "uzram, 16x mem_limit, serve's default --threads")):
            e = reads.get(key)
            if not e:
                continue
            out.append("| %s | %s | %.0f | %s | %s | %.2f | %.1f |" % (
                name, ", ".join("%.0f" % r["iops"] for r in e["runs"]), e["iops"],
                ratio_text(e["iops"] / kit) if kit else "-",
                "%.0f%%" % (100 * e["from_disk"]) if "from_disk" in e else "-",
                e.get("disk_bytes_per_read", 0) / 1024, e["server_cpu_us"]))
    return out


WRITEBACK_BEGIN = "<!-- BEGIN WRITEBACK RESULTS (bench/report.py --part writeback; do not edit by hand) -->"
WRITEBACK_END = "<!-- END WRITEBACK RESULTS -->"


def part_writeback(wb, d, doc_path):
    """bench/writeback.sh run alone: its targets and section, between markers of their own."""
    t = targets_section({}, None, None, None, None, None, None, wb)
    rows = [r for r in t if r.startswith("| 13 ") or r.startswith("| issue") or r.startswith("| ---")]
    text = "\n".join(rows + [""] + writeback_section(wb)) + "\n"
    write_results(text, os.path.join(d, "writeback.md"), doc_path, WRITEBACK_BEGIN, WRITEBACK_END)
    return 0


RATES_BEGIN = "<!-- BEGIN RECOMPRESS RATES RESULTS (bench/report.py --part recompress-rates; do not edit by hand) -->"
RATES_END = "<!-- END RECOMPRESS RATES RESULTS -->"


BUSY_BEGIN = "<!-- BEGIN RECOMPRESS BUSY RESULTS (bench/report.py --part recompress-busy; do not edit by hand) -->"
BUSY_END = "<!-- END RECOMPRESS BUSY RESULTS -->"


def part_recompress_rates(rc, d, doc_path, name="recompress-rates", begin=RATES_BEGIN, end=RATES_END):
    """bench/recompress.sh STEPS=throughput RATES=... (or SPIN=N, as the part recompress-busy):
    foreground randwrite beside the thread, between markers of their own (the memory results
    stay apart)."""
    t = targets_section({}, None, None, None, None, None, rc)
    rows = [r for r in t if (r.startswith("| 12 ") and "randwrite" in r) or r.startswith("| issue")
            or r.startswith("| ---")]
    head = ["Run: `%s` at git %s (load average at the end: %s); %d s." % (
        rc.get("command", "?"), rc.get("git", "?"), rc.get("load_at_end", "?"), rc.get("seconds", 0)),
        "", "Image: %s, %.1f MiB." % (rc.get("image", "?"), rc.get("image_bytes", 0) / (1 << 20)), ""]
    text = "\n".join(rows + [""] + head + recompress_throughput(rc)) + "\n"
    write_results(text, os.path.join(d, name + ".md"), doc_path, begin, end)
    return 0


PART_BEGIN = "<!-- BEGIN RECOMPRESS RESULTS (bench/report.py --part recompress; do not edit by hand) -->"
PART_END = "<!-- END RECOMPRESS RESULTS -->"


def part_recompress(rc, d, doc_path):
    """bench/recompress.sh run alone: its targets and section, between markers of their own."""
    t = targets_section({}, None, None, None, None, None, rc)
    rows = [r for r in t if r.startswith(("| 12 ", "| 27 ", "| issue", "| ---"))]
    text = "\n".join(rows + [""] + recompress_section(rc)) + "\n"
    write_results(text, os.path.join(d, "recompress.md"), doc_path, PART_BEGIN, PART_END)
    return 0


def write_results(text, path, doc_path, begin, end):
    """Write `text` to `path`, print it, and put it between `begin` and `end` of doc_path."""
    with open(path, "w") as f:
        f.write(text)
    sys.stdout.write(text)
    if not doc_path:
        return
    doc = open(doc_path).read()
    if begin in doc and end in doc:
        head, rest = doc.split(begin, 1)
        _, tail = rest.split(end, 1)
        doc = head + begin + "\n" + text + end + tail
    else:
        doc = doc.rstrip("\n") + "\n\n" + begin + "\n" + text + end + "\n"
    with open(doc_path, "w") as f:
        f.write(doc)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("results")
    parser.add_argument("--plots", help="folder of the plots, relative to the document")
    parser.add_argument("--doc", help="markdown file whose RESULTS part is replaced")
    parser.add_argument("--part", choices=["recompress", "recompress-rates", "recompress-busy", "writeback",
                                           "attach"],
                        help="only this part (bench/recompress.sh, bench/writeback.sh or "
                             "bench/attach.sh alone): its targets and section, between its own "
                             "markers of --doc")
    args = parser.parse_args()
    d = args.results
    if args.part == "attach":
        attach = load_json(d, "attach.json")
        if attach is None:
            print("report.py: no attach.json in %s" % d, file=sys.stderr)
            return 1
        text = "\n".join(attach_section(attach)) + "\n"
        write_results(text, os.path.join(d, "attach.md"), args.doc, ATTACH_BEGIN, ATTACH_END)
        return 0
    machine = load_json(d, "machine.json") or {}
    matrix = load_json(d, "matrix.json")
    memory = load_json(d, "memory.json")
    micro = load_json(d, "micro.json")
    dedup = load_json(d, "micro-dedup.json")
    rc = load_json(d, "recompress.json")
    try:
        zc_text = open(os.path.join(d, "zram-compare.txt")).read()
    except OSError:
        zc_text = None

    wb = load_json(d, "writeback.json")
    if args.part == "recompress":
        return part_recompress(rc, d, args.doc)
    if args.part == "recompress-rates":
        return part_recompress_rates(rc, d, args.doc)
    if args.part == "recompress-busy":
        return part_recompress_rates(rc, d, args.doc, "recompress-busy", BUSY_BEGIN, BUSY_END)
    if args.part == "writeback":
        return part_writeback(wb, d, args.doc)
    md = []
    md.append("## Results: %s run of %s" % (machine.get("mode", "?"), machine.get("date", "?")))
    md.append("")
    md.append("- Command: `%s` (%s)" % (machine.get("command", "bench/run.sh"), machine.get("total", "")))
    md.append("- Machine: %s, `nproc` %s, %s RAM, kernel %s, %s" % (
        machine.get("cpu", "?"), machine.get("nproc", "?"), machine.get("memory", "?"),
        machine.get("kernel", "?"), machine.get("os", "?")))
    md.append("- Versions: uzram %s (git %s), %s, %s, %s, %s" % (
        machine.get("uzram", "?"), machine.get("git", "?"), machine.get("fio", "?"), machine.get("nbdkit", "?"),
        machine.get("qemu", "?"), machine.get("cc", "?")))
    md.append("- Load average (1 min) at the start of each part: %s" % machine.get("loads", "?"))
    md.append("")
    md.append("### Targets")
    md.append("")
    md += targets_section(machine, matrix, memory, micro, dedup, zc_text, rc, wb)
    md.append("")
    md.append("### Throughput matrix (`bench/matrix.sh`)")
    md.append("")
    md += matrix_section(matrix, args.plots)
    md.append("")
    md.append("### Memory table (`bench/memory.sh`)")
    md.append("")
    md += memory_section(memory, args.plots)
    md.append("")
    md.append("### Engine micro-benchmarks (`uzram bench`)")
    md.append("")
    md += micro_section(micro, dedup)
    md.append("### Recompression (`bench/recompress.sh`)")
    md.append("")
    md += recompress_section(rc)
    md.append("")
    md.append("### Writeback (`bench/writeback.sh`)")
    md.append("")
    md += writeback_section(wb)
    md.append("")
    md.append("### Engine against kernel zram on the same bytes (`bench/zram-compare.sh`)")
    md.append("")
    md += ["```"] + (zc_text or "did not run\n").rstrip("\n").splitlines() + ["```"]
    text = "\n".join(md) + "\n"

    write_results(text, os.path.join(d, "results.md"), args.doc, BEGIN, END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
