#!/usr/bin/env python3
# swap-programs-report.py - the docs/BENCHMARKS.md block of bench/vm-swap-programs.sh, from its
# folder (build/vm/swap-programs): meta (command, commit, date, load, kernel), sizes.tsv (each
# size's input and footprint on the host), results.txt (one "run" line of key=value pairs per
# run, from tests/vm/swap-programs.sh or, for a run the guest did not finish, from the host).
#
#   swap-programs-report.py DIR
import os
import sys

BACKENDS = {
    "zram-lz4": "kernel zram lz4",
    "zram-zstd": "kernel zram zstd",
    "uzram-lz4": "uzram lz4",
    "uzram-zstd": "uzram zstd",
    "uzram-dense": "uzram dense",
    "uzram-lz4-sync": "uzram lz4, synchronous ublk (prototype)",
    "uzram-dense-sync": "uzram dense, synchronous ublk (prototype)",
    "uzram-lz4-notify": "uzram lz4, ublk forwarding freed slots (prototype)",
    "uzram-dense-notify": "uzram dense, ublk forwarding freed slots (prototype)",
}
PROGRAMS = {
    "sort": "GNU sort of real text",
    "dpkg": "python3 indexing dpkg's database",
}
OUTCOMES = {
    "completed": "**completed**",
    "deadline": "killed at its deadline ({deadline} s)",
    "stalled": "killed: swap writes failing for {stall} s",
    "oom-killed": "OOM-killed",
    "wrong-output": "WRONG OUTPUT",
    "kernel-failure": "guest's kernel reported a hang or oops; boot ended",
    "deadline-failure": "the guest could not end it; boot ended",
    "harness-failure": "harness failed",
    "guest-stopped": "guest stopped during it",
    "livelocked": "guest livelocked: swap writes failing for {failing_for} s, the guest could "
                  "not kill the program; boot ended by the host {ended_after} s into the run",
    "not-run": "not run (boots used up)",
}


def mib(value, unit=1):
    try:
        return f"{int(value) * unit / 1048576:.0f}"
    except (TypeError, ValueError):
        return "-"


def read_meta(path):
    meta = {}
    for line in open(path):
        for part in line.split(" ") if line.startswith("cap=") else [line]:
            key, _, value = part.strip().partition("=")
            meta[key] = value
    return meta


def read_runs(path):
    runs = []
    for line in open(path):
        f = line.split()
        if not f or f[0] != "run":
            continue
        run = {"boot": f[1].split("=")[1], "program": f[2], "size": f[3], "backend": f[4]}
        run.update(p.split("=", 1) for p in f[5:] if "=" in p)
        runs.append(run)
    return runs


def outcome(run, meta):
    o = run.get("outcome", "?")
    text = OUTCOMES.get(o, o.replace("exit-", "exit status ")).format(
        stall=meta.get("stall"), failing_for=run.get("failing_for", "?"),
        ended_after=run.get("ended_after", "?"),
        deadline=run.get("deadline", meta.get("deadline")))
    if o == "harness-failure":
        text += f" (exit {run.get('exit', '?')})"
    if run.get("note") == "guest-not-cleaned-after":
        text += "; guest not clean after"
    return text


