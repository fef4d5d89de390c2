#!/usr/bin/env bash
# store.sh - the backing store keeps what users own and what they wrote (issue 23): serve
# --backing-file, hot-add's backing-file key and the backing_dev attribute refuse a file that
# holds data (unless --overwrite-backing-file says so), another user's file, a file others may
# read, a symbolic link in a directory anybody may write, a mounted block device, each with one
# line saying why; new files are made 0600 by O_EXCL; and bytes changed on the store are
# answered with EIO, counted in bd_checksum_errors and said once in the log, never returned.
# Each check failed against the code before issue 23.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

need_python_nbd
need_tools nbdcopy
lib_init

sha() { sha256sum <"$1" | cut -d' ' -f1; }
json() { stat_json_field "$1" "$2"; }

# serve_refused WHAT PATTERN [serve options...]: the server must exit 1 with PATTERN in its line
serve_refused() {
    local what=$1 pattern=$2 out
    shift 2
    # Bounded: a server that starts instead of refusing is stopped after 5 s.
    if out=$(timeout 5 "$UZRAM" serve -n refused -s 16M "$@" 2>&1) || [[ $? -eq 124 ]]; then
        fail "$what: the server started"
    fi
    grep -q -- "$pattern" <<<"$out" || fail "$what: the server said: $out"
    [[ $(wc -l <<<"$out") -eq 1 ]] || fail "$what: more than one line: $out"
    echo "$out"
}

# --- a file that holds data is never emptied unasked ---
DATAFILE=$WORK/mistyped
head -c $MiB /dev/urandom >"$DATAFILE"
chmod 600 "$DATAFILE"
want=$(sha "$DATAFILE")
said=$(serve_refused "a file with data" "cannot use --backing-file '$DATAFILE' to write back to: it holds 1048576 bytes of data, which the store would destroy; give a new or empty file, or add --overwrite-backing-file" \
    --backing-file "$DATAFILE")
[[ $(sha "$DATAFILE") == "$want" ]] || fail "the refused file changed"
serve_refused "--overwrite-backing-file alone" "--overwrite-backing-file needs --backing-file" \
    --overwrite-backing-file >/dev/null
start_server ow -s 16M --backing-file "$DATAFILE" --overwrite-backing-file
[[ $(stat -c %s "$DATAFILE") -eq $((32 * MiB)) ]] || fail "the overwritten file was not sized"
stop_server ow
[[ $(stat -c %s "$DATAFILE") -eq 0 ]] || fail "the store did not empty its file at the end"
start_server again -s 16M --backing-file "$DATAFILE"
stop_server again
pass "a 1 MiB file with data is refused and left alone ($said); --overwrite-backing-file takes it; an ended store leaves an empty file the next server takes"

# --- new files: O_EXCL, 0600, ours; even in a directory anybody writes ---
SHARED=$WORK/shared
mkdir -m 1777 "$SHARED"
start_server new -s 16M --backing-file "$SHARED/new"
[[ $(stat -c '%a %u' "$SHARED/new") == "600 $(id -u)" ]] || fail "new store: $(stat -c '%a %u' "$SHARED/new")"
stop_server new
rm -f "$SHARED/new"
head -c 0 >"$WORK/loose" && chmod 644 "$WORK/loose"
serve_refused "a 0644 file" "its mode 0644 lets other users in, and the store holds the device's data: chmod 600" \
    --backing-file "$WORK/loose" >/dev/null
pass "a new store file is made 0600 by this user in a 1777 directory; a 0644 one is refused"

# --- what another user made: not followed, not used ---
if [[ $(id -u) -eq 0 ]] && command -v setpriv >/dev/null; then
    as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
    chmod 711 "$WORK"
    TARGET=$WORK/precious
    head -c $((64 * 1024)) /dev/urandom >"$TARGET"
    chmod 600 "$TARGET"
    want=$(sha "$TARGET")
    as_nobody ln -s "$TARGET" "$SHARED/store" || fail "nobody could not make a link in $SHARED"
    said=$(serve_refused "nobody's symbolic link" "it is a symbolic link in a directory other users can write" \
        --backing-file "$SHARED/store" --overwrite-backing-file)
    [[ $(sha "$TARGET") == "$want" ]] || fail "the link's target changed"
    as_nobody sh -c "umask 0; : >'$SHARED/planted'" || fail "nobody could not make a file in $SHARED"
    [[ $(stat -c %a "$SHARED/planted") == 666 ]] || fail "the planted file is not 0666"
    said2=$(serve_refused "nobody's 0666 file" "it belongs to user nobody, not root: the store must be the server's own file" \
        --backing-file "$SHARED/planted")
    [[ $(stat -c %s "$SHARED/planted") -eq 0 ]] || fail "nobody's file was written to"
    pass "nobody's link in a 1777 directory ($said) and nobody's 0666 file ($said2) are refused; the target is intact"
else
    skip_check "files of another user: needs root and setpriv"
fi

