#!/bin/bash
# deps.sh - installs the Debian packages the build, tests and benches need.
# As root it runs apt-get itself; otherwise it prints the exact command.
set -euo pipefail

packages=(
    gcc make pkg-config
    liblz4-dev libzstd-dev liblzo2-dev zlib1g-dev libdeflate-dev libxxhash-dev
    libgnutls28-dev libcmocka-dev clang libclang-rt-14-dev clang-format valgrind
    # libnbd-bin brings nbdinfo, nbdcopy and nbdfuse
    libnbd-bin python3-libnbd qemu-utils fio nbdkit fuse3 libfuse3-dev e2fsprogs
    # attach --via ublk: the kernel's ublk driver over io_uring
    liburing-dev
    # certtool and psktool make the TLS tests' credentials
    gnutls-bin
    gnuplot-nox
    # the Debian packages (debian/, make deb-check): dpkg-buildpackage, dh, lintian
    dpkg-dev debhelper lintian
    # the VM tests (tests/vm/): a Debian 6.12 kernel under QEMU runs the kernel's own clients
    # (nbd, md, swap, zram) against this build; the guest's root is this machine's, so every
    # tool a scenario runs in it is installed here
    qemu-system-x86 busybox-static kmod cpio xz-utils nbd-client mdadm procps util-linux
)

missing=()
for package in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
    [[ "$status" == "install ok installed" ]] || missing+=("$package")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -ne 0 ]]; then
    echo "uzram: missing packages: ${missing[*]}" >&2
    echo "run:   sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
fi
echo "uzram: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
