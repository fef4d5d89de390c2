#!/usr/bin/env bash
# deb.sh - integration test of the Debian packages (issue 28; `make deb-check`): uzram,
# libuzram0 and libuzram-dev built by `dpkg-buildpackage -us -uc -b` from the tree's own files
# (scripts/deb.sh), at the version of uzram.h; lintian finds nothing that debian/*.lintian-
# overrides does not list with its reason; installed into this machine with apt, each
# package's files are what dpkg -L says; /usr/bin/uzram --version, the units verify, the
# generator enables a unit that is there; README.md's library example builds with pkg-config
# against the installed -dev package, shared and static, and runs; apt-get purge leaves every
# path as it was before (the packages' files and directories, ld.so.cache).
# Needs root and dpkg-buildpackage, dh, lintian, apt-get: otherwise a visible SKIP. Leaves a
# machine that already has one of these packages installed alone (SKIP).
# Skips and fails as tests/integration/lib.bash says (exit 0/1/77).
set -euo pipefail

. "$(dirname "$0")/lib.bash"
[[ $(id -u) -eq 0 ]] || skip "installing packages with apt needs root"
need_tools dpkg-buildpackage dh lintian apt-get dpkg-deb pkg-config cc readelf
lib_init
REPO=$(cd "$(dirname "$0")/../.." && pwd)
PACKAGES=(uzram libuzram0 libuzram-dev)
for package in "${PACKAGES[@]}"; do
    if dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed"; then
        skip "$package is installed on this machine already; this test installs and removes it"
    fi
done
# One run at a time on a machine (make check in several trees).
exec 9>/run/lock/uzram-deb-test.lock
flock -w 300 9 || fail "another run holds /run/lock/uzram-deb-test.lock for 5 min"

# --- build, from the tree's files ---
VERSION=$(sed -n 's/^#define UZRAM_VERSION_\(MAJOR\|MINOR\|PATCH\) *\([0-9]*\)$/\2/p' "$REPO/include/uzram.h" | paste -sd.)
OUT=$WORK/deb
"$REPO/scripts/deb.sh" "$OUT" >"$WORK/deb.out" 2>&1 || fail "make deb: $(cat "$WORK/deb.out")"
ARCH=$(dpkg --print-architecture)
MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
for package in "${PACKAGES[@]}"; do
    [[ -f $OUT/${package}_${VERSION}_$ARCH.deb ]] || fail "no ${package}_${VERSION}_$ARCH.deb: $(ls "$OUT")"
done
[[ -z $(git -C "$REPO" status --porcelain --ignored debian 2>/dev/null | grep -v '^ M\|^M \|^A \|^??' || true) ]] ||
    fail "the build left files in the tree's debian/: $(git -C "$REPO" status --porcelain --ignored debian)"
pass "dpkg-buildpackage -us -uc -b: ${PACKAGES[*]} $VERSION ($ARCH)"

# --- lintian: nothing but what the overrides list, with their reasons ---
lintian --pedantic --display-info --display-experimental "$OUT/uzram_${VERSION}_$ARCH.changes" \
    >"$WORK/lintian.out" 2>&1 || true
