#!/usr/bin/env bash
# status.sh - integration test of `uzram status` with zramctl's habits: the default columns fit
# 80 characters, --output (named columns and any counter), --bytes, --noheadings, --raw, the
# COMP-RATIO of same-filled pages, and the Prometheus text (parsed: every counter of the
# device, with HELP, TYPE and a device label, values equal to stat_json).
# Skips and fails as tests/integration/lib.bash says (exit 0/1/77).
set -euo pipefail

. "$(dirname "$0")/lib.bash"
need_tools nbdcopy
need_python_nbd
lib_init

start_server uzram0 -s 64M
start_server zeros -s 16M
start_server empty -s 8M
# uzram0: 8 MiB of text (compresses), 4 MiB of zero pages and 4 MiB of one repeated word.
# zeros: only zero pages, stored (nbdcopy --allocated writes them rather than skipping).
$PY - "$(uri_of uzram0)" "$(uri_of zeros)" <<'EOF' || fail "writing the devices"
import nbd, sys
text = b"".join(b"line %08d of the status test, compressible but not same-filled\n" % i
                for i in range(8 << 20 >> 6))[:8 << 20]
h = nbd.NBD(); h.connect_uri(sys.argv[1])
h.pwrite(text, 0)
h.pwrite(bytes(4 << 20), 8 << 20)
h.pwrite(b"\x5a\xa5\x5a\xa5\x12\x34\x56\x78" * (4 << 20 >> 3), 12 << 20)
h.shutdown()
h = nbd.NBD(); h.connect_uri(sys.argv[2])
h.pwrite(bytes(2 << 20), 0)
h.shutdown()
EOF
json_of() { "$UZRAM" attr "$1" stat_json; }

# --- the default table: zramctl's first columns, every line within 80 characters ---
"$UZRAM" status >"$WORK/default"
[[ $(head -1 "$WORK/default" | tr -s ' ') == "NAME ALGORITHM DISKSIZE DATA COMPR TOTAL COMP-RATIO CLIENTS ATTACHED" ]] ||
    fail "default header: $(head -1 "$WORK/default")"
[[ $(wc -l <"$WORK/default") -eq 4 ]] || fail "three devices, one header: $(cat "$WORK/default")"
awk 'length($0) > 80 {exit 1}' "$WORK/default" || fail "a line of the default table is over 80 characters: $(cat "$WORK/default")"
awk 'NR > 1 && $0 ~ / $/ {exit 1}' "$WORK/default" || fail "trailing blanks"
grep -q '^uzram0  *lz4  *64M  *16M ' "$WORK/default" || fail "uzram0's row: $(cat "$WORK/default")"
pass "default columns, $(awk '{ if (length($0) > m) m = length($0) } END {print m}' "$WORK/default") characters wide at most"

# --- COMP-RATIO: DATA / (TOTAL + META), same-filled pages counted in DATA ---
$PY - "$WORK/default" "$(json_of uzram0)" <<'EOF' || fail "COMP-RATIO"
import json, sys
rows = {l.split()[0]: l.split() for l in open(sys.argv[1]).read().splitlines()[1:]}
s = json.loads(sys.argv[2])
ratio = s["orig_data_size"] / (s["mem_used_total"] + s["meta_data_size"])
assert rows["uzram0"][6] == "%.2f" % ratio, (rows["uzram0"], ratio)
# half of what is stored is same-filled and takes no memory: the ratio is at least twice
# what the text alone compresses to
assert s["same_pages"] == 2048, s
text_only = (s["orig_data_size"] - s["same_pages"] * 4096) / (s["mem_used_total"] + s["meta_data_size"])
assert abs(ratio - 2 * text_only) < 0.01, (ratio, text_only)
assert rows["zeros"][6] == "inf", rows["zeros"]      # data stored, no memory used
assert rows["empty"][6] == "-", rows["empty"]        # nothing stored
print("uzram0 COMP-RATIO %s = 2 x %.2f (the text alone); zeros inf; empty -" % (rows["uzram0"][6], text_only))
EOF
pass "COMP-RATIO counts same-filled pages; inf with only those, - with nothing"

