# softrnic: a thin wrapper over CMake.
#
#   make          check deps, configure build/ with gcc, build
#   make test     the above + ctest; then ASan+UBSan (build-asan/) + ctest
#                 (compat tests with the sanitizer runtimes preloaded);
#                 then a clang build (build-clang/, compile only), then a
#                 short libFuzzer run over the wire decoders (build-fuzz/)
#   make conformance  build, then rdma-core's own pyverbs suite through
#                 `softrnic run` (unpacked into build/conformance/; per-module
#                 results; also run by make test as ctest compat/rdma_core_suite)
#   make interop  build, then the interop suite against Linux siw in a qemu
#                 guest (tests/interop/run.sh, docs/INTEROP.md). make test
#                 runs it too, as ctest interop/siw, where it can (root;
#                 qemu, installed if missing), and says why it skips if not.
#   make demo     build, then show the device and run the verbs demo
#   make bench    softrnic beside raw TCP, as ratios (bench/README.md)
#   make clean    remove all build trees
#
# The steps run in order and stop at the first failure. Parallelism lives
# inside cmake --build (JOBS), so this file itself never runs in parallel.

JOBS        ?= 2
BUILD       ?= build
ASAN_BUILD  ?= build-asan
CLANG_BUILD ?= build-clang
CMAKE       ?= cmake
CTEST       ?= ctest
CTEST_ARGS  ?=

# Sanitizer run settings: leaks are errors, UB halts with a stack trace.
SAN_ENV := ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=1:strict_string_checks=1:halt_on_error=1 \
           UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

MAKEFLAGS += --no-print-directory

.NOTPARALLEL:
.PHONY: all build deps test test-gcc test-asan test-clang test-fuzz conformance interop demo bench clean

all: build

deps:
	@scripts/deps.sh

# Re-running the configure step is cheap and picks up new options; CMake
# rewrites nothing that did not change.
build: deps
	$(CMAKE) -S . -B $(BUILD) -DCMAKE_C_COMPILER=gcc
	$(CMAKE) --build $(BUILD) -j$(JOBS)

test: test-gcc test-asan test-clang test-fuzz

test-gcc: build
	cd $(BUILD) && $(CTEST) --output-on-failure $(CTEST_ARGS)

# The compat/ tests run unmodified Debian programs through `softrnic run`;
# an ASan-instrumented libibverbs.so.1 inside an uninstrumented program needs
# the sanitizer runtimes preloaded ahead of everything else, and leak reports
# about those programs' own allocations are not ours, so they run with the
# runtimes in LD_PRELOAD and leak detection off.
ASAN_PRELOAD = $(shell gcc -print-file-name=libasan.so):$(shell gcc -print-file-name=libubsan.so)

test-asan: deps
	$(CMAKE) -S . -B $(ASAN_BUILD) -DCMAKE_C_COMPILER=gcc -DSOFTRNIC_SANITIZE=ON
	$(CMAKE) --build $(ASAN_BUILD) -j$(JOBS)
	cd $(ASAN_BUILD) && $(SAN_ENV) $(CTEST) --output-on-failure -E '^compat/' $(CTEST_ARGS)
	cd $(ASAN_BUILD) && LD_PRELOAD=$(ASAN_PRELOAD) ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		$(CTEST) --output-on-failure -R '^compat/' $(CTEST_ARGS)

# Compile only: -Werror in CMakeLists.txt makes this the clang-clean check.
test-clang: deps
	$(CMAKE) -S . -B $(CLANG_BUILD) -DCMAKE_C_COMPILER=clang
	$(CMAKE) --build $(CLANG_BUILD) -j$(JOBS)

# Every wire decoder under libFuzzer for a short run (a longer one:
# bash tests/fuzz/run.sh SECONDS).
test-fuzz: deps
	bash tests/fuzz/run.sh 20

# rdma-core's test suite (docs/COMPAT.md; expectations in
# tests/compat/rdma_core_expected.txt). MODULES=... runs only those.
conformance: build
	bash tests/compat/rdma_core_suite.sh $(BUILD) $(MODULES)

# Interop with the kernel's soft-iWARP (docs/INTEROP.md). A skip (exit 77:
# not root, no qemu, no guest) is an error here, since it was asked for.
interop: build
	bash tests/interop/run.sh $(BUILD)

demo: build
	$(BUILD)/bin/softrnic run -- ibv_devinfo -v
	@if [ -x $(BUILD)/bin/softrnic-demo ]; then \
		echo "$(BUILD)/bin/softrnic run -- $(BUILD)/bin/softrnic-demo"; \
		$(BUILD)/bin/softrnic run -- $(BUILD)/bin/softrnic-demo; \
	else \
		echo "(no demo/demo.c yet: softrnic-demo skipped)"; \
	fi
	bash demo/net-demo.sh $(BUILD)

# Side-by-side benchmarks (bench/README.md): never part of make test.
bench: build
	bench/run.sh
	bench/shm.sh

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(CLANG_BUILD) build-fuzz
