#!/usr/bin/env bash
# install.sh - integration test: `make install DESTDIR=...` puts exactly the documented files
# in place (checked file by file: mode, link target, soname, contents that name the install
# directories); README.md's library example builds against the installed tree with pkg-config,
# shared and static, and runs; `make uninstall` takes every file away again.
# Skips and fails as tests/integration/lib.bash says (exit 0/1/77).
set -euo pipefail

. "$(dirname "$0")/lib.bash"
need_tools make pkg-config cc objdump readelf
lib_init

REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(dirname "$UZRAM")
DEST=$WORK/dest
VERSION=$(sed -n 's/^#define UZRAM_VERSION_\(MAJOR\|MINOR\|PATCH\) *\([0-9]*\)$/\2/p' \
    "$REPO/include/uzram.h" | paste -sd.)
MAJOR=${VERSION%%.*}

# The build folder the test was given (build/ under `make check`) is the one installed.
run_make() { make -s -C "$REPO" O="$BUILD" "$@" >"$WORK/make.log" 2>&1 || fail "make $*: $(tail -n 20 "$WORK/make.log")"; }

# listing DIR: every file and link under DIR as "MODE PATH [-> TARGET]", sorted.
listing() {
    (cd "$1" && find . ! -type d | sort | while read -r f; do
        if [[ -L $f ]]; then echo "link ${f#.} -> $(readlink "$f")"; else echo "$(stat -c %a "$f") ${f#.}"; fi
    done)
}

# --- make install DESTDIR=... with the default PREFIX (/usr/local) ---
run_make install DESTDIR="$DEST"
P=/usr/local
cat >"$WORK/want" <<EOF
755 $P/bin/uzram
644 $P/include/uzram.h
644 $P/include/uzram_stats.h
644 $P/lib/libuzram.a
link $P/lib/libuzram.so -> libuzram.so.$MAJOR
link $P/lib/libuzram.so.$MAJOR -> libuzram.so.$VERSION
755 $P/lib/libuzram.so.$VERSION
644 $P/lib/pkgconfig/uzram.pc
755 $P/lib/systemd/system-generators/uzram-zram-generator
644 $P/lib/systemd/system/uzram-swap@.service
644 $P/lib/systemd/system/uzram-zram-setup@.service
644 $P/lib/systemd/system/uzram-zram@.service
644 $P/lib/systemd/system/uzram@.service
644 $P/lib/systemd/system/uzram@.socket
644 $P/share/doc/uzram/installed-directories
644 $P/share/doc/uzram/uzram.conf.example
644 $P/share/man/man1/uzram.1
EOF
listing "$DEST" >"$WORK/got"
diff -u "$WORK/want" "$WORK/got" >"$WORK/diff" || fail "installed files differ from the list: $(cat "$WORK/diff")"
pass "make install DESTDIR: the $(wc -l <"$WORK/want") files, modes and links"

soname=$(objdump -p "$DEST$P/lib/libuzram.so.$VERSION" | awk '$1 == "SONAME" {print $2}')
[[ $soname == "libuzram.so.$MAJOR" ]] || fail "installed library's soname is '$soname'"
for h in uzram.h uzram_stats.h; do
    cmp -s "$REPO/include/$h" "$DEST$P/include/$h" || fail "installed $h differs"
done
cmp -s "$REPO/docs/uzram.1" "$DEST$P/share/man/man1/uzram.1" || fail "installed man page differs"
grep -qx "uzram $VERSION" <<<"$("$DEST$P/bin/uzram" --version)" || fail "installed uzram --version"
grep -qx "ExecStart=$P/bin/uzram serve --config /etc/uzram/uzram.conf --name %i" \
    "$DEST$P/lib/systemd/system/uzram@.service" || fail "uzram@.service ExecStart: $(grep Exec "$DEST$P/lib/systemd/system/uzram@.service")"
grep -qx 'Type=notify' "$DEST$P/lib/systemd/system/uzram@.service" || fail "uzram@.service is not Type=notify"
# uzram's one swap setup (mkswap, swapon --discard: how the device hears of freed slots)
grep -qx "ExecStart=$P/bin/uzram attach --swap --swapon %i" "$DEST$P/lib/systemd/system/uzram-swap@.service" ||
    fail "uzram-swap@.service ExecStart: $(grep ExecStart "$DEST$P/lib/systemd/system/uzram-swap@.service")"