# --- --output: named columns in any case, counters by name; --bytes; values exact ---
"$UZRAM" status -o name,Data,zero-pages,TOTAL,huge_pages,FAILED-WRITES,use_dedup,disksize --bytes uzram0 >"$WORK/out"
[[ $(head -1 "$WORK/out" | tr -s ' ') == "NAME DATA ZERO-PAGES TOTAL HUGE-PAGES FAILED-WRITES USE-DEDUP DISKSIZE" ]] ||
    fail "--output header: $(head -1 "$WORK/out")"
read -r -a row < <(sed -n 2p "$WORK/out")
$PY - "$(json_of uzram0)" "${row[@]}" <<'EOF' || fail "--output --bytes values: ${row[*]}"
import json, sys
s = json.loads(sys.argv[1]); row = sys.argv[2:]
want = ["uzram0", s["orig_data_size"], s["same_pages"], s["mem_used_total"], s["huge_pages"],
        s["failed_writes"], 0, 64 << 20]
assert row == [str(w) for w in want], (row, want)
EOF
pass "--output with named columns and counters, --bytes: $(sed -n 2p "$WORK/out" | tr -s ' ')"

# --- --noheadings and --raw: the same values, one space apart, nothing else ---
"$UZRAM" status --noheadings >"$WORK/noheadings"
cmp -s <(tail -n +2 "$WORK/default" | tr -s ' ') <(tr -s ' ' <"$WORK/noheadings") ||
    fail "--noheadings is not the table without its header: $(cat "$WORK/noheadings")"
"$UZRAM" status --raw >"$WORK/raw"
cmp -s <(tr -s ' ' <"$WORK/default" | sed 's/^ //') "$WORK/raw" || fail "--raw: $(cat "$WORK/raw")"
grep -q '  ' "$WORK/raw" && fail "--raw has aligned columns"
"$UZRAM" status --raw -n -b -o name,disksize empty | grep -qx 'empty 8388608' || fail "--raw -n -b -o"
"$UZRAM" status --output-all | head -1 | grep -q 'MEM-LIMIT .*MIGRATED .*META .*CLIENTS' || fail "--output-all"
pass "--noheadings, --raw, --output-all"

# --- bad options: one line, exit 2 ---
for bad in "-o nosuch" "--json --raw" "--prometheus -o name" "--json --prometheus" "-o ,"; do
    rc=0
    # shellcheck disable=SC2086 # the options are meant to split
    "$UZRAM" status $bad >/dev/null 2>"$WORK/err" || rc=$?
    [[ $rc -eq 2 && $(wc -l <"$WORK/err") -eq 1 ]] || fail "status $bad: status $rc: $(cat "$WORK/err")"
done
pass "bad --output, and table options with --json/--prometheus: one line, exit 2"

# --- Prometheus text: parsed; every counter of every device, typed and described ---
"$UZRAM" status --prometheus >"$WORK/metrics"
$PY - "$WORK/metrics" "$UZRAM" <<'EOF' || fail "Prometheus text: $(head -20 "$WORK/metrics")"
import json, re, subprocess, sys
text = open(sys.argv[1]).read()
assert text.endswith("\n"), "no final newline"
helps, types, samples, order = {}, {}, {}, []
sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{device="([^"\\]*)"(,server="[^"]*",algorithm="([^"]*)")?\} (\d+)$')
for line in text.splitlines():
    if line.startswith("# HELP "):
        name, help_ = line[7:].split(" ", 1)
        assert name not in helps, "HELP twice: " + name
        helps[name] = help_; order.append(name)
    elif line.startswith("# TYPE "):
        name, kind = line[7:].split(" ")
        assert name == order[-1], "TYPE %s not right after its HELP" % name
        assert kind in ("gauge", "counter"), line
        types[name] = kind
    else:
        m = sample.match(line)
        assert m, "not a sample line: %r" % line
        assert m.group(1) == order[-1], "sample %s outside its family" % m.group(1)
        samples[(m.group(1), m.group(2))] = int(m.group(5))
