echo hello from $(uname -r); cat /proc/meminfo | head -3; ls /dev/nbd0 2>&1; modprobe nbd && ls /dev/nbd* | head -2; $UZRAM --version; free -m