# --- a mounted block device ---
if [[ $(id -u) -eq 0 ]] && command -v losetup >/dev/null && command -v mkfs.ext4 >/dev/null; then
    truncate -s 32M "$WORK/fs.img"
    mkfs.ext4 -q -F "$WORK/fs.img"
    if LOOP=$(losetup --find --show "$WORK/fs.img" 2>/dev/null); then
        at_exit "losetup -d $LOOP"
        mkdir "$WORK/mnt"
        if mount "$LOOP" "$WORK/mnt" 2>/dev/null; then
            at_exit "umount '$WORK/mnt'"
            said=$(serve_refused "a mounted block device" "$LOOP is mounted on $WORK/mnt; unmount it first" \
                --backing-file "$LOOP")
            pass "a mounted block device is refused: $said"
        else
            skip_check "mounted block device: cannot mount ext4 here"
        fi
    else
        skip_check "mounted block device: losetup could not attach one"
    fi
else
    skip_check "mounted block device: needs root, losetup and mkfs.ext4"
fi

# --- the same rules for hot-add's key and the backing_dev attribute ---
start_server hot -s 16M
cd "$WORK"
if "$UZRAM" hot-add rel 16M --backing-file rel.store 2>"$WORK/rel.err"; then
    fail "hot-add took a relative backing file"
fi
grep -q "a relative path would be taken from the server's working directory" "$WORK/rel.err" ||
    fail "hot-add, relative: $(cat "$WORK/rel.err")"
head -c $MiB /dev/urandom >"$DATAFILE"
want=$(sha "$DATAFILE")
if "$UZRAM" hot-add data 16M --backing-file "$DATAFILE" 2>"$WORK/hot.err"; then
    fail "hot-add emptied a file with data"
fi
grep -q "it holds 1048576 bytes of data" "$WORK/hot.err" || fail "hot-add, data: $(cat "$WORK/hot.err")"
[[ $(sha "$DATAFILE") == "$want" ]] || fail "hot-add changed the file"
if "$UZRAM" attr hot backing_dev "$DATAFILE" 2>"$WORK/attr.err"; then fail "backing_dev emptied a file with data"; fi
grep -q "cannot use $DATAFILE as backing_dev: it holds 1048576 bytes of data, which the store would destroy; give a new or empty file (truncate -s 0 it first if it is scratch space)" \
    "$WORK/attr.err" || fail "backing_dev, data: $(cat "$WORK/attr.err")"
[[ $(sha "$DATAFILE") == "$want" ]] || fail "backing_dev changed the file"
if "$UZRAM" attr hot backing_dev "$WORK/loose" 2>"$WORK/attr.err"; then fail "backing_dev took a 0644 file"; fi
grep -q "chmod 600" "$WORK/attr.err" || fail "backing_dev, 0644: $(cat "$WORK/attr.err")"
"$UZRAM" hot-add data 16M --backing-file "$DATAFILE" --overwrite-backing-file >/dev/null ||
    fail "hot-add with overwrite-backing-file=yes"
"$UZRAM" attr hot backing_dev "$WORK/fresh" || fail "backing_dev with a new file"
cd - >/dev/null
stop_server hot
pass "hot-add refuses a relative path and a file with data, backing_dev a file with data or 0644, each saying why; overwrite-backing-file=yes and a new file are taken"

# --- the store changed under the server: EIO, counted, said once, never other bytes ---
STORE=$WORK/checked
start_server sum -s 32M --backing-file "$STORE"
head -c $((16 * MiB)) /dev/urandom >"$WORK/data.img"
nbdcopy "$WORK/data.img" "$(uri_of sum)" || fail "nbdcopy into the device"
"$UZRAM" attr sum writeback page_indexes=0-8191 || fail "writeback"
[[ $(json sum bd_objects) -ge 4096 ]] || fail "not everything went to the store: $(json sum bd_objects)"
$PY - "$STORE" <<'EOF'
import random, sys
with open(sys.argv[1], "r+b") as f:
    rng = random.Random(23)
    for _ in range(64):
        at = rng.randrange(16 << 20)
        f.seek(at)
        byte = f.read(1)[0] ^ (1 << rng.randrange(8))
        f.seek(at)
        f.write(bytes([byte]))
EOF
$PY - "$(uri_of sum)" "$WORK/data.img" >"$WORK/reads.out" <<'EOF' || fail "reads after the flips: $(cat "$WORK/reads.out")"
import sys
import nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
data = open(sys.argv[2], "rb").read()
failed = 0
for page in range(len(data) // 4096):
    try:
        got = h.pread(4096, page * 4096)
    except nbd.Error as e:
        assert e.errno in ("EIO", 5), e
        failed += 1
        continue
    if got != data[page * 4096:(page + 1) * 4096]:
        sys.exit("page %d came back with other bytes than were written, and no error" % page)
print(failed)
EOF
failed=$(cat "$WORK/reads.out")
[[ $failed -gt 0 ]] || fail "no read failed after 64 bit flips"
[[ $(json sum bd_checksum_errors) -eq $failed ]] || fail "bd_checksum_errors $(json sum bd_checksum_errors), $failed reads failed"
nbdcopy "$(uri_of sum)" "$WORK/again.img" 2>/dev/null && fail "nbdcopy read the changed store without an error"
sleep 1.5 # the log speaks once a second
said=$(grep -c "backing store $STORE: holds other bytes than were written" "$WORK/server-sum.err" || true)
[[ $said -eq 1 ]] || fail "the changed store was said $said times in the log"
stop_server sum
pass "64 bit flips in the store: $failed pages answered EIO (bd_checksum_errors $failed), none with other bytes, said once in the log"

echo "PASS: store.sh"
