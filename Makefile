# Makefile - builds libuzram, the uzram program, tests, fuzzers and benches.
# Out-of-tree builds: O=DIR picks the build folder, SAN= adds sanitizers.

O ?= build
SAN ?=
CC ?= cc
ifeq ($(CC),cc)
CC := gcc
endif

LIB_PKGS := liblz4 libzstd lzo2 libdeflate libxxhash
DEP_CFLAGS := $(shell pkg-config --cflags $(LIB_PKGS) 2>/dev/null)
DEP_LIBS := $(shell pkg-config --libs $(LIB_PKGS) 2>/dev/null)
CMOCKA_LIBS := $(shell pkg-config --libs cmocka 2>/dev/null)
# The program (not the library) serves a device as a file through FUSE (src/attach/).
FUSE_CFLAGS := $(shell pkg-config --cflags fuse3 2>/dev/null)
FUSE_LIBS := $(shell pkg-config --libs fuse3 2>/dev/null)
# The program alone (the NBD server's TLS) uses GnuTLS; the library does not.
TLS_CFLAGS := $(shell pkg-config --cflags gnutls 2>/dev/null)
TLS_LIBS := $(shell pkg-config --libs gnutls 2>/dev/null)
# `uzram attach --via ublk` talks to the kernel's ublk driver over io_uring (src/attach/ublk.c).
URING_LIBS := $(shell pkg-config --libs liburing 2>/dev/null)

OPT ?= -O2
CFLAGS ?= $(OPT) -g
ALL_CFLAGS := -std=gnu11 -Wall -Wextra -Werror -pthread -D_GNU_SOURCE \
	-Iinclude -Ilib $(DEP_CFLAGS) $(CPPFLAGS) $(CFLAGS) $(EXTRA_CFLAGS)
ALL_LDFLAGS := -pthread $(LDFLAGS)
ifneq ($(SAN),)
ALL_CFLAGS += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
ALL_LDFLAGS += -fsanitize=$(SAN)
endif

# ---- the library ----
# libuzram.a, and libuzram.so.MAJOR.MINOR.PATCH with soname libuzram.so.MAJOR (and the
# usual links), built with hidden visibility: they export only what uzram.h marks
# UZRAM_API (scripts/check-exports.sh checks it). libuzram-test.a is the same engine with
# the test hooks (-DUZRAM_TEST_HOOKS: lib/common/fault.c, dedup_force_collisions), for the tests
# and fuzzers alone. The version comes from uzram.h.
version_part = $(shell sed -n 's/^.define UZRAM_VERSION_$(1) *\([0-9][0-9]*\)$$/\1/p' include/uzram.h)
VERSION := $(call version_part,MAJOR).$(call version_part,MINOR).$(call version_part,PATCH)
SONAME := libuzram.so.$(call version_part,MAJOR)

LIB_SRCS := $(sort $(wildcard lib/*/*.c))
LIB_HOOK_SRCS := lib/common/fault.c
LIB_ENGINE_SRCS := $(filter-out $(LIB_HOOK_SRCS),$(LIB_SRCS))
LIB_PIC_OBJS := $(LIB_ENGINE_SRCS:%.c=$(O)/shared/%.o)
# FAULT_INJECTION=1 (the ASan+UBSan build's, ASAN_MAKE): the test archive's fault points are
# compiled in, doing nothing until a test arms one (lib/common/fault.h), so that the fault
# sweeps run in that build and need no build of their own. Its objects have their own folder.
TEST_HOOKS_DIR := test-hooks$(if $(FAULT_INJECTION),-fault)
TEST_HOOKS_CFLAGS := -DUZRAM_TEST_HOOKS $(if $(FAULT_INJECTION),-DUZRAM_FAULT_INJECTION)
LIB_TEST_OBJS := $(LIB_SRCS:%.c=$(O)/$(TEST_HOOKS_DIR)/%.o)
LIBUZRAM := $(O)/libuzram.a
LIBUZRAM_SO := $(O)/libuzram.so.$(VERSION)
LIBUZRAM_TEST := $(O)/libuzram-test.a
HEADERS := $(wildcard include/*.h lib/*/*.h src/*/*.h tests/*.h)

# The program's parts each have a folder under src/ (see docs/ARCHITECTURE.md).
SRC_SRCS := $(sort $(wildcard src/*/*.c))
TEST_SRCS := $(filter-out tests/test_util.c,$(sort $(wildcard tests/test_*.c)))
FUZZ_SRCS := $(sort $(wildcard fuzz/fuzz_*.c))

