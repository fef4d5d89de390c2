#!/usr/bin/env bash
# help.sh - integration test: every command reads its command line through the one framework
# (src/cli/command.c; issue 42), so every command of `uzram --help` answers the same way:
# `CMD --help` and `CMD -h` print the same help, starting "Usage: uzram CMD", on stdout and
# nothing on stderr, exit 0; an unknown option is getopt's line and "Try 'uzram CMD --help'
# for more information.", exit 2; every option the help lists (long and short) is one the
# command takes (given before --help it is never "unrecognized", and it ends in the help or
# in a line saying what is wrong with its value, exit 0 or 2); and every option is in the
# man page, docs/uzram.1: in the command's own section, -u/--runtime-dir and -S/--server under
# RUNTIME DIRECTORY, -h/--help in DESCRIPTION, hot-add's device options under UZRAM SERVE.
# No server runs. Skips and fails as tests/integration/lib.bash says (exit 0/1/77).
set -euo pipefail

. "$(dirname "$0")/lib.bash"
[[ -x $PY ]] || skip "$PY is missing"
lib_init

$PY - "$UZRAM" "$(dirname "$0")/../../docs/uzram.1" "$WORK" <<'EOF' || fail "see above"
import os, re, subprocess, sys

uzram, man_path, work = sys.argv[1:4]
errors = []

def run(*args):
    p = subprocess.run([uzram, *args], capture_output=True, text=True, cwd=work,
                       stdin=subprocess.DEVNULL, timeout=30)
    return p.returncode, p.stdout, p.stderr

# The commands, as `uzram --help` lists them ("  NAME  summary", a long NAME alone).
status, top, _ = run("--help")
commands = re.findall(r"^  ([a-z][a-z-]+)(?: |$)", top.split("Commands:\n")[1].split("\n\n")[0],
                      re.M)
assert len(commands) >= 12, commands

# The man page, by section: the command's .SH (or .SS), up to the next of its kind.
man = open(man_path).read().replace("\\-", "-").split("\n")
def section(heading):
    start = [i for i, line in enumerate(man) if line == heading]
    if not start:
        errors.append("uzram.1 has no section %r" % heading)
        return ""
    kind = heading[:3]
    end = next((i for i in range(start[0] + 1, len(man))
                if man[i].startswith(".SH") or man[i].startswith(kind)), len(man))
    return "\n".join(man[start[0]:end])
sections = {c: section('.SH "UZRAM %s"' % c.upper()) for c in commands
            if c not in ("restart", "state-check", "zram-generator")}
sections["restart"] = section(".SS uzram restart")
sections["state-check"] = section(".SS uzram state-check")
sections["zram-generator"] = section('.SH "ZRAM-GENERATOR"')
runtime_dir = section('.SH "RUNTIME DIRECTORY"')
description = section(".SH DESCRIPTION")

def mentioned(option, text):
    return re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(option), text) is not None

# An option line of --help: "  -s, --size SIZE  ...", "      --dedup  ...", and its argument.
OPTION = re.compile(r"^  (?:-(\w), |    )--([a-z][a-z-]*)(\[=\S+\]| \S+)?")

checked = 0
for command in commands:
    status, out, err = run(command, "--help")
    if status != 0 or err or not out.startswith("Usage: uzram %s " % command):
        errors.append("%s --help: status %d, stderr %r, starts %r" % (command, status, err,
                                                                    out[:40]))
        continue
    if run(command, "-h") != (0, out, ""):
        errors.append("%s -h differs from --help" % command)
    status, _, err = run(command, "--no-such-option")
    want = ("uzram %s: unrecognized option '--no-such-option'\n"
            "Try 'uzram %s --help' for more information.\n" % (command, command))
    if status != 2 or err != want:
        errors.append("%s --no-such-option: status %d, stderr %r" % (command, status, err))
    # hot-add's device options follow NAME [SIZE]: they are serve's, checked there.
    own = out.split("\nDevice options")[0]
    for line in out.split("\n"):
        match = OPTION.match(line)
        if not match:
            continue
        letter, name, arg = match.groups()
        is_own = line in own.split("\n")
        forms = ["--" + name] + (["-" + letter] if letter else [])
        for form in forms:
            if not is_own:
                break
            # Given before --help, the option is read (a bad value is said, not "unknown").
            given = [form] + (["1"] if arg and not arg.startswith("[") else [])
            status, _, err = run(command, *given, "--help")
            if status not in (0, 2):  # a crash, or an option that did something
                errors.append("%s %s --help: status %d, stderr %r" %
                              (command, " ".join(given), status, err))
            if re.search(r"unrecognized option|invalid option|requires an argument", err):
                errors.append("%s --help lists %s, which it does not take: %s" %
                              (command, form, err.strip()))
            checked += 1
        for form in forms:
            if form in ("-h", "--help"):
                where, text = "DESCRIPTION", description
            elif form in ("-u", "--runtime-dir", "-S", "--server"):
                where, text = "RUNTIME DIRECTORY", runtime_dir
            elif not is_own:
                where, text = "UZRAM SERVE", sections["serve"]
            else:
                where, text = "its section", sections[command]
            if not mentioned(form, text):
                errors.append("uzram.1 (%s) does not mention %s %s" % (where, command, form))
    if not mentioned("uzram COMMAND --help", description) and command == commands[0]:
        errors.append("uzram.1's DESCRIPTION does not say COMMAND --help")

for e in errors:
    print(e)
print("%d commands, %d options given before --help" % (len(commands), checked))
sys.exit(1 if errors or checked < 100 else 0)
EOF
pass "every command: --help = -h, an unknown option's two lines and exit 2, every listed option taken and in uzram(1)"

echo "PASS: help.sh"
