#!/usr/bin/env bash
# config.sh - integration test: `uzram serve --config FILE [--name NAME]` serves the device of
# a [NAME] section with its settings (read back from the running server with nbdinfo and
# uzram attr), options on the command line override the file (flags too: --dedup=no), the
# installed example parses, and every kind of bad file gets exactly one line naming the
# file, the line and the key, exit status 1, and no socket.
# Skips and fails as tests/integration/lib.bash says (exit 0/1/77).
set -euo pipefail

. "$(dirname "$0")/lib.bash"
need_tools nbdinfo
lib_init

REPO=$(cd "$(dirname "$0")/../.." && pwd)
CONF=$WORK/uzram.conf
cat >"$CONF" <<'EOF'
# two devices
[small]
size = 32M

; the second one, with every kind of value
[big]
size      = 96M
algorithm = zstd
level     = 5
dedup     = yes
mem-limit = 8M
threads   = 3
read-only = no
EOF

attr() { "$UZRAM" attr "$1" "$2"; }
size_of() { nbdinfo --size "$(uri_of "$1")"; }

# --- the section named by --name, each key in effect ---
start_server big --config "$CONF"
[[ $(size_of big) -eq $((96 * MiB)) ]] || fail "size from the file: $(size_of big)"
grep -q '\[zstd\]' <<<"$(attr big comp_algorithm)" || fail "algorithm from the file: $(attr big comp_algorithm)"
grep -q 'level=5' <<<"$(attr big algorithm_params)" || fail "level from the file: $(attr big algorithm_params)"
[[ $(attr big use_dedup) -eq 1 ]] || fail "dedup = yes not in effect"
[[ $(attr big mem_limit) -eq $((8 * MiB)) ]] || fail "mem-limit from the file: $(attr big mem_limit)"
grep -q 'is_read_only: false' <<<"$(nbdinfo "$(uri_of big)")" || fail "read-only = no not in effect"
stop_server big
pass "[big] served with size, algorithm, level, dedup, mem-limit, read-only from the file"

# --- the command line wins, for values and for flags ---
start_server big --config "$CONF" -s 48M --dedup=no -r -a lz4hc
[[ $(size_of big) -eq $((48 * MiB)) ]] || fail "-s did not override size: $(size_of big)"
[[ $(attr big use_dedup) -eq 0 ]] || fail "--dedup=no did not override dedup = yes"
grep -q '\[lz4hc\]' <<<"$(attr big comp_algorithm)" || fail "-a did not override algorithm"
grep -q 'is_read_only: true' <<<"$(nbdinfo "$(uri_of big)")" || fail "-r did not override read-only = no"
[[ $(attr big mem_limit) -eq $((8 * MiB)) ]] || fail "mem-limit from the file lost when others were overridden"
stop_server big
pass "command-line options override the file (-s, --dedup=no, -r, -a), the rest stays"

# --- sizes relative to RAM (issue 28): --size 1%, mem-limit = 0.5% in a file, hot-add 1% ---
ram=$(($(sed -n 's/^MemTotal: *\([0-9]*\) kB$/\1/p' /proc/meminfo) * 1024))
printf '[share]\nsize = 2%%\nmem-limit = 0.5%%\n' >"$WORK/share.conf"
start_server share --config "$WORK/share.conf" -s 1%
[[ $(size_of share) -eq $((ram / 4096 / 100 * 4096)) ]] || fail "--size 1% of $ram bytes: $(size_of share)"
[[ $(attr share mem_limit) -eq $((ram / 4096 * 5 / 1000 * 4096)) ]] || fail "mem-limit = 0.5%: $(attr share mem_limit)"
"$UZRAM" hot-add more 1% >/dev/null || fail "hot-add more 1%"
[[ $(attr more disksize) -eq $((ram / 4096 / 100 * 4096)) ]] || fail "hot-add 1%: $(attr more disksize)"
"$UZRAM" serve -n bad -s 5x% 2>"$WORK/err" && fail "--size 5x% was taken"
grep -qx "uzram: --size '5x%' is not a size; use a number with an optional K, M, G or T suffix, e.g. 512M, or a share of RAM, e.g. 50%" "$WORK/err" ||
    fail "--size 5x%: $(cat "$WORK/err")"