grep -v '^running with root privileges' "$WORK/lintian.out" >"$WORK/lintian.tags" || true
[[ ! -s $WORK/lintian.tags ]] || fail "lintian: $(cat "$WORK/lintian.tags")"
overridden=$(cat "$REPO"/debian/*.lintian-overrides | grep -c '^[a-z0-9-]*: ')
pass "lintian --pedantic (info, experimental): no tag but the $overridden listed in debian/*.lintian-overrides"

# --- what the packages will put where: each path, and whether it is there now ---
for package in "${PACKAGES[@]}"; do
    dpkg-deb -c "$OUT/${package}_${VERSION}_$ARCH.deb" | awk '{print $6}' | sed 's|^\.||; s|/$||' | sed '/^$/d'
done | sort -u >"$WORK/paths"
# ... and what maintainer scripts could touch: /etc, systemd's unit and state directories,
# dpkg's records of the packages.
state() {
    while read -r path; do if [[ -e $path || -L $path ]]; then echo "there $path"; else echo "none $path"; fi; done <"$WORK/paths"
    find /etc /lib/systemd /usr/lib/systemd /var/lib/systemd -xdev 2>/dev/null | sort
    ls /var/lib/dpkg/info | grep -i uzram || true
}
state >"$WORK/before"
grep -q "^there /usr/bin/uzram$" "$WORK/before" && fail "/usr/bin/uzram exists though no package has it: not ours to replace"
ldconfig -p | grep libuzram >"$WORK/ldcache.before" || true

# --- install with apt ---
at_exit "apt-get purge -y -q ${PACKAGES[*]}"
APT=(apt-get -o DPkg::Lock::Timeout=300 -y -q --no-install-recommends)
"${APT[@]}" install "$OUT/uzram_${VERSION}_$ARCH.deb" "$OUT/libuzram0_${VERSION}_$ARCH.deb" \
    "$OUT/libuzram-dev_${VERSION}_$ARCH.deb" >"$WORK/install.out" 2>&1 || fail "apt-get install: $(tail -n 20 "$WORK/install.out")"
for package in "${PACKAGES[@]}"; do
    dpkg-deb -c "$OUT/${package}_${VERSION}_$ARCH.deb" | awk '{print $6}' | sed 's|^\.||; s|/$||' |
        sed '/^$/d' | sort >"$WORK/$package.deb-files"
    dpkg -L "$package" | sed '/^\/\.$/d' | sort >"$WORK/$package.dpkg-l"
    diff -u "$WORK/$package.deb-files" "$WORK/$package.dpkg-l" >"$WORK/diff" || fail "dpkg -L $package: $(cat "$WORK/diff")"
    while read -r path; do [[ -e $path || -L $path ]] || fail "$package: $path is not there"; done <"$WORK/$package.dpkg-l"
done
[[ $(/usr/bin/uzram --version) == "uzram $VERSION" ]] || fail "/usr/bin/uzram --version: $(/usr/bin/uzram --version)"
# Output taken whole before grep reads it: grep -q stops at the first match, and the writer
# killed by SIGPIPE then would fail the pipeline (pipefail).
ldcache=$(ldconfig -p)
grep -Eq "libuzram.so.0 .*=> (/usr)?/lib/$MULTIARCH/libuzram.so.0$" <<<"$ldcache" || fail "libuzram.so.0 is not in ld.so.cache"
pass "apt-get install: every file dpkg -L lists is there; /usr/bin/uzram --version says $VERSION"

# The units are well formed and name the installed program; the generator enables a unit
# that exists.
if command -v systemd-analyze >/dev/null; then
    for unit in uzram@test.service uzram@test.socket uzram-swap@test.service uzram-zram@zram0.service \
        uzram-zram-setup@zram0.service; do
        SYSTEMD_LOG_LEVEL=warning systemd-analyze verify --man=no "$unit" >"$WORK/verify.out" 2>&1 ||
            fail "systemd-analyze verify $unit: $(cat "$WORK/verify.out")"
        grep -v "Failed to prepare filename\|not loaded\|Unit is bound to inactive" "$WORK/verify.out" | grep . &&
            fail "systemd-analyze verify $unit: $(cat "$WORK/verify.out")"
    done
    pass "systemd-analyze verify: the five units as installed"
else
    skip_check "systemd-analyze verify of the installed units: systemd-analyze is not installed"
fi
mkdir -p "$WORK/root/etc/systemd" "$WORK/root/proc"
printf '[zram0]\nzram-size = 64\n' >"$WORK/root/etc/systemd/zram-generator.conf"
printf 'MemTotal:        8013220 kB\n' >"$WORK/root/proc/meminfo"
ZRAM_GENERATOR_ROOT=$WORK/root /lib/systemd/system-generators/uzram-zram-generator "$WORK/gen" "$WORK/gen" "$WORK/gen" ||
    fail "the installed generator failed"
unit=$WORK/gen/multi-user.target.wants/uzram-zram-setup@zram0.service
[[ -L $unit && -f $(readlink "$unit") ]] || fail "the generator's unit: $(ls -l "$WORK/gen"/*/ 2>&1)"
pass "the installed generator enables uzram-zram-setup@zram0 -> $(readlink "$unit")"

# --- README.md's library example against the installed -dev package ---
awk '/^```c$/ {on = 1; next} /^```$/ {if (on) exit} on' "$REPO/README.md" >"$WORK/hello.c"
grep -q 'int main' "$WORK/hello.c" || fail "no C example in README.md"
cd "$WORK"
# shellcheck disable=SC2046 # pkg-config's words are meant to split
cc -Wall -Werror -o hello hello.c $(pkg-config --cflags --libs uzram) || fail "README example does not build"
loads=$(ldd ./hello)
grep -Eq "libuzram.so.0 => (/usr)?/lib/$MULTIARCH/libuzram.so.0 " <<<"$loads" || fail "hello does not load the installed library: $loads"
./hello >hello.out || fail "README example failed: $(cat hello.out)"
grep -qx "libuzram $VERSION: 65536 bytes stored in [0-9]*, read back equal" hello.out || fail "README example said: $(cat hello.out)"
static_libs=$(pkg-config --static --libs uzram)
# shellcheck disable=SC2086
cc -Wall -Werror -o hello-static hello.c $(pkg-config --cflags uzram) ${static_libs/-luzram/-l:libuzram.a} ||
    fail "README example does not build static"
needed=$(readelf -d hello-static)
if grep -q 'NEEDED.*libuzram' <<<"$needed"; then fail "the static build needs libuzram.so"; fi
./hello-static | cmp -s - hello.out || fail "the static build's output differs"
cd "$REPO"
pass "README example with pkg-config against libuzram-dev: $(cat "$WORK/hello.out"); static too"

# --- remove: every path as it was before ---
"${APT[@]}" purge "${PACKAGES[@]}" >"$WORK/purge.out" 2>&1 || fail "apt-get purge: $(tail -n 20 "$WORK/purge.out")"
for package in "${PACKAGES[@]}"; do
    if dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "installed"; then fail "$package is still installed"; fi
done
state >"$WORK/after"
diff -u "$WORK/before" "$WORK/after" >"$WORK/diff" || fail "apt-get purge left the machine changed: $(cat "$WORK/diff")"
ldconfig -p | grep libuzram >"$WORK/ldcache.after" || true
diff -u "$WORK/ldcache.before" "$WORK/ldcache.after" >"$WORK/diff" || fail "ld.so.cache after purge: $(cat "$WORK/diff")"
pass "apt-get purge: the $(wc -l <"$WORK/paths") paths of the packages, /etc, systemd's directories, dpkg's records and ld.so.cache as before"

echo "PASS: deb.sh"
