#!/usr/bin/env bash
# zramgen.sh - integration test of `uzram zram-generator` (issue 28): zram-generator's own
# files read with its precedence (the last main file of /usr/lib, /usr/local/lib, /etc, /run;
# drop-ins by name, /etc's over /usr/lib's, a /dev/null link masking one), a fake MemTotal and
# kernel command line under ZRAM_GENERATOR_ROOT; each [zramN] section's keys mapped to the
# `uzram serve` command line it prints (zram-size expressions, zram-resident-limit,
# compression-algorithm with recompression, writeback-device, host-memory-limit), unknown keys
# and sections warned about with FILE:LINE, bad values refused with FILE:LINE (zram-size
# past zram-generator's nesting and length limits too, not a crash; unmatched parentheses in
# compression-algorithm warned about, naming the algorithm used); the generator
# enabling uzram-zram-setup@NAME for swap and mounts only (none with systemd.zram=0, zram0 with
# systemd.zram, none where zram-generator is installed); a device served from a real file, its
# settings read back from the server. --setup-device and --reset-device: zramgen-setup.sh.
# Skips and fails as tests/integration/lib.bash says (exit 0/1/77).
set -euo pipefail

. "$(dirname "$0")/lib.bash"
need_tools nbdinfo
lib_init

R=$WORK/root
mkdir -p "$R/proc" "$R/usr/lib/systemd/zram-generator.conf.d" "$R/etc/systemd/zram-generator.conf.d"
printf 'MemTotal:        8013220 kB\nMemFree:          721288 kB\n' >"$R/proc/meminfo"
echo "BOOT_IMAGE=/vmlinuz root=/dev/sda1 quiet" >"$R/proc/cmdline"
zg() { ZRAM_GENERATOR_ROOT=$R "$UZRAM" zram-generator "$@"; }

# The vendor's main file loses to /etc's (only one main file is read).
printf '[zram9]\nzram-size = 1\n' >"$R/usr/lib/systemd/zram-generator.conf"
cat >"$R/etc/systemd/zram-generator.conf" <<'EOF'
# the administrator's file
set!half = echo "ram / 2"
[zram0]
zram-size = min(half, 4096)
compression-algorithm = lzo-rle zstd(level=3) lz4hc (type=idle)
bogus-key = 1

[zram1]
zram-size = ram / 10
fs-type = ext4
mount-point = /run/compressed
options = discard,noatime

[swapfile]
size = 1

[zram2]
host-memory-limit = 4000
EOF
# Drop-ins: sorted by name whatever their directory; /etc's 20-x.conf replaces /usr/lib's.
cat >"$R/usr/lib/systemd/zram-generator.conf.d/20-x.conf" <<'EOF'
[zram3]
zram-size = 1
EOF
cat >"$R/etc/systemd/zram-generator.conf.d/20-x.conf" <<'EOF'
[zram3]
zram-resident-limit = 256
compression-algorithm = zstd(level=5)
swap-priority = 5
writeback-device = /dev/disk/by-partlabel/wb
options = nofail
EOF
cat >"$R/etc/systemd/zram-generator.conf.d/10-first.conf" <<'EOF'
[zram3]
zram-size = 2 * 512
swap-priority = 1
EOF
cat >"$R/usr/lib/systemd/zram-generator.conf.d/30-masked.conf" <<'EOF'
[zram4]
zram-size = 100
EOF
ln -s /dev/null "$R/etc/systemd/zram-generator.conf.d/30-masked.conf"
cat >"$R/usr/lib/systemd/zram-generator.conf.d/40-obsolete.conf" <<'EOF'
[zram5]
zram-fraction = 0.25
max-zram-size = 1024
fs-type = ext2
EOF

zg >"$WORK/print" 2>"$WORK/warnings" || fail "zram-generator (print): $(cat "$WORK/warnings")"
E=$R/etc/systemd/zram-generator.conf
# MemTotal 8013220 kB = 7825 MB; zram0: min(7825 / 2, 4096) MB = 4102553600 bytes.
cat >"$WORK/want" <<EOF
zram0 (${E}:4):
  uzram serve --name zram0 --size 4006400K --algorithm lzo --mem-limit 4006400K --recompress algo=zstd,level=3 --swap
  mem-limit: the disk size (no zram-resident-limit): swap needs a bound
  swap: mkswap, swapon --discard --priority 100 -o discard
