#!/bin/bash
# estimate.sh - integration test of `uzram estimate`: exact counts on generated inputs, JSON,
# a live process, errors, and agreement with what a served device reports in mm_stat.
# Skips and fails as tests/integration/lib.bash says (exit 0/1/77; a check that cannot run
# here is announced with skip_check). No `set -e`: many checks test an exit status.
set -uo pipefail

. "$(dirname "$0")/lib.bash"
[[ -x $PY ]] || skip "$PY is missing"
lib_init
work=$WORK
child=
at_exit '[[ -z $child ]] || { kill -CONT $child; kill $child; wait $child; }'

# ---------------------------------------------------------------------------
# Generator and reference: files of exactly known composition, and a plain
# Python classifier (exact content comparison, no hashing) to check against.
# ---------------------------------------------------------------------------
cat >"$work/reference.py" <<'EOF'
import json, struct, sys

def scan(page, words):
    w = struct.unpack('<%dQ' % words, page)
    first = w[0]
    i = 1
    while i < words and w[i] == first:
        i += 1
    same = i == words
    forward = words - 1 if same else i
    if same:
        backward = words - 1
    else:
        j = words - 1
        while w[j] == first:
            j -= 1
        backward = words - j
    if w[words - 1] != first:
        pre = 1
    else:
        pre = words - 1 if same else 1 + i
    return same, first, forward, backward, pre

def pages_of(data, page_size):
    tail = len(data) % page_size
    if tail:
        data += bytes(page_size - tail)
    return [data[i:i + page_size] for i in range(0, len(data), page_size)], tail

