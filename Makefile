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

OPT ?= -O2
CFLAGS ?= $(OPT) -g
ALL_CFLAGS := -std=gnu11 -Wall -Wextra -Werror -pthread -D_GNU_SOURCE \
	-Iinclude -Ilib $(DEP_CFLAGS) $(CFLAGS) $(EXTRA_CFLAGS)
ALL_LDFLAGS := -pthread $(LDFLAGS)
ifneq ($(SAN),)
ALL_CFLAGS += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
ALL_LDFLAGS += -fsanitize=$(SAN)
endif

LIB_SRCS := $(sort $(wildcard lib/*.c))
SRC_SRCS := $(sort $(wildcard src/*.c))
TEST_SRCS := $(filter-out tests/test_util.c,$(sort $(wildcard tests/test_*.c)))
FUZZ_SRCS := $(sort $(wildcard fuzz/fuzz_*.c))

LIB_OBJS := $(LIB_SRCS:%.c=$(O)/%.o)
SRC_OBJS := $(SRC_SRCS:%.c=$(O)/%.o)
TEST_BINS := $(TEST_SRCS:tests/%.c=$(O)/tests/%)
LIBUZRAM := $(O)/libuzram.a
UZRAM := $(O)/uzram

.PHONY: all lib programs tests check run deps tsan asan valgrind format bench clean
all: $(LIBUZRAM) $(UZRAM) $(TEST_BINS)
lib: $(LIBUZRAM)
programs: $(UZRAM)
tests: $(TEST_BINS)

$(O)/%.o: %.c $(wildcard include/*.h lib/*.h src/*.h tests/*.h) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(LIBUZRAM): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

$(UZRAM): $(SRC_OBJS) $(LIBUZRAM)
	$(CC) $(ALL_LDFLAGS) -o $@ $(SRC_OBJS) $(LIBUZRAM) $(DEP_LIBS) -lm

$(O)/tests/%: $(O)/tests/%.o $(O)/tests/test_util.o $(LIBUZRAM)
	$(CC) $(ALL_LDFLAGS) -o $@ $< $(O)/tests/test_util.o $(LIBUZRAM) $(CMOCKA_LIBS) $(DEP_LIBS) -lm

# The one command CI runs: installs what is missing, builds plain and
# ASan+UBSan, runs unit, model and integration tests.
check: deps
	./scripts/check.sh

run: deps
	$(MAKE) programs
	./scripts/run.sh

deps:
	./scripts/deps.sh

asan:
	$(MAKE) O=build/asan SAN=address,undefined OPT=-O1 all

# ThreadSanitizer run of the concurrent tests.
tsan: deps
	$(MAKE) O=build/tsan SAN=thread CC=clang OPT=-O1 all
	./scripts/run-tests.sh build/tsan concurrent

valgrind: deps
	$(MAKE) O=build/valgrind OPT=-O1 all
	./scripts/run-tests.sh build/valgrind valgrind

bench: deps
	$(MAKE) programs
	./bench/run.sh

format:
	clang-format -i include/*.h lib/*.[ch] src/*.[ch] tests/*.[ch] $(wildcard fuzz/*.c bench/*.c)

clean:
	rm -rf build
