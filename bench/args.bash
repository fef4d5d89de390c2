# args.bash - what the command lines of the benchmark scripts share (sourced, not run): --help
# prints the script's head comment, and a count is checked before anything starts (a VM boot
# takes minutes: a mistyped argument must not cost them).

# bench_help ARGS...: with -h or --help first, print the head comment of the script (its first
# comment block, after the #! line) and exit 0. The caller has done its `cd` to the tree's root.
bench_help() {
    case ${1:-} in
    -h | --help)
        sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "bench/$(basename "$0")"
        exit 0
        ;;
    esac
}

# bench_count NAME VALUE: VALUE must be a whole number above 0, else one line and exit 2.
bench_count() {
    [[ $2 =~ ^[1-9][0-9]*$ ]] && return 0
    echo "$(basename "$0"): $1 must be a whole number above 0, not '$2' (try --help)" >&2
    exit 2
}

# bench_size NAME VALUE: VALUE must be a size as serve and zram take it, a whole number above 0
# with an optional K, M, G or T suffix, else one line and exit 2.
bench_size() {
    [[ $2 =~ ^[1-9][0-9]*[KMGT]?$ ]] && return 0
    echo "$(basename "$0"): $1 must be a size such as 256M or 1G, not '$2' (try --help)" >&2
    exit 2
}