zram1 (${E}:9):
  uzram serve --name zram1 --size 801280K
  file system: ext4 on /run/compressed, mount options discard,noatime
zram2 (${E}:18): not created: this machine has 7825 MB, more than its host-memory-limit of 4000 MB
zram3 (${E}.d/10-first.conf:2):
  uzram serve --name zram3 --size 1G --algorithm zstd --level 5 --mem-limit 256M --backing-file /dev/disk/by-partlabel/wb --swap
  swap: mkswap, swapon --discard --priority 5 -o nofail
zram5 ($R/usr/lib/systemd/zram-generator.conf.d/40-obsolete.conf:2):
  uzram serve --name zram5 --size 1G
  neither swap nor a mount-point: served, not set up (no units)
EOF
diff -u "$WORK/want" "$WORK/print" >"$WORK/diff" || fail "what the devices become: $(cat "$WORK/diff")"
cat >"$WORK/want" <<EOF
uzram: ${E}:6: unknown key 'bogus-key' in [zram0], ignored (zram-generator.conf(5) has none)
uzram: ${E}:14: section [swapfile] ignored: devices are [zramN] sections
uzram: ${E}:5: lzo-rle is the kernel's; uzram uses lzo
uzram: ${E}:5: uzram serve takes one recompression algorithm: 'lz4hc' (priority 2) is not set; add it at run time: uzram attr zram0 recomp_algorithm 'algo=lz4hc priority=2'
uzram: ${E}:5: '(type=idle)': parameters without an algorithm are not used by uzram
EOF
diff -u "$WORK/want" "$WORK/warnings" >"$WORK/diff" || fail "the warnings: $(cat "$WORK/diff")"
pass "files and precedence (main, drop-ins, mask), expressions, set!, every key mapped; warnings with FILE:LINE"

# --- bad values: one line with FILE:LINE, exit 1 ---
bad() { # CONTENT EXPECTED-MESSAGE
    printf '[zram0]\n%s\n' "$1" >"$WORK/bad.conf"
    "$UZRAM" zram-generator --config "$WORK/bad.conf" >/dev/null 2>"$WORK/err" && fail "'$1' was taken"
    grep -qxF "uzram: $WORK/bad.conf:2: $2" "$WORK/err" || fail "'$1': $(cat "$WORK/err")"
}
bad "swap-priority = 40000" "swap-priority '40000' is not from -1 to 32767"
bad "zram-size = min(ram," "unexpected end at column 9 of 'min(ram,'"
bad "zram-size = sin(ram)" "unknown function (uzram knows min, max, abs, int, ceil, floor, round) at column 1 of 'sin(ram)'"
bad "zram-size = ram - 2 * ram" "[zram0] zram-size = ram - 2 * ram comes to -$(($(sed -n 's/^MemTotal: *\([0-9]*\).*/\1/p' /proc/meminfo) / 1024)) MB: not a size"
bad "host-memory-limit = lots" "host-memory-limit 'lots' is not a number of MB nor 'none'"
bad "mount-point = run/x" "mount-point 'run/x' is not an absolute path without '..'"
bad "writeback-device = /dev/../etc/passwd" "writeback-device '/dev/../etc/passwd' is not an absolute path without '..'"
printf '[zram0]\nno equals sign\n' >"$WORK/bad.conf"
"$UZRAM" zram-generator --config "$WORK/bad.conf" 2>"$WORK/err" && fail "a line without = was taken"
grep -qxF "uzram: $WORK/bad.conf:2: expected [SECTION] or KEY = VALUE, not 'no equals sign'" "$WORK/err" || fail "no '=': $(cat "$WORK/err")"
pass "bad values refused with FILE:LINE and what is allowed"

