#!/bin/bash
# deb.sh OUT - what `make deb` does: the Debian packages of this tree (debian/), built with
# `dpkg-buildpackage -us -uc -b` from a copy of the tree in OUT/uzram-VERSION, so that neither
# the tree nor its parent directory gets the build's files; the .deb files, .changes and the
# build's log (OUT/build.log) land in OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: deb.sh OUT}
version=$(sed -n 's/^#define UZRAM_VERSION_\(MAJOR\|MINOR\|PATCH\) *\([0-9]*\)$/\2/p' include/uzram.h | paste -sd.)
changelog=$(sed -n '1s/^uzram (\([^)]*\)).*/\1/p' debian/changelog)
if [[ $changelog != "$version" ]]; then
    echo "deb.sh: debian/changelog says $changelog, include/uzram.h $version: add a changelog entry (dch -v $version)" >&2
    exit 1
fi
rm -rf "$out"
mkdir -p "$out/uzram-$version"
# The tree's files (tracked, and new ones git does not ignore), without any build output.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard | grep -zv '^build/\|^debian/build/' |
        tar --null -cf - -T - | tar -xf - -C "$out/uzram-$version"
else
    tar --exclude=./build --exclude=./debian/build -cf - . | tar -xf - -C "$out/uzram-$version"
fi
cd "$out/uzram-$version"
if ! dpkg-buildpackage -us -uc -b -j2 >"../build.log" 2>&1; then
    echo "deb.sh: dpkg-buildpackage failed; the last lines of $out/build.log:" >&2
    tail -n 30 ../build.log >&2
    exit 1
fi
ls ../*.deb