grep -qx 'ListenStream=%t/uzram/%i.sock' "$DEST$P/lib/systemd/system/uzram@.socket" || fail "uzram@.socket ListenStream"
grep -qx "exec $P/bin/uzram zram-generator --generate --unit-dir $P/lib/systemd/system \"\$@\"" \
    "$DEST$P/lib/systemd/system-generators/uzram-zram-generator" || fail "the generator's command: $(tail -n 1 "$DEST$P/lib/systemd/system-generators/uzram-zram-generator")"
if grep -n '@[a-zA-Z_]*@' "$DEST$P/lib/pkgconfig/uzram.pc" "$DEST$P"/lib/systemd/system/* "$DEST$P"/lib/systemd/system-generators/*; then
    fail "a template placeholder was left in an installed file"
fi
pass "soname $soname, header, man page, program, units name $P/bin and /etc (whatever PREFIX)"

# --- pkg-config finds the installed tree (--define-prefix: it sits in DESTDIR) ---
export PKG_CONFIG_PATH=$DEST$P/lib/pkgconfig
pc() { pkg-config --define-prefix "$@" uzram; }
[[ $(pc --modversion) == "$VERSION" ]] || fail "pkg-config --modversion: $(pc --modversion)"
[[ $(pkg-config --variable=prefix uzram) == "$P" ]] || fail "uzram.pc prefix: $(pkg-config --variable=prefix uzram)"
grep -q -- "-L$DEST$P/lib -luzram" <<<"$(pc --libs)" || fail "pkg-config --libs: $(pc --libs)"
grep -q -- "-I$DEST$P/include" <<<"$(pc --cflags)" || fail "pkg-config --cflags: $(pc --cflags)"
for private in $(sed -n 's/^LIB_PKGS := //p' "$REPO/Makefile") -pthread -lm; do
    grep -q -- "${private#lib}" <<<"$(pc --static --libs)" || fail "pkg-config --static --libs lacks $private: $(pc --static --libs)"
done
pass "pkg-config: version, prefix, cflags, libs; --static adds the codecs, -pthread, -lm"

# --- README.md's library example, as printed there, against the installed tree ---
awk '/^```c$/ {on = 1; next} /^```$/ {if (on) exit} on' "$REPO/README.md" >"$WORK/hello.c"
grep -q 'int main' "$WORK/hello.c" || fail "no complete C example in README.md: $(head -5 "$WORK/hello.c")"
cd "$WORK"
# A sanitizer build's library needs its runtime first: the program is built the same way.
san=()
grep -q 'NEEDED.*libasan' <<<"$(readelf -d "$DEST$P/lib/libuzram.so.$VERSION")" && san=(-fsanitize=address,undefined)
# shellcheck disable=SC2046 # pkg-config's words are meant to split
cc -Wall -Werror "${san[@]}" -o hello-shared hello.c $(pc --cflags --libs) || fail "README example does not build shared"
grep -q "NEEDED.*\[libuzram.so.$MAJOR\]" <<<"$(readelf -d hello-shared)" || fail "shared build does not need libuzram.so.$MAJOR"
LD_LIBRARY_PATH=$DEST$P/lib ./hello-shared >hello.out || fail "shared build failed: $(cat hello.out)"
LD_LIBRARY_PATH=$DEST$P/lib ldd ./hello-shared >ldd.out
grep -q "libuzram.so.$MAJOR => $DEST$P/lib/libuzram.so.$MAJOR" ldd.out ||
    fail "the shared build did not load the installed library: $(cat ldd.out)"
grep -qx "libuzram $VERSION: 65536 bytes stored in [0-9]*, read back equal" hello.out || fail "shared output: $(cat hello.out)"
stored=$(sed -n 's/.* stored in \([0-9]*\),.*/\1/p' hello.out)
[[ $stored -gt 0 && $stored -lt 65536 ]] || fail "the example's data did not compress: $(cat hello.out)"
pass "README example built with pkg-config against libuzram.so.$MAJOR: $(cat hello.out)"

static_libs=$(pc --static --libs)
static_libs=${static_libs/-luzram/-l:libuzram.a}
# shellcheck disable=SC2086
cc -Wall -Werror "${san[@]}" -o hello-static hello.c $(pc --cflags) $static_libs || fail "README example does not build static"
if grep -q 'NEEDED.*libuzram' <<<"$(readelf -d hello-static)"; then fail "the static build needs libuzram.so"; fi
./hello-static >hello-static.out || fail "static build failed: $(cat hello-static.out)"
cmp -s hello.out hello-static.out || fail "static output differs: $(cat hello-static.out)"
pass "README example built with pkg-config --static against libuzram.a"
cd "$REPO"