# --- past zram-generator's limits: refused with FILE:LINE, not a crash (100,000 signs
# overflowed the stack); unmatched parentheses in compression-algorithm warned about ---
parens=$(printf '(%.0s' $(seq 33))1$(printf ')%.0s' $(seq 33))
bad "zram-size = $parens" "nested more than 32 deep (parentheses, functions, signs; zram-generator's limit too) at column 33 of '$parens'"
printf '[zram0]\nzram-size = %s1\n' "$(head -c 100000 /dev/zero | tr '\0' -)" >"$WORK/bad.conf"
rc=0
"$UZRAM" zram-generator --config "$WORK/bad.conf" >/dev/null 2>"$WORK/err" || rc=$?
[[ $rc -eq 1 ]] || fail "zram-size of 100,000 signs: exit status $rc (1 wanted): $(head -c 300 "$WORK/err")"
grep -qxF "uzram: $WORK/bad.conf:2: longer than 4096 characters (100001; zram-generator's limit too)" "$WORK/err" ||
    fail "zram-size of 100,000 signs: $(head -c 300 "$WORK/err")"
printf '[zram0]\ncompression-algorithm = (((((\n[zram1]\ncompression-algorithm = zstd((level=3)\n' >"$WORK/algo.conf"
"$UZRAM" zram-generator --config "$WORK/algo.conf" >"$WORK/print" 2>"$WORK/err" || fail "compression-algorithm = (((((: $(cat "$WORK/err")"
cat >"$WORK/want" <<EOF
uzram: $WORK/algo.conf:2: '(((((': its parentheses do not match (ALGO(PARAMS) or (PARAMS)); its parameters are not used
uzram: $WORK/algo.conf:2: zram0 uses uzram's default algorithm, lz4
uzram: $WORK/algo.conf:4: 'zstd((level=3)': its parentheses do not match (ALGO(PARAMS) or (PARAMS)); its parameters are not used
EOF
diff -u "$WORK/want" "$WORK/err" >"$WORK/diff" || fail "unmatched parentheses: $(cat "$WORK/diff")"
grep -q -- "--name zram0 --size [^ ]* --mem-limit" "$WORK/print" || fail "zram0 with (((((: $(cat "$WORK/print")"
grep -q -- "--name zram1 --size [^ ]* --algorithm zstd --mem-limit" "$WORK/print" || fail "zram1: $(cat "$WORK/print")"
pass "zram-size nested past 32 or longer than 4096 refused with FILE:LINE; compression-algorithm's unmatched parentheses warned about, the algorithm used named"

# --- the generator: units for swap and mount devices only ---
zg --generate --unit-dir /lib/systemd/system "$WORK/gen" "$WORK/early" "$WORK/late" 2>/dev/null ||
    fail "--generate failed"
(cd "$WORK/gen" && find . | sort | while read -r f; do
    if [[ -L $f ]]; then echo "$f -> $(readlink "$f")"; else echo "$f"; fi
done) >"$WORK/units"
cat >"$WORK/want" <<'EOF'
.
./multi-user.target.wants
./multi-user.target.wants/uzram-zram-setup@zram0.service -> /lib/systemd/system/uzram-zram-setup@.service
./multi-user.target.wants/uzram-zram-setup@zram1.service -> /lib/systemd/system/uzram-zram-setup@.service
./multi-user.target.wants/uzram-zram-setup@zram3.service -> /lib/systemd/system/uzram-zram-setup@.service
EOF
diff -u "$WORK/want" "$WORK/units" >"$WORK/diff" || fail "generated units: $(cat "$WORK/diff")"
echo "quiet systemd.zram=1 systemd.zram=0" >"$R/proc/cmdline"
zg --generate "$WORK/gen0" 2>"$WORK/err" || fail "--generate with systemd.zram=0"
[[ ! -e $WORK/gen0/multi-user.target.wants ]] || fail "systemd.zram=0 still made units"
zg --setup-device zram0 2>"$WORK/err" || fail "--setup-device with systemd.zram=0 failed"
grep -q "systemd.zram=0 on the kernel command line: no devices" "$WORK/err" || fail "systemd.zram=0: $(cat "$WORK/err")"
rm -rf "$R/etc/systemd" "$R/usr/lib/systemd"
echo "quiet systemd.zram" >"$R/proc/cmdline"
zg >"$WORK/print" 2>&1 || fail "systemd.zram without files: $(cat "$WORK/print")"
grep -qx "  uzram serve --name zram0 --size 4006400K --mem-limit 4006400K --swap" "$WORK/print" ||
    fail "systemd.zram: zram0 with the defaults: $(cat "$WORK/print")"
