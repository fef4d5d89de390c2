#!/usr/bin/python3
"""activate.py - socket activation as a service manager does it, for the tests (like
systemd-socket-activate): bind and listen on the sockets asked for, put them on descriptors
3, 4, ... and exec the command with LISTEN_FDS, LISTEN_FDNAMES and LISTEN_PID set to this
process's own pid (exec keeps the pid, so the command finds its own).

  activate.py [--unix PATH[=NAME]] [--tcp ADDR:PORT[=NAME]] [--not-a-socket FILE]
              [--not-listening] [--other-pid] [--port-file FILE] -- COMMAND [ARG]...

--port-file writes the port the first --tcp socket got (port 0 picks a free one).
--not-a-socket hands over FILE, opened, as one of the descriptors; --not-listening hands over
a socket that is bound but not listening; --other-pid sets LISTEN_PID to another process's.
"""
import fcntl
import os
import socket
import sys


def main(argv):
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1:]
    handed, names, port_file, other_pid, port_written = [], [], None, False, False
    if "--port-file" in options:
        port_file = options[options.index("--port-file") + 1]
    i = 0
    while i < len(options):
        option = options[i]
        if option in ("--unix", "--tcp", "--not-a-socket", "--port-file"):
            value = options[i + 1]
            i += 2
        else:
            value = None
            i += 1
        name = ""
        if value and option in ("--unix", "--tcp") and "=" in value:
            value, name = value.split("=", 1)
        if option == "--unix":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(value)
            s.listen(16)
            handed.append(s.detach())
        elif option == "--tcp":
            host, port = value.rsplit(":", 1)
            s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host.strip("[]"), int(port)))
            s.listen(16)
            if port_file and not port_written:
                with open(port_file, "w") as f:
                    f.write("%d\n" % s.getsockname()[1])
                port_written = True
            handed.append(s.detach())
        elif option == "--not-a-socket":
            handed.append(os.open(value, os.O_RDONLY))
        elif option == "--not-listening":
            s = socket.socket(socket.AF_INET)
            s.bind(("127.0.0.1", 0))
            handed.append(s.detach())
        elif option == "--port-file":
            pass  # taken above, before any --tcp
        elif option == "--other-pid":
            other_pid = True
        else:
            sys.exit("activate.py: unknown option " + option)
        if option in ("--unix", "--tcp", "--not-a-socket", "--not-listening"):
            names.append(name or option.lstrip("-"))
    # Move the descriptors to 3, 4, ... (through high numbers first, so none is overwritten).
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in handed]
    for fd in handed:
        os.close(fd)
    for index, fd in enumerate(high):
        os.dup2(fd, 3 + index, inheritable=True)
        os.close(fd)
    env = dict(os.environ)
    env["LISTEN_FDS"] = str(len(handed))
    env["LISTEN_FDNAMES"] = ":".join(names)
    env["LISTEN_PID"] = str(os.getppid() if other_pid else os.getpid())
    os.execvpe(command[0], command, env)


if __name__ == "__main__":
    main(sys.argv[1:])