stop_server share
pass "sizes as a share of RAM: --size 1%, mem-limit = 0.5% in a file, hot-add 1%; 5x% refused"

# --- a file with one section serves it without --name, under its name ---
printf '[solo]\nsize = 16M\n' >"$WORK/solo.conf"
"$UZRAM" serve --config "$WORK/solo.conf" >"$WORK/server-solo.out" 2>"$WORK/server-solo.err" &
SERVER_PID[solo]=$!
for _ in $(seq 100); do [[ -S $(ctl_of solo) ]] && break; sleep 0.1; done
[[ $(size_of solo) -eq $((16 * MiB)) ]] || fail "the only section was not served as 'solo'"
stop_server solo
pass "the only section is served without --name"

# --- the example configuration shipped with make install parses and serves ---
start_server scratch --config "$REPO/docs/uzram.conf.example" --tcp 127.0.0.1:0
[[ $(size_of scratch) -eq $((512 * MiB)) ]] || fail "docs/uzram.conf.example [scratch]"
stop_server scratch
pass "docs/uzram.conf.example serves (its tcp overridden by the command line)"

# --- bad files: one line, naming file, line and key; exit 1; no socket left ---
# bad_config NAME TEXT PATTERN [serve options]: TEXT as the file must fail with a line
# matching PATTERN (with FILE replaced by the file's path). Also with the ASan+UBSan build
# beside this one when there is one (make check builds it): a leak on the way out is a
# report of more lines.
ASAN_UZRAM=$(dirname "$UZRAM")/asan/uzram
[[ -x $ASAN_UZRAM ]] || ASAN_UZRAM=
bad_config() {
    local name=$1 text=$2 pattern=$3 file=$WORK/bad-$1.conf rc bin
    shift 3
    printf '%b' "$text" >"$file"
    for bin in "$UZRAM" ${ASAN_UZRAM:+"$ASAN_UZRAM"}; do
        rc=0
        "$bin" serve --config "$file" "$@" >/dev/null 2>"$WORK/bad.err" || rc=$?
        [[ $rc -eq 1 ]] || fail "bad config $name ($bin): exit status $rc, not 1 ($(cat "$WORK/bad.err"))"
        [[ $(wc -l <"$WORK/bad.err") -eq 1 ]] || fail "bad config $name ($bin): not one line: $(cat "$WORK/bad.err")"
        grep -q "^uzram: ${pattern//FILE/$file}" "$WORK/bad.err" || fail "bad config $name: $(cat "$WORK/bad.err")"
        [[ -z $(ls -A "$XDG_RUNTIME_DIR/uzram" 2>/dev/null) ]] || fail "bad config $name left $(ls "$XDG_RUNTIME_DIR/uzram")"
    done
}
bad_config key '[d]\nsize = 1G\nsise = 4G\n' "FILE:3: unknown key 'sise' in \[d\]; the keys are: size, algorithm, .*threads"
bad_config size '[d]\n\nsize = 4X\n' "FILE:3: size '4X' is not a size; use a number with an optional K, M, G or T suffix"
bad_config unaligned '[d]\nsize = 1000\n' "FILE:2: size '1000' must be a non-zero multiple of 4K"
bad_config level '[d]\nalgorithm = zstd\nlevel = 99\n' "FILE:3: bad level '99' for zstd; use 1 to 22"
bad_config algorithm '[d]\nalgorithm = lz5\n' "FILE:2: unknown algorithm 'lz5'; choose one of: "
bad_config flag '[d]\ndedup = maybe\n' "FILE:2: bad dedup 'maybe'; use yes or no"
bad_config threads '[d]\nthreads = 0\n' "FILE:2: bad threads '0'; use a number from 1 to"
bad_config empty '[d]\nthreads =\n' "FILE:2: key 'threads' needs a value"
bad_config emptyflag '[d]\ndedup =\n' "FILE:2: key 'dedup' needs a value (yes or no)"
bad_config twice '[d]\nsize = 1G\nsize = 2G\n' "FILE:3: key 'size' again in \[d\] (first at line 2)"
bad_config section '[d]\n[d]\n' "FILE:2: section \[d\] again (first at line 1)"
bad_config outside 'size = 1G\n[d]\n' "FILE:1: key 'size' comes before any \[NAME\] section"
bad_config syntax '[d]\nquiet\n' "FILE:2: expected \[NAME\], KEY = VALUE or a # comment, not 'quiet'"
bad_config bracket '[d\n' "FILE:1: a section line is \[NAME\], not '\[d'"
bad_config name '[d]\nname = e\n' "FILE:2: 'name' is not a key: the section \[d\] names its device"
bad_config badname '[a b]\n' "FILE:1: bad section name \[a b\]"
bad_config typo-elsewhere '[d]\nsize = 1G\n[e]\ncompression = zstd\n' "FILE:4: unknown key 'compression' in \[e\]" --name d
bad_config missing '[d]\n' "FILE has no section \[e\]; add one" --name e
bad_config nodevice '[d]\n' "FILE has no section \[xyz\]; give the device a size: xyz:SIZE" --device xyz
bad_config several '[d]\n[e]\n' "FILE has 2 devices (\[d\], \[e\]); choose one with --name"
bad_config none '# nothing\n' "FILE has no section \[NAME\]"
bad_config nul 'x\0y\n' "FILE holds a NUL byte"
if "$UZRAM" serve --config "$WORK/nosuch.conf" 2>"$WORK/bad.err"; then fail "a missing file was served"; fi
grep -qx "uzram: cannot read $WORK/nosuch.conf: No such file or directory" "$WORK/bad.err" || fail "missing file: $(cat "$WORK/bad.err")"
pass "bad files: one line with file, line and key (or what is missing), exit 1, no socket"