# --- make uninstall removes every file and directory install put there, and only those ---
run_make uninstall DESTDIR="$DEST"
left=$(find "$DEST" -mindepth 1)
[[ -z $left ]] || fail "make uninstall left: $left"
# A directory that was there before install (and a file in it) stays.
mkdir -p "$DEST$P/bin" "$DEST$P/share/man"
touch "$DEST$P/bin/mine"
run_make install DESTDIR="$DEST"
run_make install DESTDIR="$DEST" # again: the list of what install made is kept
run_make uninstall DESTDIR="$DEST"
left=$(cd "$DEST" && find . -mindepth 1 | sort | paste -sd' ')
[[ $left == "./usr ./usr/local ./usr/local/bin ./usr/local/bin/mine ./usr/local/share ./usr/local/share/man" ]] ||
    fail "make uninstall after two installs over existing directories left: $left"
rm -rf "${DEST:?}"/*
pass "make uninstall removes every file and each directory install made, none that was there"

# --- a distribution's layout: PREFIX=/usr, a multiarch libdir, /etc for the configuration ---
run_make install DESTDIR="$DEST" PREFIX=/usr libdir=/usr/lib/multiarch
[[ -e $DEST/usr/lib/multiarch/libuzram.so.$VERSION && -e $DEST/usr/lib/multiarch/pkgconfig/uzram.pc ]] ||
    fail "libdir= was not followed: $(listing "$DEST")"
grep -qx "ExecStart=/usr/bin/uzram serve --config /etc/uzram/uzram.conf --name %i" \
    "$DEST/usr/lib/systemd/system/uzram@.service" || fail "PREFIX=/usr unit: $(grep Exec "$DEST/usr/lib/systemd/system/uzram@.service")"
grep -qx 'libdir=${prefix}/lib/multiarch' "$DEST/usr/lib/multiarch/pkgconfig/uzram.pc" ||
    fail "uzram.pc libdir: $(grep libdir= "$DEST/usr/lib/multiarch/pkgconfig/uzram.pc")"
run_make uninstall DESTDIR="$DEST" PREFIX=/usr libdir=/usr/lib/multiarch
left=$(find "$DEST" ! -type d)
[[ -z $left ]] || fail "make uninstall PREFIX=/usr left: $left"
pass "PREFIX=/usr libdir=...: /usr/bin, /etc/uzram, \${prefix}-relative libdir; uninstalled"

# --- the machine itself, as a new user does it: sudo make install, then make uninstall ---
# ldconfig puts the library in ld.so.cache and takes it out again; nothing install made is
# left in /usr/local. Only where nobody's uzram is installed there, one test at a time.
if [[ $(id -u) -ne 0 ]]; then
    skip_check "make install into /usr/local (ld.so.cache, directories left): needs root"
elif compgen -G "/usr/local/lib/libuzram*" >/dev/null || [[ -e /usr/local/bin/uzram ]]; then
    skip_check "make install into /usr/local: a uzram is installed there already, left alone"
elif ! grep -rqsx /usr/local/lib /etc/ld.so.conf /etc/ld.so.conf.d; then
    skip_check "make install into /usr/local: /usr/local/lib is not in ld.so.conf here"
else
    exec 9>/run/lock/uzram-install-test.lock
    flock -w 120 9 || fail "another test holds /run/lock/uzram-install-test.lock for 2 min"
    find /usr/local -xdev | sort >"$WORK/before"
    at_exit "make -s -C '$REPO' O='$BUILD' uninstall"
    run_make install
    # ld.so.cache taken whole first: grep -q stops at the first match, and ldconfig killed by
    # SIGPIPE then would fail the pipeline (pipefail).
    ldcache=$(ldconfig -p)
    grep -q "libuzram.so.$MAJOR .*=> /usr/local/lib/libuzram.so.$MAJOR" <<<"$ldcache" ||
        fail "make install did not put libuzram.so.$MAJOR in ld.so.cache: $(ldconfig -p | grep uzram)"
    run_make uninstall
    ldcache=$(ldconfig -p)
    if grep -q "/usr/local/lib/libuzram" <<<"$ldcache"; then
        fail "make uninstall left ld.so.cache naming /usr/local/lib/libuzram: $(ldconfig -p | grep uzram)"
    fi
    find /usr/local -xdev | sort >"$WORK/after"
    diff -u "$WORK/before" "$WORK/after" >"$WORK/diff" || fail "make install + uninstall changed /usr/local: $(cat "$WORK/diff")"
    flock -u 9
    pass "sudo make install: libuzram in ld.so.cache; make uninstall: out of it, /usr/local as before"
fi

echo "PASS: install.sh"
