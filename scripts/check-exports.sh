#!/bin/bash
# check-exports.sh - the shared library exports exactly the functions uzram.h marks UZRAM_API:
# only uzram_* names, none of the engine's insides or test hooks, none missing; its soname; and
# a program linked against it alone (tests/shared_smoke.c) runs.
# Usage: check-exports.sh [LIBRARY] (default build/libuzram.so). Exit 0 or 1.
set -uo pipefail
cd "$(dirname "$0")/.."
lib=${1:-build/libuzram.so}
[[ -e $lib ]] || { echo "check-exports: no $lib (make lib builds it)"; exit 1; }

exported=$(nm -D --defined-only "$lib" | awk '{print $NF}' | sort)
# Function declarations of the stable part (before the static-linking-only part): lines
# that start with a type and name a uzram_ function. Each must be marked UZRAM_API.
stable=$(sed '/^#endif \/\* UZRAM_H \*\//q' include/uzram.h |
    grep -E '^[A-Za-z_].*[ *]uzram_[a-z0-9_]*\(' | grep -v '^#')
declared=$(grep -o 'uzram_[a-z0-9_]*(' <<<"$stable" | tr -d '(' | sort -u)
major=$(sed -n 's/^#define UZRAM_VERSION_MAJOR *\([0-9][0-9]*\)$/\1/p' include/uzram.h)
soname=$(objdump -p "$lib" | awk '$1 == "SONAME" {print $2}')
status=0

unmarked=$(grep -v '^UZRAM_API ' <<<"$stable")
if [[ -n $unmarked ]]; then
    echo "check-exports: public declarations in uzram.h without UZRAM_API:"
    sed 's/^/    /' <<<"$unmarked"
    status=1
fi

others=$(grep -v '^uzram_' <<<"$exported")
if [[ -n $others ]]; then
    echo "check-exports: $lib exports $(wc -l <<<"$others") names without the uzram_ prefix:"
    sed 's/^/    /' <<<"$others"
    status=1
fi
extra=$(comm -23 <(echo "$exported") <(echo "$declared") | grep '^uzram_')
if [[ -n $extra ]]; then
    echo "check-exports: exported but not declared UZRAM_API in uzram.h:"
    sed 's/^/    /' <<<"$extra"
    status=1
fi
missing=$(comm -13 <(echo "$exported") <(echo "$declared"))
if [[ -n $missing ]]; then
    echo "check-exports: declared UZRAM_API in uzram.h but not exported:"
    sed 's/^/    /' <<<"$missing"
    status=1
fi
if [[ $soname != "libuzram.so.$major" ]]; then
    echo "check-exports: soname is '$soname', not libuzram.so.$major"
    status=1
fi
dir=$(dirname "$lib")
smoke=$dir/shared_smoke
if ! ${CC:-gcc} -std=gnu11 -Wall -Wextra -Werror -Iinclude tests/shared_smoke.c -L"$dir" -luzram \
    -o "$smoke" || ! LD_LIBRARY_PATH=$dir "$smoke" >"$smoke.out" 2>&1; then
    echo "check-exports: a program linked against $lib alone does not build or run:"
    sed 's/^/    /' "$smoke.out" 2>/dev/null
    status=1
# ldd's output is taken whole first: with pipefail, grep -q leaving early can kill ldd (a
# shell script) with SIGPIPE and fail the pipeline although the line was found.
elif ! grep -q "$soname => $dir/" <<<"$(LD_LIBRARY_PATH=$dir ldd "$smoke")"; then
    echo "check-exports: $smoke does not load $soname from $dir:"
    LD_LIBRARY_PATH=$dir ldd "$smoke" | sed 's/^/    /'
    status=1
fi
if [[ $status -eq 0 ]]; then
    echo "check-exports: $lib ($soname) exports $(wc -l <<<"$exported") symbols," \
        "all uzram_*, exactly the UZRAM_API functions of uzram.h; a program linked against it runs"
fi
exit $status
