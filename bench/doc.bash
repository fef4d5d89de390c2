# doc.bash - what the benchmark scripts that write a block of a doc share (sourced, not run):
# the commit they ran on, and the block put between its markers.

# bench_git: the commit of the tree, with " + uncommitted changes" when tracked files differ.
bench_git() {
    local git
    git=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    [[ -z $(git status --porcelain --untracked-files=no 2>/dev/null) ]] || git="$git + uncommitted changes"
    echo "$git"
}

# doc_parse ARGS...: a leading "--doc FILE" sets DOC to FILE (empty without); the other
# arguments are left in ARGS (the caller: doc_parse "$@"; set -- "${ARGS[@]}").
doc_parse() {
    DOC=
    ARGS=("$@")
    if [[ ${1:-} == --doc ]]; then
        DOC=${2:?--doc FILE}
        ARGS=("${@:3}")
    fi
}

# doc_block FILE BEGIN END TEXT_FILE [wrap]: replace what lies between the line BEGIN and END
# in FILE with the text of TEXT_FILE. With "wrap", the text is one paragraph, wrapped at 92
# columns and indented as the BEGIN marker is (a list item's text, in SECURITY.md).
doc_block() {
    /usr/bin/python3 - "$@" <<'PY'
import sys
path, begin, end, text_path = sys.argv[1:5]
wrap = sys.argv[5:] == ["wrap"]
text, doc = open(text_path).read(), open(path).read()
if begin not in doc or end not in doc:
    sys.exit("no markers %s ... %s in %s" % (begin, end, path))
head, rest = doc.split(begin, 1)
tail = rest.split(end, 1)[1]
indent = head[head.rfind("\n") + 1:] if wrap else ""
if wrap:
    lines, line = [], ""
    for word in text.split():
        if line and len(indent) + len(line) + 1 + len(word) > 92:
            lines.append(line)
            line = word
        else:
            line = line + " " + word if line else word
    text = "".join(indent + l + "\n" for l in lines + [line])
open(path, "w").write(head + begin + "\n" + text + indent + end + tail)
PY
}