SRC_OBJS := $(SRC_SRCS:%.c=$(O)/%.o)
TEST_BINS := $(TEST_SRCS:tests/%.c=$(O)/tests/%)
UZRAM := $(O)/uzram
# Programs the VM tests run inside the guest (tests/vm/).
VM_TOOLS := $(O)/tests/vm/memtouch $(O)/tests/vm/ublk_handover $(O)/tests/vm/locked_restart

.PHONY: all lib programs vm-tools tests check check-exports run deps tsan asan asan-tests asan-test-lib valgrind format format-check bench clean
all: lib $(UZRAM) $(TEST_BINS) $(VM_TOOLS)
lib: $(LIBUZRAM) $(LIBUZRAM_SO)
programs: $(UZRAM)
vm-tools: $(VM_TOOLS)
tests: $(TEST_BINS)

$(O)/%.o: %.c $(HEADERS) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(O)/shared/lib/%.o $(O)/$(TEST_HOOKS_DIR)/lib/%.o: ALL_CFLAGS += -fvisibility=hidden
$(O)/shared/lib/%.o: lib/%.c $(HEADERS) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -fPIC -c $< -o $@
$(O)/$(TEST_HOOKS_DIR)/lib/%.o: lib/%.c $(HEADERS) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(TEST_HOOKS_CFLAGS) -c $< -o $@