class Run:
    """Classifies pages in order, as `uzram estimate` defines the classes."""
    def __init__(self, page_size):
        self.page_size = page_size
        self.seen = {}
    def source(self, pages):
        c = dict(pages=0, zero_pages=0, same_pages=0, duplicate_pages=0, unique_pages=0,
                 forward=0, backward=0, precheck=0)
        for page in pages:
            same, word, f, b, p = scan(page, self.page_size // 8)
            c['pages'] += 1; c['forward'] += f; c['backward'] += b; c['precheck'] += p
            if same:
                c['zero_pages' if word == 0 else 'same_pages'] += 1
            elif page in self.seen:
                self.seen[page] += 1; c['duplicate_pages'] += 1
            else:
                self.seen[page] = 1; c['unique_pages'] += 1
        return c
    def histogram(self):
        buckets = {}
        for count in self.seen.values():
            b = 0 if count <= 1 else (count - 1).bit_length()
            low, high = (1, 1) if b == 0 else ((1 << (b - 1)) + 1, 1 << b)
            e = buckets.setdefault(b, dict(refs_min=low, refs_max=high, contents=0, pages=0))
            e['contents'] += 1; e['pages'] += count
        return [buckets[b] for b in sorted(buckets)]

def reference(paths, page_size):
    run = Run(page_size)
    sources = []
    for path in paths:
        data = open(path, 'rb').read() if path != '-' else sys.stdin.buffer.read()
        pages, tail = pages_of(data, page_size)
        c = run.source(pages)
        c['partial_bytes'] = tail
        c['bytes'] = len(data)
        sources.append(c)
    total = {k: sum(s[k] for s in sources) for k in sources[0]}
    return dict(sources=sources, total=total, histogram=run.histogram())

def compare(expected, got, where):
    errors = []
    names = dict(forward='forward_comparisons', backward='backward_comparisons',
                 precheck='precheck_comparisons')
    for key, value in expected.items():
        if key in names:
            have = got['same_filled_check'][names[key]]
        else:
            have = got[key]
        if have != value:
            errors.append('%s %s: expected %s, got %s' % (where, key, value, have))
    return errors

def check(json_path, page_size, paths):
    got = json.load(open(json_path))
    exp = reference(paths, page_size)
    errors = []
    if len(got['sources']) != len(paths):
        errors.append('%d sources reported, %d given' % (len(got['sources']), len(paths)))
    for i, s in enumerate(exp['sources']):
        errors += compare(s, got['sources'][i], 'source %d' % i)
    errors += compare(exp['total'], got['total'], 'total')
    hist = [{k: h[k] for k in ('refs_min', 'refs_max', 'contents', 'pages')} for h in got['histogram']]
    if hist != exp['histogram']:
        errors.append('histogram: expected %s, got %s' % (exp['histogram'], hist))
    return errors

if __name__ == '__main__':
    json_path, page_size, *paths = sys.argv[1:]
    errors = check(json_path, int(page_size), paths)
    for e in errors:
        print(e)
    sys.exit(1 if errors else 0)
EOF

cat >"$work/generate.py" <<'EOF'
# generate.py DIR: writes a.img and b.img, and composition.json with what they hold.
import json, os, random, struct, sys
out = sys.argv[1]
r = random.Random(20240501)
PAGE = 4096
# a small vocabulary: text pages compress well with every algorithm (never huge)
words = [''.join(r.choice('etaoinshrdlucmfwyp') for _ in range(r.randint(2, 8))) for _ in range(60)]

def text_page(tag):
    s = 'page %d: ' % tag
    while len(s) < PAGE:
        s += r.choice(words) + r.choice('  \n,.')
    return s[:PAGE].encode()

def random_page():
    return r.randbytes(PAGE)

def same_page(word):
    return struct.pack('<Q', word) * (PAGE // 8)

pages = []                       # (content, kind)
pages += [(bytes(PAGE), 'zero')] * 100
for word, n in ((0x0101010101010101, 30), (0xdeadbeefcafef00d, 20),
                (0xffffffffffffffff, 10), (0xff, 7)):
    pages += [(same_page(word), 'same')] * n
tag = 0
for _ in range(200):
    tag += 1; pages.append((text_page(tag), 'text'))
for _ in range(150):
    pages.append((random_page(), 'random'))
# the pre-check's worst case: same words except the last one, and near misses
for i in range(5):
    page = bytearray(same_page(0x4141414141414141))
    page[-8:] = struct.pack('<Q', i + 1)
    pages.append((bytes(page), 'nearly'))
page = bytearray(same_page(0x4242424242424242)); page[2048] ^= 1
pages.append((bytes(page), 'nearly'))
# duplicated contents with known reference counts: (copies, how many contents, kind)
dups = [(2, 10, 'text'), (3, 5, 'random'), (4, 4, 'text'), (7, 2, 'random'),
        (20, 1, 'text'), (100, 1, 'random')]
for copies, contents, kind in dups:
    for _ in range(contents):
        if kind == 'text':
            tag += 1; content = text_page(tag)
        else:
            content = random_page()
        pages += [(content, kind)] * copies
r.shuffle(pages)
split = len(pages) * 3 // 5
with open(os.path.join(out, 'a.img'), 'wb') as f:
    f.write(b''.join(p for p, _ in pages[:split]))
tail = text_page(999999)[:1000]   # a partial last page, padded with zeros when read
with open(os.path.join(out, 'b.img'), 'wb') as f:
    f.write(b''.join(p for p, _ in pages[split:]) + tail)
random_contents = 150 + 5 + 2 + 1
composition = dict(
    pages=len(pages) + 1, zero_pages=100, same_pages=67,
    unique_pages=200 + 150 + 6 + 10 + 5 + 4 + 2 + 1 + 1 + 1,
    duplicate_pages=10 + 10 + 12 + 12 + 19 + 99,
    histogram=[dict(refs_min=1, refs_max=1, contents=357, pages=357),
               dict(refs_min=2, refs_max=2, contents=10, pages=20),
               dict(refs_min=3, refs_max=4, contents=9, pages=31),
               dict(refs_min=5, refs_max=8, contents=2, pages=14),
               dict(refs_min=17, refs_max=32, contents=1, pages=20),
               dict(refs_min=65, refs_max=128, contents=1, pages=100)],
    huge_unique=random_contents, huge_all=150 + 15 + 14 + 100)
json.dump(composition, open(os.path.join(out, 'composition.json'), 'w'))
EOF

"$PY" "$work/generate.py" "$work" || fail "the input generator failed"
a=$work/a.img b=$work/b.img

# ---------------------------------------------------------------------------
# 1. Exact counts, histogram and scan statistics, two sources, -j1 and -j2
# ---------------------------------------------------------------------------
# -j1 with the default algorithm (lz4 alone), -j2 with every algorithm of the build.
for jobs in 1 2; do
    algorithms=()
    [[ $jobs -eq 2 ]] && algorithms=(--algorithms all)
    if "$UZRAM" estimate -q -j "$jobs" "${algorithms[@]}" --json "$a" "$b" >"$work/two-$jobs.json" 2>"$work/err"; then
        if "$PY" "$work/reference.py" "$work/two-$jobs.json" 4096 "$a" "$b"; then
            pass "two sources at -j$jobs match the reference classifier"
        else
            fail "two sources at -j$jobs differ from the reference"
        fi
    else
        fail "estimate -j$jobs exited $?: $(cat "$work/err")"
    fi
done

$PY -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["algorithms"] != ["lz4"])' "$work/two-1.json" ||
    fail "the default is not lz4 alone: $(grep '"algorithms": \[' "$work/two-1.json")"
$PY - "$work/two-2.json" <<'EOF' || fail "--algorithms all did not try every algorithm"
import json, sys
got = json.load(open(sys.argv[1]))["algorithms"]
assert got[0] == "lz4" and len(got) >= 2 and len(set(got)) == len(got), got
EOF
pass "default algorithm lz4 alone; --algorithms all tries every algorithm, lz4 first"

# The known composition, independent of the reference, and the per-algorithm huge counts.
"$PY" - "$work/two-2.json" "$work/composition.json" <<'EOF' && pass "known composition found exactly" || fail "known composition"
import json, sys
got = json.load(open(sys.argv[1])); want = json.load(open(sys.argv[2]))
t = got['total']; errors = []
for key in ('pages', 'zero_pages', 'same_pages', 'unique_pages', 'duplicate_pages'):
    if t[key] != want[key]:
        errors.append('%s: want %d got %d' % (key, want[key], t[key]))
hist = [{k: h[k] for k in ('refs_min', 'refs_max', 'contents', 'pages')} for h in got['histogram']]
if hist != want['histogram']:
    errors.append('histogram %s' % hist)
if t['partial_bytes'] != 1000 or got['sources'][1]['partial_bytes'] != 1000:
    errors.append('partial_bytes %d' % t['partial_bytes'])
if not got['algorithms']:
    errors.append('no algorithms')
for name, a in t['algorithms'].items():
    if a['huge_pages'] != want['huge_unique'] or a['huge_pages_no_dedup'] != want['huge_all']:
        errors.append('%s huge %d/%d' % (name, a['huge_pages'], a['huge_pages_no_dedup']))
    if not (a['uzram_dedup']['pool_bytes'] < a['uzram']['pool_bytes'] and
            a['zram_dedup_patch']['meta_bytes'] == 48 * t['unique_pages'] and
            a['uzram_dedup']['meta_bytes'] == got['dedup_entry_bytes'] * t['unique_pages']):
        errors.append('%s projections %s' % (name, a))
    if a['compressed_bytes'] >= a['compressed_bytes_no_dedup']:
        errors.append('%s compressed sizes' % name)
# per-source figures add up to the total
for key in ('pages', 'zero_pages', 'same_pages', 'unique_pages', 'duplicate_pages'):
    if sum(s[key] for s in got['sources']) != t[key]:
        errors.append('sources do not add up for ' + key)
print('\n'.join(errors))
sys.exit(1 if errors else 0)
EOF

# Human output: readable table with the same total.
if "$UZRAM" estimate -q -a lz4 "$a" "$b" >"$work/text" 2>&1 &&
    grep -Eq "^total +$(($(stat -c %s "$a") / 4096 + $(stat -c %s "$b") / 4096 + 1)) " "$work/text" &&
    grep -q "Duplicate references" "$work/text" && grep -q "last-word pre-check" "$work/text"; then
    pass "text report"
else
    fail "text report: $(cat "$work/text")"
fi

# ---------------------------------------------------------------------------
# 2. Standard input, other page sizes, algorithm subsets
# ---------------------------------------------------------------------------
cat "$a" "$b" >"$work/ab.img"
if cat "$a" "$b" | "$UZRAM" estimate -q -a lz4,zstd --json - >"$work/stdin.json" &&
    "$PY" "$work/reference.py" "$work/stdin.json" 4096 "$work/ab.img" &&
    "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(d['algorithms']!=['lz4','zstd'])" "$work/stdin.json"; then
    pass "standard input"
else
    fail "standard input"
fi
for size in 512 8192 65536; do
    if "$UZRAM" estimate -q --page-size "$size" --json "$a" "$b" >"$work/ps.json" &&
        "$PY" "$work/reference.py" "$work/ps.json" "$size" "$a" "$b"; then
        pass "page size $size"
    else
        fail "page size $size"
    fi
done
"$UZRAM" estimate -q --page-size 8192 -a lz4 "$a" >/dev/null 2>&1 && fail "compression at 8192 accepted"
"$UZRAM" estimate -q -a nosuch "$a" >/dev/null 2>&1 && fail "unknown algorithm accepted"

# A block device (read only): a loop device over a.img, when we may make one.
if [[ $(id -u) -eq 0 ]] && command -v losetup >/dev/null &&
    loop=$(losetup -f --show -r "$a" 2>/dev/null) && [[ -b $loop ]]; then
    "$UZRAM" estimate -q -a lz4 --json "$loop" >"$work/dev.json" 2>"$work/err"
    status=$?
    losetup -d "$loop"
    if [[ $status -eq 0 ]] && "$PY" "$work/reference.py" "$work/dev.json" 4096 "$a" &&
        grep -q '"type": "device"' "$work/dev.json"; then
        pass "block device $loop"
    else
        fail "block device: $(cat "$work/err")"
    fi
else
    skip_check "block device case: no loop device can be made here (needs root and losetup)"
fi

# ---------------------------------------------------------------------------
# 3. Errors: one clear line, exit 1, nothing on stdout
# ---------------------------------------------------------------------------
for bad in "$work/missing.img"; do
    "$UZRAM" estimate -q "$a" "$bad" >"$work/out" 2>"$work/err"
    status=$?
    if [[ $status -eq 1 && $(wc -l <"$work/err") -eq 1 && ! -s $work/out ]] &&
        grep -q "$bad" "$work/err"; then
        pass "error for $bad: $(cat "$work/err")"
    else
        fail "error for $bad: status $status, stderr: $(cat "$work/err")"
    fi
done
# A file this user may not read. Root reads a mode 000 file anyway, so root runs this check
# as nobody (setpriv), with the work folder opened to let nobody reach the file.
cp "$a" "$work/locked.img"; chmod 000 "$work/locked.img"
as_user=()
[[ $(id -u) -eq 0 ]] && command -v setpriv >/dev/null &&
    as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
if [[ $(id -u) -eq 0 && ${#as_user[@]} -eq 0 ]]; then
    skip_check "permission error case: running as root without setpriv to drop to nobody"
elif ! "${as_user[@]}" "$UZRAM" --version >/dev/null 2>&1; then
    skip_check "permission error case: user nobody cannot run $UZRAM"
else
    chmod 711 "$work"
    "${as_user[@]}" "$UZRAM" estimate -q "$work/locked.img" >/dev/null 2>"$work/err"
    [[ $? -eq 1 && $(wc -l <"$work/err") -eq 1 ]] && grep -q "Permission denied" "$work/err" &&
        pass "permission error: $(cat "$work/err")" || fail "permission error: $(cat "$work/err")"
fi
"$UZRAM" estimate -q --pid 999999999 >/dev/null 2>"$work/err"
[[ $? -ne 0 && $(wc -l <"$work/err") -eq 1 ]] && pass "bad pid: $(cat "$work/err")" || fail "bad pid"

# ---------------------------------------------------------------------------
# 3b. A directory: its files in name order, each from a page boundary; what is skipped
# ---------------------------------------------------------------------------
tree=$work/tree
long=a-file-name-much-longer-than-the-twenty-four-characters-of-old.img
mkdir -p "$tree/sub/deeper" "$tree/B" "$tree/empty-dir" "$tree/mnt"
head -c $((100 * 4096 + 100)) "$a" >"$tree/sub/deeper/$long"
tail -c $((50 * 4096)) "$a" >"$tree/B/z.img"
cp "$b" "$tree/a.img"
: >"$tree/empty"
head -c 3000 "$b" >"$tree/sub/short.txt"
ln -s "$a" "$tree/link-to-a"
mkfifo "$tree/fifo"
$PY -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$tree/sock"
mounted=
if [[ $(id -u) -eq 0 ]] && mount -t tmpfs -o size=1M uzram-test "$tree/mnt" 2>/dev/null; then
    mounted=1
    at_exit "umount '$tree/mnt'"
    head -c 4096 /dev/urandom >"$tree/mnt/not-read.img"
else
    skip_check "directory walk: a mount point below the directory (needs root to mount a tmpfs)"
fi
# The reference reads the same files in byte order of their names, each padded to a page.
cat >"$work/walkref.py" <<'EOF'
import json, os, stat, sys
sys.path.insert(0, os.path.dirname(sys.argv[0]))
from reference import Run, pages_of, compare
top, json_path, mounted = sys.argv[1], sys.argv[2], sys.argv[3] == '1'
pages, files, partial = [], 0, 0
skipped = dict(devices=0, sockets=0, links=0, other_file_systems=0, unreadable=0)
device = os.stat(top).st_dev
def walk(path):
    global files, partial
    for name in sorted(os.listdir(path), key=os.fsencode):
        full = os.path.join(path, name)
        st = os.lstat(full)
        if stat.S_ISLNK(st.st_mode): skipped['links'] += 1
        elif stat.S_ISSOCK(st.st_mode) or stat.S_ISFIFO(st.st_mode): skipped['sockets'] += 1
        elif st.st_dev != device: skipped['other_file_systems'] += 1
        elif stat.S_ISDIR(st.st_mode): walk(full)
        else:
            data = open(full, 'rb').read()
            p, tail = pages_of(data, 4096)
            pages.extend(p); files += 1; partial += tail
walk(top)
want = Run(4096).source(pages)
got = json.load(open(json_path))
source = got['sources'][0]
errors = compare(want, source, 'directory')
if source['type'] != 'directory' or source['files'] != files or source['skipped'] != skipped:
    errors.append('files %s skipped %s, want %d %s' % (source['files'], source['skipped'], files, skipped))
if source['partial_bytes'] != partial:
    errors.append('partial_bytes %d, want %d' % (source['partial_bytes'], partial))
if mounted != (skipped['other_file_systems'] == 1):
    errors.append('mount point not seen')
print('\n'.join(errors) if errors else 'directory: %d files, %d pages, skipped %s' % (files, len(pages), skipped))
sys.exit(1 if errors else 0)
EOF
if "$UZRAM" estimate -q -j 2 --json "$tree" >"$work/tree.json" 2>"$work/err" &&
    "$PY" "$work/walkref.py" "$tree" "$work/tree.json" "${mounted:-0}"; then
    pass "directory: files in name order, each from a page boundary, skips counted"
else
    fail "directory: $(cat "$work/err")"
fi
"$UZRAM" estimate -q -j 1 --json "$tree/" >"$work/tree-again.json" 2>&1
sed 's|"name": "[^"]*"|NAME|; s|"threads": [0-9]*|T|' "$work/tree.json" >"$work/tree-1"
sed 's|"name": "[^"]*"|NAME|; s|"threads": [0-9]*|T|' "$work/tree-again.json" >"$work/tree-2"
cmp -s "$work/tree-1" "$work/tree-2" || fail "two walks of the same tree differ: $(diff "$work/tree-1" "$work/tree-2" | head)"
pass "the same tree twice (-j2, then -j1 with a trailing /): the same report"
"$UZRAM" estimate -q "$tree/sub/deeper/$long" "$tree" >"$work/tree.txt" 2>&1 || fail "text report of a tree"
grep -q "^$tree/sub/deeper/$long  *101 " "$work/tree.txt" || fail "a long name was cut: $(head -5 "$work/tree.txt")"
grep -q "^  $tree: 5 files read, each from a page boundary; skipped: 2 sockets and pipes, 1 symbolic link" "$work/tree.txt" ||
    fail "directory note: $(grep "files read" "$work/tree.txt")"
if grep -qi 'seed' "$work/tree.txt" "$work/tree.json"; then fail "'seed' in the report: $(grep -i seed "$work/tree.txt" "$work/tree.json")"; fi
pass "text report: long names whole, the skipped entries said, no 'seed'"
# As a user who may not read everything: unreadable files and directories are counted.
if [[ ${#as_user[@]} -gt 0 ]] || [[ $(id -u) -ne 0 ]]; then
    cp "$b" "$tree/sub/locked.img"
    mkdir "$tree/locked-dir"
    cp "$b" "$tree/locked-dir/inside.img"
    chmod -R a+rX "$tree"
    chmod 000 "$tree/sub/locked.img" "$tree/locked-dir"
    if "${as_user[@]}" "$UZRAM" estimate -q --json "$tree" >"$work/tree-user.json" 2>"$work/err" &&
        "$PY" - "$work/tree-user.json" "$work/tree.json" <<'EOF'; then
import json, sys
user, before = (json.load(open(p))['sources'][0] for p in sys.argv[1:])
assert user['skipped']['unreadable'] == 2, user['skipped']
assert user['files'] == before['files'] and user['pages'] == before['pages'], (user, before)
EOF
        pass "unreadable file and directory skipped and counted (as $(id -un 65534 2>/dev/null || id -un))"
    else
        fail "unreadable entries: $(cat "$work/err") $(grep -o '"skipped": {[^}]*}' "$work/tree-user.json")"
    fi
    chmod 755 "$tree/locked-dir"
fi

# ---------------------------------------------------------------------------
# 4. A live process with known memory content
# ---------------------------------------------------------------------------
cat >"$work/child.py" <<'EOF'
import ctypes, mmap, os, random, struct, sys, time
# Let any process of this user read our memory, whatever Yama's ptrace_scope says.
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(0x59616d61, ctypes.c_ulong(0xffffffffffffffff), 0, 0, 0)
PAGE = 4096
region = mmap.mmap(-1, 512 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
r = random.Random(99)
known = r.randbytes(PAGE)
layout = ([bytes(PAGE)] * 64 + [struct.pack('<Q', 0x5a5a5a5a12345678) * 512] * 40 +
          [known] * 30 + [r.randbytes(PAGE) for _ in range(25)])
for i, page in enumerate(layout):
    region[i * PAGE:(i + 1) * PAGE] = page
# pages len(layout)..511 are never touched: not populated, skipped by estimate
print(len(layout), flush=True)
time.sleep(600)
EOF
coproc CHILD { exec "$PY" "$work/child.py"; }
child=$CHILD_PID
read -r -t 20 touched <&"${CHILD[0]}" || touched=
if [[ -z $touched ]]; then
    fail "the child process did not start"
else
    kill -STOP "$child" # nothing may change between the estimate and the reference read
    cat >"$work/procref.py" <<'EOF'
import json, os, sys
sys.path.insert(0, os.path.dirname(sys.argv[0]))
from reference import Run
pid, json_path, every = int(sys.argv[1]), sys.argv[2], len(sys.argv) > 3
def wanted(perms, path):
    if every:
        return perms[0] == 'r'
    if perms[0] != 'r' or perms[3] != 'p':
        return False
    if not path:
        return True
    if path.startswith('['):
        return path == '[heap]' or path.startswith('[stack') or path.startswith('[anon:')
    return perms[1] == 'w'
pages, unpopulated, unreadable = [], 0, 0
mem = os.open('/proc/%d/mem' % pid, os.O_RDONLY)
pagemap = os.open('/proc/%d/pagemap' % pid, os.O_RDONLY)
for line in open('/proc/%d/maps' % pid):
    fields = line.split(None, 5)
    start, end = (int(x, 16) for x in fields[0].split('-'))
    path = fields[5].strip() if len(fields) > 5 else ''
    if not wanted(fields[1], path):
        continue
    for address in range(start, end, 4096):
        entry = int.from_bytes(os.pread(pagemap, 8, address // 4096 * 8), 'little')
        if not entry & (3 << 62):
            unpopulated += 1
            continue
        try:
            data = os.pread(mem, 4096, address)
        except OSError:
            data = b''
        if len(data) != 4096:
            unreadable += 4096
            continue
        pages.append(data)
run = Run(4096)
want = run.source(pages)
got = json.load(open(json_path))
t = got['total']
errors = []
for key in ('pages', 'zero_pages', 'same_pages', 'duplicate_pages', 'unique_pages'):
    if t[key] != want[key]:
        errors.append('%s: reference %d, estimate %d' % (key, want[key], t[key]))
if t['unpopulated_pages'] != unpopulated or t['unreadable_bytes'] != unreadable:
    errors.append('unpopulated %d/%d unreadable %d/%d' % (t['unpopulated_pages'], unpopulated,
                                                          t['unreadable_bytes'], unreadable))
hist = [{k: h[k] for k in ('refs_min', 'refs_max', 'contents', 'pages')} for h in got['histogram']]
if hist != run.histogram():
    errors.append('histogram: reference %s, estimate %s' % (run.histogram(), hist))
# the child's known pages are there
if not every and t['zero_pages'] < 64 or t['same_pages'] < 40 or t['unpopulated_pages'] < 512 - 159:
    errors.append('known pages missing: %s' % t)
if not any(h['refs_min'] <= 30 <= h['refs_max'] for h in got['histogram']):
    errors.append('no content referenced 30 times')
print('\n'.join(errors) if errors else 'process: %d pages, %d unpopulated' % (t['pages'], unpopulated))
sys.exit(1 if errors else 0)
EOF
    if "$UZRAM" estimate -q -a lz4 --json --pid "$child" >"$work/pid.json" 2>"$work/err" &&
        "$PY" "$work/procref.py" "$child" "$work/pid.json"; then
        pass "live process --pid $child"
    else
        fail "live process: $(cat "$work/err")"
    fi
    # every readable mapping: kernel areas such as [vvar] are skipped, never fatal
    if "$UZRAM" estimate -q -a none --all-mappings --json --pid "$child" >"$work/all.json" 2>"$work/err" &&
        "$PY" "$work/procref.py" "$child" "$work/all.json" all; then
        pass "--all-mappings matches the reference"
    else
        fail "--all-mappings: $(cat "$work/err")"
    fi
    kill -CONT "$child"; kill "$child"; wait "$child" 2>/dev/null; child=
fi

# ---------------------------------------------------------------------------
# 5. Consistency with a served device: the uzram projection against mm_stat
# ---------------------------------------------------------------------------
if ! command -v nbdcopy >/dev/null; then
    skip_check "consistency with a served device: nbdcopy is not installed"
else
    cat >"$work/mixed.py" <<'EOF'
import os, random, sys
# pages of many compressed lengths, a fifth of them duplicated, some zero
out, mib = sys.argv[1], int(sys.argv[2])
r = random.Random(7)
words = [''.join(r.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(r.randint(3, 9))) for _ in range(300)]
bases = []
for _ in range(512):
    text = ''
    while len(text) < 4096:
        text += r.choice(words) + ' '
    bases.append(text[:4096].encode())
table = bytes(97 + (b % 26) for b in range(256))
written = []
with open(out, 'wb') as f:
    for i in range(mib * 256):
        if i % 50 == 0:
            page = bytes(4096)
        elif i % 5 == 0 and written:
            page = written[r.randrange(len(written))]
        else:
            k = r.randrange(0, 3000)
            page = os.urandom(k).translate(table) + bases[i % 512][k:]
            if len(written) < 2000:
                written.append(page)
        f.write(page)
EOF
    "$PY" "$work/mixed.py" "$work/mixed.img" 128
    socket=$(sock_of uzram0)
    "$UZRAM" estimate -q -a lz4 --json "$work/mixed.img" >"$work/mixed.json"
    for dedup in off on; do
        flags=(-s 256M -q)
        [[ $dedup == on ]] && flags+=(--dedup)
        start_server uzram0 "${flags[@]}"
        # -S 0 --allocated: write zero pages too, as estimate counts them
        nbdcopy -S 0 --allocated "$work/mixed.img" "nbd+unix:///?socket=$socket" || fail "nbdcopy"
        mm=$("$UZRAM" attr uzram0 mm_stat) || fail "reading mm_stat"
        stop_server uzram0
        if "$PY" - "$work/mixed.json" "$dedup" "$mm" <<'EOF'; then
import json, sys
got = json.load(open(sys.argv[1]))['total']
dedup = sys.argv[2] == 'on'
mm = [int(x) for x in sys.argv[3].split()]
orig, compr, used, same, huge = mm[0], mm[1], mm[2], mm[5], mm[7]
a = got['algorithms']['lz4']
model = a['uzram_dedup' if dedup else 'uzram']
projected = model['pool_bytes']
error = abs(projected - used) / used
print('dedup %s: mem_used_total %d, projected pool %d (%.2f%%); compr_data_size %d, projected %d; '
      'same %d/%d; huge %d/%d; meta_data_size %d, projected %d'
      % (sys.argv[2], used, projected, 100 * error, compr,
         a['compressed_bytes' if dedup else 'compressed_bytes_no_dedup'],
         same, got['zero_pages'] + got['same_pages'], huge,
         a['huge_pages' if dedup else 'huge_pages_no_dedup'],
         mm[10] if len(mm) > 10 else -1, model['meta_bytes']))
ok = (error <= 0.02 and orig == got['pages'] * 4096 and
      same == got['zero_pages'] + got['same_pages'])
sys.exit(0 if ok else 1)
EOF
            pass "uzram projection (dedup $dedup) within 2% of mm_stat"
        else
            fail "uzram projection (dedup $dedup) vs mm_stat [$mm]"
        fi
    done
fi

echo "PASS: estimate.sh"