for name in ("zeros", "uzram0", "empty"):
    counters = json.loads(subprocess.check_output([sys.argv[2], "attr", name, "stat_json"]))
    assert len(counters) >= 18
    for key, value in counters.items():
        # a level is a gauge named as the counter; a count of events a counter with _total
        metric = "uzram_" + key
        if types.get(metric) != "gauge":
            metric += "_total"
            assert types.get(metric) == "counter", "no gauge or counter for " + key
        assert len(helps[metric]) > 10, metric
        assert samples[(metric, name)] == value, (metric, name, samples[(metric, name)], value)
    assert samples[("uzram_info", name)] == 1
    assert samples[("uzram_disksize", name)] > 0
assert types["uzram_failed_writes_total"] == "counter" and types["uzram_mem_used_total"] == "gauge"
print("%d families, %d samples; every counter of 3 devices, typed and described" % (len(types), len(samples)))
EOF
pass "--prometheus: every counter, HELP and TYPE, device label, values equal to stat_json"

# --- uzram attr DEVICE: every attribute with its value, as grep . /sys/block/zram0/* does ---
"$UZRAM" attr uzram0 >"$WORK/attrs" || fail "attr uzram0 without a name"
$PY - "$WORK/attrs" "$UZRAM" <<'EOF' || fail "attr listing: $(cat "$WORK/attrs")"
import re, subprocess, sys
lines = open(sys.argv[1]).read().splitlines()
listed, current = {}, None
for line in lines:
    m = re.match(r"^(\S+) +(.*)$", line)
    if m:
        current = m.group(1); listed[current] = [m.group(2)]
    else:
        listed[current].append(line.strip())
names = subprocess.check_output([sys.argv[2], "attr", "--help"], text=True)
names = re.search(r"^Attributes: (.*)$", names, re.M).group(1).split()
assert list(listed) == names, (list(listed), names)
for name, value in listed.items():
    if value == ["(write-only)"]:
        r = subprocess.run([sys.argv[2], "attr", "uzram0", name], capture_output=True, text=True)
        assert r.returncode == 1 and "write-only" in r.stderr, (name, r)
        continue
    direct = subprocess.check_output([sys.argv[2], "attr", "uzram0", name], text=True).splitlines()
    assert value == direct, (name, value, direct)  # nothing writes to uzram0 meanwhile
assert listed["compact"] == ["(write-only)"], listed["compact"]
print("%d attributes listed, %d write-only" % (len(listed), sum(v == ["(write-only)"] for v in listed.values())))
EOF
pass "attr DEVICE lists every attribute of attr --help with the value attr DEVICE NAME reads"

# --- attr --help: what each write takes is the engine's own words (uzram_attr_usage), the
# same the server answers a bad value with ---
"$UZRAM" attr --help >"$WORK/attr-help" || fail "attr --help"
$PY - "$WORK/attr-help" "$UZRAM" <<'EOF' || fail "attr --help: $(cat "$WORK/attr-help")"
import re, subprocess, sys
text = open(sys.argv[1]).read()
names = re.search(r"^Attributes: (.*)$", text, re.M).group(1).split()
part = text.split("\nWritable, and what a write takes", 1)[1].split("):\n", 1)[1]
usage, current = {}, None
for line in part.splitlines():
    m = re.match(r"^  (\S+) +(.*)$", line)
    if m:
        current = m.group(1); usage[current] = m.group(2)
    else:
        usage[current] += " " + line.strip()
assert set(usage) <= set(names), set(usage) - set(names)
assert "disksize" not in usage and "mm_stat" not in usage and "mem_limit" in usage, usage
for name in ("mem_limit", "same_filled", "recompress_idle", "writeback_rate"):
    r = subprocess.run([sys.argv[2], "attr", "uzram0", name, "bogus"], capture_output=True, text=True)
    assert r.returncode == 1 and usage[name] in " ".join(r.stderr.split()), (name, usage[name], r.stderr)
print("%d writable attributes, each with the words the server refuses a bad value with" % len(usage))
EOF
pass "attr --help says what each write takes in the engine's words"

# A device named on the command line that is not running is an error; none running, nothing.
if "$UZRAM" status nosuch >/dev/null 2>&1; then fail "status of a missing device succeeded"; fi
stop_server uzram0
stop_server zeros
stop_server empty
[[ -z $("$UZRAM" status) && $("$UZRAM" status --prometheus | grep -vc '^#') -eq 0 ]] ||
    fail "with no device: $("$UZRAM" status --prometheus)"
pass "no device: an empty table and no samples"

echo "PASS: status.sh"
