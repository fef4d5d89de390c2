#!/bin/bash
# check-layers.sh - the files of a folder (default lib/) in layers by what they include, and
# whether any of them include each other in a circle. A file's room is its name without
# .c, .h or _internal.h (store.c, store.h and store_internal.h are one room); a room stands
# one layer above the highest room it includes ("x.h" of the same folder, or a path below
# it). The compiler refuses a call to an undeclared function and lib/ declares each file's
# functions in that file's own header (or uzram.h), so a room that calls another includes its
# header, or one that includes it: a circle of calls is a circle here too.
#
# Usage: check-layers.sh [DIR]
# Prints "LAYER ROOM" lines, highest first; exit status 1, naming the circle, if there is one.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=${1:-lib}
dir=${dir%/}

room_of() { # path below $dir -> room
    local name=${1%.[ch]}
    echo "${name%_internal}"
}

declare -A uses=() layer=() state=()
while IFS= read -r -d '' file; do
    path=${file#"$dir"/}
    room=$(room_of "$path")
    uses[$room]+=""
    base=$(dirname "$path")
    while IFS= read -r included; do
        if [[ -f $dir/$base/$included ]]; then
            target=$(room_of "${base#.}/$included")
            target=${target#/}
        elif [[ -f $dir/$included ]]; then
            target=$(room_of "$included")
        else
            continue # a system header, or one outside the folder (include/uzram.h)
        fi
        [[ $target == "$room" ]] || uses[$room]+=" $target"
    done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$file")
done < <(find "$dir" -name '*.[ch]' -print0 | sort -z)

# Depth-first: a room's layer is one above the highest of the rooms it uses; meeting a room
# still being visited closes a circle, which the stack names.
stack=()
visit() { # room
    local room=$1 target highest=0
    case ${state[$room]:-} in
    done) return 0 ;;
    open)
        local circle="" i
        for ((i = ${#stack[@]} - 1; i >= 0; i--)); do
            circle="${stack[i]} -> $circle"
            [[ ${stack[i]} == "$room" ]] && break
        done
        echo "check-layers: $dir has a circle: ${circle}$room" >&2
        return 1
        ;;
    esac
    state[$room]=open
    stack+=("$room")
    for target in ${uses[$room]}; do
        visit "$target" || return 1
        ((layer[$target] > highest)) && highest=${layer[$target]}
    done
    unset 'stack[${#stack[@]}-1]'
    state[$room]=done
    layer[$room]=$((highest + 1))
}

for room in "${!uses[@]}"; do
    visit "$room" || exit 1
done
for room in "${!layer[@]}"; do
    echo "${layer[$room]} $room"
done | sort -k1,1nr -k2,2
