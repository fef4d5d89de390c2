#!/bin/sh
# install-dirs.sh - the directories `make install` creates, so that `make uninstall` removes
# them again, and only them: a directory that was there before (/usr/local/bin) stays.
#
#   install-dirs.sh create MANIFEST DIR...  makes each DIR (and its parents), and adds the ones
#                                           it made to the list in MANIFEST (kept over installs)
#   install-dirs.sh remove MANIFEST         removes the listed directories that are empty,
#                                           deepest first, and MANIFEST itself
# Paths are given and listed without DESTDIR, which is put in front of each (environment).
set -eu
mode=$1 manifest=$2
shift 2
root=${DESTDIR:-}
case $mode in
create)
    made=$(mktemp)
    trap 'rm -f "$made"' EXIT
    for dir; do
        missing=
        path=$dir
        while [ -n "$path" ] && [ "$path" != / ] && [ ! -d "$root$path" ]; do
            missing="$path
$missing"
            path=$(dirname "$path")
        done
        printf '%s' "$missing" >>"$made"
        mkdir -p "$root$dir"
    done
    mkdir -p "$(dirname "$root$manifest")"
    [ -f "$root$manifest" ] && cat "$root$manifest" >>"$made"
    sort -u "$made" | sed '/^$/d' >"$root$manifest"
    chmod 644 "$root$manifest"
    ;;
remove)
    [ -f "$root$manifest" ] || exit 0
    list=$(sort -r "$root$manifest")
    rm -f "$root$manifest"
    # Reverse order puts every directory before its parent.
    printf '%s\n' "$list" | while IFS= read -r dir; do
        [ -n "$dir" ] && rmdir "$root$dir" 2>/dev/null || true
    done
    ;;
*)
    echo "usage: install-dirs.sh create|remove MANIFEST [DIR...]" >&2
    exit 2
    ;;
esac