def header(meta, sizes, manifest):
    command = " ".join(["bench/vm-swap-programs.sh"] + meta["args"].split())
    out = [f"### Real programs as swap workloads in a VM: `{command}`",
           "",
           f"Commit {meta['commit']}, {meta['date']}; kernel {meta.get('kernel', '?')} under QEMU, "
           f"{meta['cpus']} vCPUs, {meta['guest_mib']} MiB guest; {meta.get('boots', '?')} boot(s). "
           f"The host's 2 cores are shared with other work: load average (1, 5, 15 min) "
           f"{meta['load_start']} at the start, {meta.get('load_end', '?')} at the end.",
           "",
           f"Every backend: {meta['disksize']} of swap (the disk size; uzram(1) SWAP advises a "
           f"size near what the cap can hold: on a larger area Linux frees the slots of pages read "
           f"back only once half of it is in use, `vm_swap_full()`, and a ublk device keeps their "
           f"pages meanwhile; kernel zram frees them at once), compressed memory capped at **{meta['cap']}**, swap priority "
           f"100, a fresh device for each run, the page cache dropped before it. The program is killed "
           f"at its deadline, {meta.get('ratio', '-')} times kernel zram lz4's time for the same "
           f"program and size in the boot (zram lz4 runs first of each size's backends), at least "
           f"{meta.get('deadline_min', '-')} s, at most {meta['deadline']} s (zram lz4's own, and "
           f"every run's when it did not complete), or once swap writes had failed at every check "
           f"(10 s apart) for {meta['stall']} s: a device at its cap fails them, and the kernel "
           f"was seen to retry them for minutes without progress or an OOM kill. Kernel zram: `modprobe zram`, `comp_algorithm`, `mem_limit`, "
           f"`disksize`, mkswap, swapon. uzram as the `uzram-swap@` unit sets it up: "
           f"`uzram serve --swap -s {meta['disksize']} --mem-limit {meta['cap']}`, then the unit's "
           f"`uzram attach --swap` (ublk), mkswap, `swapon --priority 100`; zstd adds `--algorithm zstd` (kernel zram "
           f"zstd's codec and level, 3), dense adds "
           f"`{meta.get('dense_options', '--dedup --recompress algo=zstd,level=7,dict=auto,group=8 --recompress-idle 1')}`.",
           "",
           "Programs, each run with its output piped to sha256sum and checked against the host's:",
           "",
           "- sort: `LC_ALL=C sort -S <3 x input> --parallel=1 INPUT` (the whole input in one "
           "buffer, no temporary files); INPUT the first bytes of a corpus of this machine's "
           "text files, cut at a line's end (`bench/swap-programs-corpus.py`: "
           + "; ".join(manifest) + "; sources interleaved in proportion, files whose bytes "
           "an earlier one had left out; past its end, copy k has `~k ` before every line);",
           "- dpkg: `python3 bench/swap-programs-dpkg.py DPKG COPIES`: dpkg's status file, "
           "info/*.list and info/*.md5sums (a snapshot of this machine's) parsed into per-package "
           "records, a file-owner index, a directory index and reverse dependencies, held whole "
           "and written as one sorted JSON document; COPIES more systems' worth (package names "
           "suffixed `~k`, paths prefixed `/k<k>`, a fraction takes that share of the packages).",
           "",
           "Size: the program's footprint, its maximum RSS on the host without swap pressure "
           "(GNU time), against the guest's memory:",
           "",
           "| program | size | input | footprint MiB |",
           "| --- | --- | --- | --- |"]
    for s in sizes:
        inp = f"{int(s['param'][5:-4]) / 1e6:.0f} MB of text" if s["program"] == "sort" \
            else f"{s['param']} copies"
        out.append(f"| {s['program']} | {s['factor']}x | {inp} | {int(s['rss']) / 1024:.0f} "
                   f"({int(s['rss']) / 1024 / int(meta['guest_mib']):.2f}x) |")
    return out