# A bad value on the command line is still named as an option, not as the file's key.
printf '[d]\nsize = 1G\n' >"$WORK/ok.conf"
if "$UZRAM" serve --config "$WORK/ok.conf" -s 4X 2>"$WORK/bad.err"; then fail "-s 4X served"; fi
grep -q "^uzram: --size '4X' is not a size" "$WORK/bad.err" || fail "command-line value named: $(cat "$WORK/bad.err")"
pass "a bad command-line value beside a good file names the option"

# --- the keys are the options: --help, the file's list of keys and the man page agree ---
# (--device is the command line's; the file lists a server's devices with its own key,
# devices; nbdinfo --list is the example's.)
options=$("$UZRAM" serve --help | grep -o -- '--[a-z][a-z-]*' | sed 's/^--//' |
    grep -vx 'name\|config\|help\|device\|list' | sort -u)
printf '[d]\nnosuchkey = 1\n' >"$WORK/keys.conf"
"$UZRAM" serve --config "$WORK/keys.conf" 2>"$WORK/keys.err" && fail "nosuchkey accepted"
keys=$(sed -n 's/.*the keys are: //p' "$WORK/keys.err" | tr -d ' ' | tr ',' '\n' | grep -vx devices | sort)
[[ $options == "$keys" ]] || fail "config keys differ from serve's options: $(diff <(echo "$options") <(echo "$keys"))"
# The man page source: the .BR lines between "without their dashes:" and "(every option".
man_keys=$(sed -n '/without their dashes:$/,/^(every option/p' "$REPO/docs/uzram.1" |
    sed -n 's/^\.BR //p' | sed 's/\\-/-/g; s/", "/ /g; s/,//g' | tr ' ' '\n' | sed '/^$/d' | sort)
[[ $options == "$man_keys" ]] || fail "uzram.1 CONFIGURATION FILE lists other keys: $(diff <(echo "$options") <(echo "$man_keys"))"
pass "keys = serve's long options = the man page's list ($(echo $keys))"

echo "PASS: config.sh"