mkdir -p "$R/usr/lib/systemd/system-generators"
touch "$R/usr/lib/systemd/system-generators/zram-generator"
zg --generate "$WORK/gen1" 2>"$WORK/err" || fail "--generate beside zram-generator"
[[ ! -e $WORK/gen1/multi-user.target.wants ]] || fail "units made though zram-generator is installed"
grep -q "zram-generator is installed and sets up these devices with kernel zram" "$WORK/err" || fail "beside zram-generator: $(cat "$WORK/err")"
pass "generator: uzram-zram-setup@ for swap and mounts only; systemd.zram=0, systemd.zram and zram-generator obeyed"

# --- a device served from a real file: its settings read back from the server ---
ram_mb=$(($(sed -n 's/^MemTotal: *\([0-9]*\).*/\1/p' /proc/meminfo) / 1024))
cat >"$WORK/zram.conf" <<'EOF'
[zram7]
zram-size = min(ram / 64, 48)
zram-resident-limit = 16
compression-algorithm = zstd(level=4) lz4hc(level=9,group=4) deflate
fs-type = ext2
EOF
"$UZRAM" zram-generator --config "$WORK/zram.conf" --serve zram7 >"$WORK/server-zram7.out" 2>"$WORK/server-zram7.err" &
SERVER_PID[zram7]=$!
for _ in $(seq 100); do [[ -S $(ctl_of zram7) ]] && break; sleep 0.1; done
[[ -S $(ctl_of zram7) ]] || fail "--serve zram7 did not start: $(cat "$WORK/server-zram7.err")"
want_size=$(( (ram_mb / 64 < 48 ? ram_mb * 1048576 / 64 : 48 * 1048576) / 4096 * 4096 ))
[[ $(nbdinfo --size "$(uri_of zram7)") -eq $want_size ]] || fail "size: $(nbdinfo --size "$(uri_of zram7)"), not $want_size"
[[ $("$UZRAM" attr zram7 mem_limit) -eq $((16 * MiB)) ]] || fail "zram-resident-limit: $("$UZRAM" attr zram7 mem_limit)"
grep -q '\[zstd\]' <<<"$("$UZRAM" attr zram7 comp_algorithm)" || fail "algorithm: $("$UZRAM" attr zram7 comp_algorithm)"
grep -q 'level=4' <<<"$("$UZRAM" attr zram7 algorithm_params)" || fail "level: $("$UZRAM" attr zram7 algorithm_params)"
grep -q 'lz4hc' <<<"$("$UZRAM" attr zram7 recomp_algorithm)" || fail "recompression: $("$UZRAM" attr zram7 recomp_algorithm)"
[[ $("$UZRAM" attr zram7 recompress_group) -eq 4 ]] || fail "group=: recompress_group $("$UZRAM" attr zram7 recompress_group)"
! grep -q "group=4" "$WORK/server-zram7.err" || fail "group= warned about: $(cat "$WORK/server-zram7.err")"
# The third algorithm, which serve does not take: the warning's command adds it, run as printed.
hint=$(sed -n "s/.*add it at run time: \(uzram attr zram7 recomp_algorithm 'algo=deflate priority=2'\)$/\1/p" "$WORK/server-zram7.err")
[[ -n $hint ]] || fail "no run-time hint for the third algorithm: $(cat "$WORK/server-zram7.err")"
PATH=$(dirname "$UZRAM"):$PATH bash -c "$hint" || fail "'$hint' failed"
grep -q '^#2: .*\[deflate\]' <<<"$("$UZRAM" attr zram7 recomp_algorithm)" ||
    fail "'$hint' did not add deflate: $("$UZRAM" attr zram7 recomp_algorithm)"
stop_server zram7
pass "--serve: size, zram-resident-limit, algorithm and level, recompression algorithm and group= in effect; the third algorithm's hint run as printed"

echo "PASS: zramgen.sh"
