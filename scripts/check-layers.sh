#!/bin/bash
# check-layers.sh - the files of a folder (default lib/) in layers by what they include, and
# whether any of them include each other in a circle; then the same for its subfolders. A
# file's room is its name without .c, .h or _internal.h (store.c, store.h and
# store_internal.h are one room); a room stands one layer above the highest room it includes
# ("x.h" of the same folder, or a path below it). The compiler refuses a call to an
# undeclared function and lib/ declares each file's functions in that file's own header (or
# uzram.h), so a room that calls another includes its header, or one that includes it: a
# circle of calls is a circle here too. A call through a table of function pointers is no
# include, and not seen: docs/ARCHITECTURE.md names each such call upwards.
#
# Subfolders that say in a README.md what they own (lib/pool/README.md): once one of DIR's
# subfolders has one, each must, with an "Includes:" line naming the folders its files may
# include ("none" for none; words in brackets are comments), which is checked; and a folder stands above every folder one of
# its rooms includes, in layers too, with no circle. (src/'s folders have no README yet: its
# nbd/ and attach/ include each other.)
#
# Usage: check-layers.sh [DIR]
# Prints "LAYER ROOM" lines, highest first, then "folders:" and "LAYER FOLDER" lines, then
# "check-layers: DIR: N file layers, M folder layers, no circle"; exit status 1, naming the
# circle or the folder that includes what its README does not say, if there is one.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=${1:-lib}
dir=${dir%/}

room_of() { # path below $dir -> room
    local name=${1%.[ch]}
    echo "${name%_internal}"
}

folder_of() { # room -> its folder below $dir ("" at the top)
    [[ $1 == */* ]] && echo "${1%%/*}"
}

declare -A uses=() layer=() state=() folder_uses=()
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

# The folders' graph: one folder uses another when one of its rooms includes one of the other's.
for room in "${!uses[@]}"; do
    from=$(folder_of "$room")
    [[ -n $from ]] || continue
    folder_uses[$from]+=""
    for target in ${uses[$room]}; do
        to=$(folder_of "$target")
        [[ -n $to && $to != "$from" && " ${folder_uses[$from]} " != *" $to "* ]] &&
            folder_uses[$from]+=" $to"
    done
done

# Depth-first over the graph named by $1 (uses or folder_uses): a node's layer is one above
# the highest of the nodes it uses; meeting a node still being visited closes a circle, which
# the stack names.
stack=()
visit() { # graph, node
    local -n graph=$1
    local node=$2 target highest=0
    case ${state[$1:$node]:-} in
    done) return 0 ;;
    open)
        local circle="" i
        for ((i = ${#stack[@]} - 1; i >= 0; i--)); do
            circle="${stack[i]} -> $circle"
            [[ ${stack[i]} == "$node" ]] && break
        done
        echo "check-layers: $dir has a circle: ${circle}$node" >&2
        return 1
        ;;
    esac
    state[$1:$node]=open
    stack+=("$node")
    for target in ${graph[$node]}; do
        visit "$1" "$target" || return 1
        ((layer[$1:$target] > highest)) && highest=${layer[$1:$target]}
    done
    unset 'stack[${#stack[@]}-1]'
    state[$1:$node]=done
    layer[$1:$node]=$((highest + 1))
}

print_layers() { # graph: "LAYER NODE" lines, highest first; echoes nothing else
    local -n graph=$1
    local node
    for node in "${!graph[@]}"; do
        echo "${layer[$1:$node]} $node"
    done | sort -k1,1nr -k2,2
}

for room in "${!uses[@]}"; do
    visit uses "$room" || exit 1
done
folders=0
compgen -G "$dir/*/README.md" >/dev/null || folder_uses=()
for folder in "${!folder_uses[@]}"; do
    visit folder_uses "$folder" || exit 1
done

# A folder's README says which folders it may include: what its files include must be among them.
for folder in "${!folder_uses[@]}"; do
    readme=$dir/$folder/README.md
    allowed=$(sed -n 's/^Includes: *//p' "$readme" 2>/dev/null | sed 's/([^)]*)//g' | tr -d '`.' |
        tr ',' ' ')
    if [[ -z $allowed ]]; then
        echo "check-layers: $readme is missing or has no \"Includes:\" line" >&2
        exit 1
    fi
    for to in ${folder_uses[$folder]}; do
        if [[ " $allowed " != *" $to "* ]]; then
            echo "check-layers: $dir/$folder includes $to, which its README.md does not list" >&2
            exit 1
        fi
    done
done

print_layers uses
files=$(print_layers uses | head -n 1 | cut -d' ' -f1)
if ((${#folder_uses[@]})); then
    echo "folders:"
    print_layers folder_uses
    folders=$(print_layers folder_uses | head -n 1 | cut -d' ' -f1)
fi
if ((folders)); then
    echo "check-layers: $dir: $files file layers, $folders folder layers, no circle"
else
    echo "check-layers: $dir: $files file layers, no circle"
fi