# libuzram.a holds the same position-independent objects as the shared library (with hidden
# visibility they cost nothing over -fPIE code, which Debian's compiler makes by default): the
# engine is compiled once for both.
$(LIBUZRAM): $(LIB_PIC_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

$(LIBUZRAM_TEST): $(LIB_TEST_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

# Sanitizer runtimes are not linked into shared objects by every compiler, so
# --no-undefined only holds without them.
$(LIBUZRAM_SO): $(LIB_PIC_OBJS)
	$(CC) $(ALL_LDFLAGS) -shared -Wl,-soname,$(SONAME) $(if $(SAN),,-Wl,--no-undefined) \
		-o $@ $^ $(DEP_LIBS)
	ln -sf $(notdir $@) $(O)/$(SONAME)
	ln -sf $(SONAME) $(O)/libuzram.so

# libuzram.so exports exactly the UZRAM_API functions of uzram.h (make check runs it).
check-exports: $(LIBUZRAM_SO)
	./scripts/check-exports.sh $(O)/libuzram.so
# ---- end of the library ----

# The program's files include each other by folder: "nbd/server.h".
$(O)/src/%.o: ALL_CFLAGS += -Isrc $(TLS_CFLAGS)
$(O)/src/attach/%.o: ALL_CFLAGS += $(FUSE_CFLAGS)

# A sanitizer build's program links the engine the unit tests link (the same code plus test
# hooks that do nothing unless a test calls them), so that its engine is compiled once there:
# make check's ASan build makes only the tests and this program (config.sh runs it).
UZRAM_ENGINE := $(if $(SAN),$(LIBUZRAM_TEST),$(LIBUZRAM))
$(UZRAM): $(SRC_OBJS) $(UZRAM_ENGINE)
	$(CC) $(ALL_LDFLAGS) -o $@ $(SRC_OBJS) $(UZRAM_ENGINE) $(DEP_LIBS) $(FUSE_LIBS) $(TLS_LIBS) $(URING_LIBS) -lm

# Tests draw page contents from the programs' generator, src/common/datagen.c, and
# link the engine with its test hooks.
# A test of another part of the program names that part's objects as prerequisites.
$(O)/tests/%.o: ALL_CFLAGS += -Isrc -DUZRAM_TEST_HOOKS
$(O)/tests/%: $(O)/tests/%.o $(O)/tests/test_util.o $(O)/src/common/datagen.o $(LIBUZRAM_TEST)
	$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(LIBUZRAM_TEST) $(CMOCKA_LIBS) $(DEP_LIBS) -lm
$(O)/tests/test_attach: $(O)/src/attach/nbd_client.o $(O)/src/common/process.o
$(O)/tests/test_sizes: $(O)/src/common/sizes.o
# The allocator wrapped, so that the test counts the engine's calls (the test says why).
$(O)/tests/test_write_alloc: ALL_LDFLAGS += $(foreach f,malloc calloc realloc aligned_alloc \
	posix_memalign,-Wl,--wrap=$(f))
$(O)/tests/test_command: $(O)/src/cli/command.o
$(O)/tests/test_state $(O)/tests/test_state_kept $(O)/tests/test_state_dedup \
	$(O)/tests/test_state_bundle: $(O)/tests/state_util.o
$(O)/tests/test_model $(O)/tests/test_overlap: $(O)/tests/model_util.o
$(O)/tests/test_model: $(O)/tests/model.o
$(O)/tests/vm/%: tests/vm/%.c $(O)/src/common/datagen.o $(HEADERS) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Isrc -o $@ $< $(O)/src/common/datagen.o $(ALL_LDFLAGS)
$(O)/tests/test_config: $(O)/src/server/config.o
# The locked killer and starter of a swap device's server (tests/vm/ublk-restart.sh swap).
$(O)/tests/vm/locked_restart: tests/vm/locked_restart.c $(O)/src/common/process.o $(LIBUZRAM) $(HEADERS) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Isrc -o $@ $< $(O)/src/common/process.o $(LIBUZRAM) $(ALL_LDFLAGS) $(DEP_LIBS) -lm
# The stand-in server of the ublk recovery scenarios: the program's ublk code on the engine.
UBLK_HANDOVER_OBJS = $(O)/src/attach/ublk.o $(O)/src/attach/swap_guard.o $(O)/src/common/threads.o \
	$(O)/src/common/process.o
$(O)/tests/vm/ublk_handover: tests/vm/ublk_handover.c $(UBLK_HANDOVER_OBJS) $(LIBUZRAM) $(HEADERS) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Isrc -o $@ $< $(UBLK_HANDOVER_OBJS) $(LIBUZRAM) $(ALL_LDFLAGS) $(DEP_LIBS) $(URING_LIBS) -lm

# The one command CI runs: installs what is missing, checks the formatting, builds
# plain and ASan+UBSan, runs unit, model, concurrent (TSan), fault, fuzz-corpus and
# integration tests; skips are counted apart and named (scripts/check.sh).
check: deps
	./scripts/check.sh

run: deps
	$(MAKE) programs
	./scripts/run.sh

deps:
	./scripts/deps.sh

# The ASan+UBSan build in build/asan: `asan` makes everything there; `asan-tests` the unit
# tests and the program (what make check runs) and `asan-test-lib` only the engine with its
# test hooks (the fuzz corpus replay links it: scripts/fuzz.sh). Its test archive has the
# fault points in (FAULT_INJECTION): the fault sweeps run there too (fault-check).
ASAN_MAKE = $(MAKE) O=build/asan SAN=address,undefined OPT=-O1 FAULT_INJECTION=1
asan:
	+$(ASAN_MAKE) all
asan-tests:
	+$(ASAN_MAKE) tests build/asan/uzram
asan-test-lib:
	+$(ASAN_MAKE) build/asan/libuzram-test.a

# ---- make check's stages: each is one target here, and only here ----
# scripts/check.sh runs them (some side by side: it says which and why) and sums them up:
#   format-check       clang-format                 check-exports   the shared library's API
#   layers-check       no include circle in lib/, src/, nor among lib/'s folders
#   unit-check         unit and model tests (plain) asan-unit-check the same under ASan+UBSan
#   tsan               concurrent cases under TSan  fault-check     fault-injection sweeps
#   fuzz-check         fuzz corpus and a short run  integration-check  real clients, real server
#   vm-check           the kernel's clients in a VM (tests/vm/)
#   bench-check        each benchmark outside bench/run.sh on tiny data, its output checked;
#                      the VM benchmarks' --help and argument checks (bench/parts.sh --smoke)
.PHONY: layers-check unit-check asan-unit-check tsan-build integration-check
layers-check:
	./scripts/check-layers.sh lib
	./scripts/check-layers.sh src

unit-check: tests
	./scripts/run-tests.sh $(O)

# The binaries with fault cases run in fault-check, beside these (the same build).
# ASAN_TIMING_TESTS measure time and CPU shares with processes spinning on every CPU: they
# burn about 20 CPU-seconds for what the plain build already measures, and a sanitizer's
# slowdown is not what they are about; the code they drive runs under ASan in other tests.
ASAN_TIMING_TESTS := test_recompress_cpu
asan-unit-check: asan-tests
	./scripts/run-tests.sh build/asan all \
	    $(filter-out $(FAULT_TESTS) $(ASAN_TIMING_TESTS),$(TEST_SRCS:tests/%.c=%))

# ThreadSanitizer run of the concurrent tests: only the test binaries that have
# concurrent cases (scripts/run-tests.sh finds them) are built and run.
tsan-build:
	$(MAKE) O=build/tsan SAN=thread CC=clang OPT=-O1 \
		$$(./scripts/run-tests.sh --concurrent-binaries build/tsan)
tsan: deps tsan-build
	./scripts/run-tests.sh build/tsan concurrent

integration-check: programs
	UZRAM=$(UZRAM) ./scripts/integration.sh

valgrind: deps
	$(MAKE) O=build/valgrind OPT=-O1 all
	./scripts/run-tests.sh build/valgrind valgrind

bench: deps
	$(MAKE) programs
	./bench/run.sh
	UZRAM=$(UZRAM) ./bench/parts.sh

FORMAT_FILES = include/*.h lib/*/*.[ch] src/*/*.[ch] tests/*.[ch] tests/vm/*.c $(wildcard fuzz/*.[ch] bench/*.c)
format:
	clang-format -i $(FORMAT_FILES)

# Fails when a file is not in the style of .clang-format.
format-check:
	clang-format --dry-run -Werror $(FORMAT_FILES)

clean:
	rm -rf $(O)

# ---- install (GNU conventions; tests/integration/install.sh checks the tree) ----
# make install [PREFIX=/usr/local] [DESTDIR=/staging]: the program, libuzram.a, the shared
# library with its soname links, uzram.h, uzram.pc, the man page, the systemd units and an
# example configuration. Any of the directories below can be set on the command line
# (make install libdir=/usr/lib/x86_64-linux-gnu). make uninstall removes what install put.
PREFIX ?= /usr/local
prefix ?= $(PREFIX)
exec_prefix ?= $(prefix)
bindir ?= $(exec_prefix)/bin
libdir ?= $(exec_prefix)/lib
includedir ?= $(prefix)/include
datarootdir ?= $(prefix)/share
mandir ?= $(datarootdir)/man
man1dir ?= $(mandir)/man1
docdir ?= $(datarootdir)/doc/uzram
pkgconfigdir ?= $(libdir)/pkgconfig
# /etc whatever the prefix, as distributions have it: the units, README and uzram(1) all
# name /etc/uzram/uzram.conf (a PREFIX/etc nobody looks in made the at-boot recipe fail).
sysconfdir ?= /etc
# systemd reads units from /usr/lib/systemd/system and /usr/local/lib/systemd/system.
systemdsystemunitdir ?= $(prefix)/lib/systemd/system
systemdgeneratordir ?= $(prefix)/lib/systemd/system-generators
INSTALL ?= install

# Directories under prefix are written relative to it in uzram.pc, so that
# `pkg-config --define-prefix` finds a tree that was moved (or is still in DESTDIR).
pc_path = $(patsubst $(prefix)/%,$${prefix}/%,$(1))
SUBSTITUTE = sed -e 's|@prefix@|$(prefix)|g' -e 's|@libdir@|$(call pc_path,$(libdir))|g' \
	-e 's|@includedir@|$(call pc_path,$(includedir))|g' -e 's|@VERSION@|$(VERSION)|g' \
	-e 's|@REQUIRES_PRIVATE@|$(LIB_PKGS)|g' -e 's|@bindir@|$(bindir)|g' \
	-e 's|@sysconfdir@|$(sysconfdir)|g' -e 's|@systemdsystemunitdir@|$(systemdsystemunitdir)|g'
SYSTEMD_UNITS := uzram@.service uzram@.socket uzram-swap@.service uzram-zram@.service \
	uzram-zram-setup@.service
# zram-generator's configuration, served by uzram at boot (uzram(1), ZRAM-GENERATOR).
SYSTEMD_GENERATOR := uzram-zram-generator

.PHONY: install uninstall
# The directories install made, for uninstall (scripts/install-dirs.sh).
INSTALLED_DIRS = $(docdir)/installed-directories
# ldconfig after the library comes or goes, when it is the machine's own tree.
LDCONFIG = @if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then \
		ldconfig; fi
install: lib programs
	DESTDIR="$(DESTDIR)" ./scripts/install-dirs.sh create $(INSTALLED_DIRS) $(bindir) $(libdir) \
		$(includedir) $(pkgconfigdir) $(man1dir) $(docdir) $(systemdsystemunitdir) \
		$(systemdgeneratordir)
	$(INSTALL) -m 755 $(UZRAM) $(DESTDIR)$(bindir)/uzram
	$(INSTALL) -m 644 $(LIBUZRAM) $(DESTDIR)$(libdir)/libuzram.a
	$(INSTALL) -m 755 $(LIBUZRAM_SO) $(DESTDIR)$(libdir)/$(notdir $(LIBUZRAM_SO))
	ln -sf $(notdir $(LIBUZRAM_SO)) $(DESTDIR)$(libdir)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(libdir)/libuzram.so
	$(INSTALL) -m 644 include/uzram.h include/uzram_stats.h $(DESTDIR)$(includedir)/
	$(SUBSTITUTE) lib/uzram.pc.in >$(DESTDIR)$(pkgconfigdir)/uzram.pc
	chmod 644 $(DESTDIR)$(pkgconfigdir)/uzram.pc
	$(INSTALL) -m 644 docs/uzram.1 $(DESTDIR)$(man1dir)/uzram.1
	$(INSTALL) -m 644 docs/uzram.conf.example $(DESTDIR)$(docdir)/uzram.conf.example
	for unit in $(SYSTEMD_UNITS); do \
		$(SUBSTITUTE) systemd/$$unit.in >$(DESTDIR)$(systemdsystemunitdir)/$$unit && \
		chmod 644 $(DESTDIR)$(systemdsystemunitdir)/$$unit || exit 1; \
	done
	$(SUBSTITUTE) systemd/$(SYSTEMD_GENERATOR).in >$(DESTDIR)$(systemdgeneratordir)/$(SYSTEMD_GENERATOR)
	chmod 755 $(DESTDIR)$(systemdgeneratordir)/$(SYSTEMD_GENERATOR)
	$(LDCONFIG)

uninstall:
	rm -f $(DESTDIR)$(bindir)/uzram $(DESTDIR)$(libdir)/libuzram.a \
		$(DESTDIR)$(libdir)/$(notdir $(LIBUZRAM_SO)) $(DESTDIR)$(libdir)/$(SONAME) \
		$(DESTDIR)$(libdir)/libuzram.so $(DESTDIR)$(includedir)/uzram.h \
		$(DESTDIR)$(includedir)/uzram_stats.h \
		$(DESTDIR)$(pkgconfigdir)/uzram.pc $(DESTDIR)$(man1dir)/uzram.1 \
		$(DESTDIR)$(docdir)/uzram.conf.example \
		$(addprefix $(DESTDIR)$(systemdsystemunitdir)/,$(SYSTEMD_UNITS)) \
		$(DESTDIR)$(systemdgeneratordir)/$(SYSTEMD_GENERATOR)
	DESTDIR="$(DESTDIR)" ./scripts/install-dirs.sh remove $(INSTALLED_DIRS)
	$(LDCONFIG)
# ---- end of install block ----

# ---- Debian packages (debian/; scripts/deb.sh, tests/integration/deb.sh) ----
# deb:       uzram, libuzram0 and libuzram-dev with dpkg-buildpackage -us -uc -b, built from a
#            copy of the tree in $(O)/deb, where the .deb files land
# deb-check: build them, lintian, install them with apt, use them, remove them (root; make
#            check runs it too, as an integration test)
.PHONY: deb deb-check
deb: deps
	./scripts/deb.sh $(O)/deb

deb-check: deps
	UZRAM=$(UZRAM) bash tests/integration/deb.sh
# ---- end of Debian packages block ----

# ---- reliability: fuzzing and fault injection (issue 7; scripts/fuzz.sh) ----
# fuzz:        every fuzz/fuzz_*.c under libFuzzer (clang, ASan+UBSan) in
#              build/fuzz, FUZZ_SECONDS each (default 60)
# fuzz-replay: the same targets as plain programs (gcc, ASan+UBSan) in
#              build/fuzz-replay, run over the committed fuzz/corpus/<name>/
# fuzz-check:  replay plus a short libFuzzer run (FUZZ_CHECK_SECONDS, 10)
# fault:       FAULT_TESTS in build/asan, whose test archive lets every allocation,
#              compression call and backing-store I/O be made to fail (FAULT_INJECTION)
# fault-check: the fault injection sweeps: FAULT_TESTS in build/asan (asan-unit-check
#              runs the other binaries there)
FUZZ_SECONDS ?= 60
FUZZ_CHECK_SECONDS ?= 10
.PHONY: fuzz fuzz-replay fuzz-check fault fault-check

fuzz: deps
	./scripts/fuzz.sh run $(FUZZ_SECONDS)

fuzz-replay: deps
	./scripts/fuzz.sh replay

fuzz-check: deps
	./scripts/fuzz.sh replay
	./scripts/fuzz.sh run $(FUZZ_CHECK_SECONDS)

# The binaries with fault cases (they skip them in every build but build/asan).
FAULT_TESTS := test_fault test_dedup_index test_state test_state_kept test_state_dedup \
	test_state_bundle
fault: deps
	+$(ASAN_MAKE) $(FAULT_TESTS:%=build/asan/tests/%)

fault-check: fault
	RUN_TESTS_SET=fault ./scripts/run-tests.sh build/asan all $(FAULT_TESTS)
	@sed -n 's/^\(.*fault points swept in total.*\):$$/\1/p' build/asan/tests/test_fault.log
# ---- end of reliability block ----

# ---- benchmarks (issue 6; bench/run.sh, docs/BENCHMARKS.md) ----
# bench:       (above) the full run: fio throughput matrix, memory
#              table, uzram bench, kernel zram comparison; rewrites the results part of
#              docs/BENCHMARKS.md and the plots in docs/bench/
# bench-quick: the same report layout, fewer cells and smaller data, written to
#              build/bench-quick/ (how long each took: docs/BENCHMARKS.md, "How to run")
# bench-parts: the benchmarks bench/run.sh does not run (bench/parts.sh: TLS, scale-out,
#              bundles, the pool against zsmalloc, a state file, estimate's speed, A/B of two
#              builds, server limits and profile), each at full size, writing its block of
#              docs/BENCHMARKS.md or docs/SECURITY.md; BENCH_PARTS=NAME... runs only those
# bench-check: make check's stage (above): the same on tiny data in seconds, output checked
BENCH_PARTS ?=
.PHONY: bench-quick bench-parts bench-check
bench-quick: deps
	$(MAKE) programs
	UZRAM=$(UZRAM) ./bench/run.sh --quick
bench-parts: deps
	$(MAKE) programs
	UZRAM=$(UZRAM) ./bench/parts.sh $(BENCH_PARTS)
bench-check: programs lib
	UZRAM=$(UZRAM) ./bench/parts.sh --smoke
# ---- end of benchmarks block ----

# ---- soak (issue 7; tests/soak/soak.sh, docs/TESTING.md) ----
# soak: SOAK_SECONDS (default 300) of 12 checker clients + 4 fio verify jobs on one server,
#       clients killed and reconnected at random, compaction and stat reads meanwhile; then
#       every checker region verified whole, a full discard (memory back to 0) and a clean
#       SIGTERM. SOAK_UZRAM=build/asan/uzram soaks another build (e.g. after `make asan`).
SOAK_SECONDS ?= 300
.PHONY: soak
soak: deps
	$(MAKE) programs
	SOAK_SECONDS=$(SOAK_SECONDS) UZRAM=$(or $(SOAK_UZRAM),$(UZRAM)) ./tests/soak/soak.sh
# ---- end of soak block ----

# ---- VM tests (issue 21; tests/vm/, tests/vm/README.md) ----
# vm-check:     what make check runs: one boot of Debian's 6.12 kernel under QEMU (KVM when
#               /dev/kvm is usable, else TCG) with every scenario class in its short form
# vm-shell:     a shell in that guest, the host's root under a tmpfs overlay (VM_KERNEL=6.1:
#               Debian 12's stock kernel)
# vm-matrix:    every scenario in a short form on both kernels, Debian 12's 6.12 and its stock
#               6.1 (no ublk: those skip, saying so), one line per scenario and kernel
# vm-swap-soak: swap under memory pressure, the full run, VM_SOAK_RUNS times (default 10)
# vm-docs:      regenerates docs/ZRAM-ORACLE.md and the VM swap table of docs/BENCHMARKS.md
# vm-bench:     the /dev node paths (ublk, nbd-client) against the guest's zram, fio in the VM,
#               into docs/BENCHMARKS.md (bench/vm-block.sh)
# vm-bench-ab:  the same paths of this build against an older one, OLD=path/to/old/build/uzram,
#               rounds interleaved in one boot (bench/vm-block.sh --ab)
# vm-recovery:  ublk user recovery's handshake, VM_KILLS (20) SIGKILLs of a stand-in server
#               under fio (tests/vm/ublk-recovery.sh; not in make check: ~54 s a kill under TCG)
# vm-restart:   issue 29's scenarios through `serve --persist` (tests/vm/ublk-restart.sh):
#               ext4 + fio verify with VM_KILLS SIGKILLs and `uzram restart` under fio (swap with
#               a restart: `ublk-restart:swap`, by name: minutes more under TCG); then the
#               installed uzram@.service under a real systemd with the state in its descriptor
#               store (tests/vm/systemd.sh: reload, SIGKILL, restart, stop; ~3 min under TCG)
# vm-swap-bench: real programs as swap workloads (issue 40): GNU sort and python3 on real data at
#               footprints of 0.5 to 2.5 times a 512 MiB guest, swap on kernel zram lz4 and zstd
#               and on uzram lz4 and dense, one cap on compressed memory, into docs/BENCHMARKS.md
#               (bench/vm-swap-programs.sh; hours under TCG; VM_SWAP_BENCH_ARGS=--quick: one
#               size, sort only, every backend)
VM_SOAK_RUNS ?= 10
VM_KILLS ?= 20
VM_SWAP_BENCH_ARGS ?=
.PHONY: vm-check vm-shell vm-swap-soak vm-docs vm-bench vm-bench-ab vm-recovery vm-restart vm-swap-bench \
	vm-matrix
vm-check: deps
	$(MAKE) programs $(VM_TOOLS)
	./tests/vm/vm.sh --check
vm-matrix: deps
	$(MAKE) lib programs $(VM_TOOLS)
	./tests/vm/vm.sh --matrix
vm-shell: deps
	$(MAKE) programs $(VM_TOOLS)
	./tests/vm/vm.sh --shell
vm-swap-soak: deps
	$(MAKE) programs $(VM_TOOLS)
	./tests/vm/vm.sh --mem 512 --deadline $$(( $(VM_SOAK_RUNS) * 600 )) swap:--soak,$(VM_SOAK_RUNS)
vm-docs: deps
	$(MAKE) programs $(VM_TOOLS)
	./bench/vm-docs.sh
vm-bench: deps
	$(MAKE) programs $(VM_TOOLS)
	./bench/vm-block.sh
vm-bench-ab: deps
	@[ -n "$(OLD)" ] || { echo "make vm-bench-ab OLD=path/to/another/build/uzram" >&2; exit 2; }
	$(MAKE) programs $(VM_TOOLS)
	./bench/vm-block.sh --ab $(OLD)
vm-swap-bench: deps
	$(MAKE) programs $(VM_TOOLS)
	./bench/vm-swap-programs.sh $(VM_SWAP_BENCH_ARGS)
vm-recovery: deps
	$(MAKE) programs $(VM_TOOLS)
	./tests/vm/vm.sh --mem 512 --deadline $$(( 60 + $(VM_KILLS) * 20 )) ublk-recovery:$(VM_KILLS)
vm-restart: deps
	$(MAKE) lib programs $(VM_TOOLS)
	./tests/vm/vm.sh --mem 512 --deadline $$(( 900 + $(VM_KILLS) * 30 )) \
		ublk-restart:ext4,$(VM_KILLS),planned systemd
# ---- end of VM tests block ----
