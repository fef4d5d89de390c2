# image.bash - the build image of the recompression and writeback benchmarks (sourced, not run).
# An ext4 image (mkfs.ext4 -d) of /usr/include, this project's sources with three builds of them
# (-O2, ASan+UBSan, -O0 -g; quick: /usr/include/{linux,asm-generic} and the -O2 build) and, with
# KERNEL=1, the Linux 6.1 source tree with a tinyconfig vmlinux build in it (kept as a tar in
# $CACHE between runs): a developer's disk during a build, the kind of data the dedup seed
# measured. build_image writes $WORK/image and $RES/image.desc, or prints why not; get_image
# takes an image built before instead when IMAGE names one (bench/run.sh builds it once for the
# parts that store it). The caller sets WORK, RES, CACHE, QUICK, KERNEL and IMAGE_FOR (its name,
# for messages), and may set IMAGE and KEEP_IMAGE.

make_ext4() { # DIR IMAGE: just large enough for DIR
    local used
    used=$(du -sb "$1" | cut -f1)
    mkfs.ext4 -q -F -b 4096 -m 0 -d "$1" "$2" "$(((used / 10 * 12 + 32 * 1048576) / 1048576))M" \
        >"$WORK/mkfs.log" 2>&1 || { cat "$WORK/mkfs.log" >&2; return 1; }
}

# The Linux tree with a tinyconfig build, kept as a tar in the cache (building takes minutes).
kernel_tree() { # DEST
    local tar=$CACHE/linux-6.1-tinyconfig.tar src=/usr/src/linux-source-6.1.tar.xz
    if [ ! -f "$tar" ]; then
        if [ ! -f "$src" ] && [ "$(id -u)" = 0 ]; then
            echo "$IMAGE_FOR: installing linux-source-6.1 for the kernel build tree" >&2
            apt-get install -y -q linux-source-6.1 flex bison bc >"$WORK/apt.log" 2>&1 || true
        fi
        [ -f "$src" ] || { echo "no $src (apt-get install linux-source-6.1)"; return 1; }
        mkdir -p "$CACHE" "$WORK/k"
        tar xJf "$src" -C "$WORK/k" || return 1
        echo "$IMAGE_FOR: building Linux 6.1 tinyconfig (once; cached in $CACHE)" >&2
        (cd "$WORK/k/linux-source-6.1" && make -s tinyconfig && make -s -j"$(nproc)" vmlinux) \
            >"$WORK/kernel.log" 2>&1 || { tail -5 "$WORK/kernel.log" >&2; echo "the kernel build failed"; return 1; }
        tar cf "$tar.tmp" -C "$WORK/k" linux-source-6.1 && mv "$tar.tmp" "$tar" || return 1
        rm -rf "$WORK/k"
    fi
    tar xf "$tar" -C "$1"
}

build_image() {
    local root=$WORK/tree src=$WORK/tree/uzram
    mkdir -p "$root/include" "$src"
    if [ "$QUICK" = 1 ]; then
        cp -a /usr/include/linux /usr/include/asm-generic "$root/include/" 2>/dev/null
    else
        cp -a /usr/include/. "$root/include/" 2>/dev/null
    fi
    tar cf - --exclude=./build --exclude=./.git . | tar xf - -C "$src" || return 1
    (cd "$src" && make -s -j"$(nproc)" O=build all) >"$WORK/make.log" 2>&1 ||
        { tail -5 "$WORK/make.log" >&2; echo "the project did not build"; return 1; }
    local what="/usr/include$([ "$QUICK" = 1 ] && echo "/{linux,asm-generic}"), the uzram sources and their -O2 build"
    if [ "$QUICK" != 1 ]; then
        (cd "$src" && make -s -j"$(nproc)" O=build/asan SAN=address,undefined OPT=-O1 all &&
            make -s -j"$(nproc)" O=build/debug OPT=-O0 all) >"$WORK/make.log" 2>&1 ||
            { tail -5 "$WORK/make.log" >&2; echo "the ASan or -O0 build failed"; return 1; }
        what="$what, ASan+UBSan and -O0 -g builds"
    fi
    if [ "$KERNEL" = 1 ]; then
        if why=$(kernel_tree "$root"); then
            what="$what, and the Linux 6.1 source tree with a tinyconfig vmlinux build"
        else
            echo "$IMAGE_FOR: note: no kernel tree: $why" >&2
            what="$what (no kernel tree: $why)"
        fi
    fi
    make_ext4 "$root" "$WORK/image" || { echo "mkfs.ext4 -d failed"; return 1; }
    rm -rf "$root"
    echo "ext4 image (mkfs.ext4 -d) of $what" >"$RES/image.desc"
}

# get_image: $WORK/image and $RES/image.desc from IMAGE (and IMAGE.desc) when set, else built;
# with KEEP_IMAGE, a copy kept there (and KEEP_IMAGE.desc) for IMAGE= in a later run. Prints why
# not.
get_image() {
    if [ -n "${IMAGE:-}" ]; then
        cp "$IMAGE" "$WORK/image" || { echo "cannot copy $IMAGE"; return 1; }
        if [ -f "$IMAGE.desc" ]; then
            cp "$IMAGE.desc" "$RES/image.desc"
        else
            echo "the image $IMAGE" >"$RES/image.desc"
        fi
    else
        build_image || return 1
    fi
    if [ -n "${KEEP_IMAGE:-}" ]; then
        cp "$WORK/image" "$KEEP_IMAGE" && cp "$RES/image.desc" "$KEEP_IMAGE.desc" ||
            { echo "cannot keep the image in $KEEP_IMAGE"; return 1; }
    fi
}