def table(runs, sizes, meta):
    factor = {(s["program"], s["index"]): s["factor"] for s in sizes}
    ref = {(r["program"], r["size"], r["boot"]): float(r["seconds"]) for r in runs
           if r["backend"] == "zram-lz4" and r.get("outcome") == "completed"}
    out = ["| program | size | backend | outcome | seconds | / zram lz4 | swap write errors: "
           "device (kernel log) | OOM kills | peak compressed MiB | peak swap in use MiB | "
           "server peak RSS MiB | server locked MiB: resident (VmLck) | after exit: stored / "
           "swapped MiB | boot |",
           "| --- | --- | --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    order = {b: i for i, b in enumerate(BACKENDS)}
    for r in sorted(runs, key=lambda r: (r["program"], int(r["size"]), order.get(r["backend"], 9))):
        key = (r["program"], r["size"], r["boot"])
        secs = r.get("seconds", "-")
        ratio = "-"
        if r.get("outcome") == "completed" and key in ref:
            ratio = f"{float(secs) / ref[key]:.2f}"
        elif r.get("outcome") in ("deadline", "stalled") and key in ref:
            ratio = f"> {float(secs) / ref[key]:.2f}"
        oom = r.get("oom_kills", "-")
        if r.get("victims", "-") != "-":
            oom += f" ({r['victims']})"
        uz = r["backend"].startswith("uzram")
        errors = f"{r.get('failed_writes', '-')} ({r.get('log_write_errors', '-')})"
        after = "-"
        if "orig_after" in r:
            after = f"{mib(r['orig_after'])} / {mib(r.get('swap_used_after_kib'), 1024)}"
        out.append(
            f"| {r['program']} | {factor.get((r['program'], r['size']), r['size'])}x "
            f"| {BACKENDS.get(r['backend'], r['backend'])} | {outcome(r, meta)} | {secs} | {ratio} "
            f"| {errors} | {oom} | {mib(r.get('mem_used_max'))} | {mib(r.get('swap_peak_kib'), 1024)} "
            f"| {mib(r.get('server_hwm_kib', r.get('rss_peak_kib')), 1024) if uz else '-'} "
            f"| {(mib(r.get('locked_peak_kib'), 1024) + ' (' + mib(r.get('vmlck_peak_kib'), 1024) + ')') if uz else '-'} "
            f"| {after} | {r['boot']} |")
    return out


def density(runs, sizes):
    """The device's orig_data_size / mem_used_total about every 30 s of each run (issue 43), and
    compr_data_size / mem_used_total: the share of its memory that holds objects. Each point
    says when it was read (seconds since the program started): under pressure the sampler runs
    late. Runs recorded before it stamped real times show every 30th second instead. And what
    the device stores beyond the swap in use (dead pages), beside PSI's memory pressure."""
    factor = {(s["program"], s["index"]): s["factor"] for s in sizes}
    order = {b: i for i, b in enumerate(BACKENDS)}
    out = ["| program | size | backend | orig_data_size / mem_used_total (at SECONDS s) "
           "| compr_data_size / mem_used_total (at the same times) "
           "| stored beyond the swap in use MiB / PSI memory some avg10 % (at the same times) |",
           "| --- | --- | --- | --- | --- | --- |"]

    def points(series):
        if series == "-":
            return series
        return ", ".join(f"{ratio} ({at} s)" for at, ratio in
                         (point.split(":") for point in series.split(",")))

    for r in sorted(runs, key=lambda r: (r["program"], int(r["size"]), order.get(r["backend"], 9))):
        out.append(f"| {r['program']} | {factor.get((r['program'], r['size']), r['size'])}x "
                   f"| {BACKENDS.get(r['backend'], r['backend'])} "
                   f"| {points(r.get('ratio_series', '-'))} | {points(r.get('fill_series', '-'))} "
                   f"| {points(r.get('held_series', '-'))} |")
    return out


def cpu(runs, sizes):
    """Where the guest's two CPUs went while the program ran (seconds, from USER_HZ ticks)."""
    factor = {(s["program"], s["index"]): s["factor"] for s in sizes}
    order = {b: i for i, b in enumerate(BACKENDS)}
    out = ["| program | size | backend | seconds | user s | system s | idle s | server s "
           "(recompressor s) | kswapd s | swap I/Os | server us per swap I/O | pages read ahead "
           "(used) | device requests, read / write (pages each) |",
           "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in sorted(runs, key=lambda r: (r["program"], int(r["size"]), order.get(r["backend"], 9))):
        if "cpu_user" not in r:
            continue
        t = {k: int(r[f"cpu_{k}"]) / 100 for k in
             ("user", "system", "idle", "server", "recomp", "kswapd")}
        ios = int(r.get("pswpin", 0)) + int(r.get("pswpout", 0))
        uz = r["backend"].startswith("uzram")
        server = f"{t['server']:.1f} ({t['recomp']:.1f})" if uz else "-"
        per_io = f"{t['server'] * 1e6 / ios:.0f}" if uz and ios else "-"
        requests = "-"
        if "dev_reads" in r:
            reads, writes = int(r["dev_reads"]), int(r["dev_writes"])
            each = [f"{int(r[k]) / n:.1f}" if n else "-"
                    for k, n in (("pswpin", reads), ("pswpout", writes))]
            requests = f"{reads} / {writes} ({each[0]} / {each[1]})"
        out.append(f"| {r['program']} | {factor.get((r['program'], r['size']), r['size'])}x "
                   f"| {BACKENDS.get(r['backend'], r['backend'])} | {r.get('seconds', '-')} "
                   f"| {t['user']:.1f} | {t['system']:.1f} | {t['idle']:.1f} | {server} "
                   f"| {t['kswapd']:.1f} | {ios} | {per_io} "
                   f"| {r.get('swap_ra', '-')} ({r.get('swap_ra_hit', '-')}) | {requests} |")
    return out


def main():
    d = sys.argv[1]
    meta = read_meta(os.path.join(d, "meta"))
    sizes = []
    for line in open(os.path.join(d, "sizes.tsv")):
        f = line.split()
        sizes.append(dict(zip(["program", "index", "factor", "param", "rss", "sha"], f)))
    manifest = [line.strip().split(", from")[0]
                for line in open(os.path.join(d, "corpus.txt.manifest"))]
    runs = read_runs(os.path.join(d, "results.txt"))
    out = header(meta, sizes, manifest)
    out += ["", "Results, by program and size (the runs themselves went size by size; in each, "
            "program by program, kernel zram lz4 first, the other backends' order rotated from one "
            "size to the next):", ""]
    out += table(runs, sizes, meta)
    if any(r["backend"].endswith(("-sync", "-notify")) for r in runs):
        out += ["", "The synchronous ublk backends run on a prototype of the driver, loaded for their "
                "runs only (`bench/ublk-sync/build.sh`: Debian's ublk_drv.c with "
                "BLK_FEAT_SYNCHRONOUS and freed slots forwarded as discards; a proposal, "
                "docs/design/swap.md, nothing uzram needs)."]
    done = {b: sum(1 for r in runs if r["backend"] == b and r.get("outcome") == "completed")
            for b in BACKENDS}
    total = {b: sum(1 for r in runs if r["backend"] == b) for b in BACKENDS}
    out += ["", "Completed with the right output: " + ", ".join(
        f"{BACKENDS[b]} {done[b]} of {total[b]} runs" for b in BACKENDS if total[b]) + ".", "",
        "Columns: seconds of the program's run in the guest (emulated: only the ratios inside a "
        "boot mean anything; `/ zram lz4` is against kernel zram lz4's time for the same program "
        "and size in the same boot); swap write errors: the device's failed_writes (io_stat), and "
        "in brackets the kernel's \"Write-error on swap-device\" lines with the ones it says it "
        "suppressed; OOM kills: vmstat's oom_kill during the run (the victims' names); peak "
        "compressed: the device's mem_used_max; peak swap in use: SwapTotal - SwapFree, sampled "
        "every second; the server's peak RSS: VmHWM (sampled VmRSS for a run the guest did not "
        "end); locked: the peak of its locked resident pages (smaps_rollup Locked) and of what its locked mappings span (VmLck; with "
        "MCL_ONFAULT most of it never touched), sampled every second; after exit, 5 s after the "
        "program ended: what the device still stores (orig_data_size) against what the kernel "
        "still has swapped out (SwapTotal - SwapFree): the difference is pages the kernel freed "
        "that the device still holds (kernel zram is told of every freed slot; a ublk device only "
        "of discards: swapon --discard, of each cluster once all of it is free).", "",
        "Density while the program runs (what the device stores per byte of memory it uses; "
        "sampled about every 30 s from the program's start until 5 s after it ended, when the "
        "table's after-exit figures are read; each point with the second it was read at, since "
        "under pressure the sampler runs late). Beside it, at the same times, orig_data_size "
        "less the swap in use (SwapTotal - SwapFree), in MiB: pages the device stores that the "
        "kernel no longer has in swap (slots it freed without telling the device: a discard comes "
        "only for a whole free cluster; about 0 for kernel zram, which is told of every freed "
        "slot), and the "
        "memory line of /proc/pressure (some, avg10): the share of time tasks waited on memory, "
        "which the server's stall guard (uzram(1) SWAP) asks to be at least half:", ""]
    out += density(runs, sizes)
    rows = cpu(runs, sizes)
    if len(rows) > 2:
        out += ["", "Where the guest's CPU went while the program ran (user, system and idle: all "
                "of the guest's CPUs, idle with iowait; the server's process, its recompression "
                "thread in brackets, includes the kernel's ublk work done in its threads; kernel "
                "zram compresses in reclaim: in kswapd or the program's own system time; swap "
                "I/Os: pswpin + pswpout; pages read ahead: vmstat's swap_ra, and swap_ra_hit, "
                "the ones a fault then used; kernel zram, a synchronous device, reads none; "
                "device requests: the block layer's reads and writes completed on the swap "
                "device, each one a round trip to a ublk server, and the swap I/Os in each):",
                ""]
        out += rows
    print("\n".join(out))


if __name__ == "__main__":
    main()
