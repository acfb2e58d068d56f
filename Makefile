# sekv - one non-recursive Makefile. Objects under build/, binaries under bin/.
# make | make test | make asan | make bench | make bench-compare | make bench-qa | make bench-deps
# make deps | make model | make run | make clean

CC      ?= cc
CXX     ?= c++
CFLAGS  ?= -O2 -g
CXXFLAGS ?= -O2 -g
# always added, also when CFLAGS is given on the command line (make asan)
C_STD   = -std=c11 -D_GNU_SOURCE -Wall -Wextra -MMD -MP -I. -march=native -pthread
CXX_STD = -std=c++17 -Wall -Wextra -MMD -MP -I. -pthread
# cairo: the PNG plots of `sekv eval` (app/eval_plot.c only includes it)
CAIRO_CFLAGS := $(shell pkg-config --cflags cairo 2>/dev/null)
CAIRO_LIBS   := $(shell pkg-config --libs cairo 2>/dev/null || echo -lcairo)
# poppler-glib: PDF text (app/extract_pdf.c only includes it)
POPPLER_CFLAGS := $(shell pkg-config --cflags poppler-glib 2>/dev/null)
POPPLER_LIBS   := $(shell pkg-config --libs poppler-glib 2>/dev/null || echo -lpoppler-glib -lgobject-2.0 -lglib-2.0)
LDLIBS  = -lpcre2-8 -lsentencepiece -lstdc++ -llapacke -lopenblas -lsqlite3 -lncursesw -lcjson $(POPPLER_LIBS) $(CAIRO_LIBS) -lm -lpthread
BUILD  ?= build
BIN    ?= bin
# MODEL: a model name (a recipe in assets/recipes/; `make model` fetches it)
# or the path of a GGUF file; MODEL_PATH is the file it stands for (the one
# place a name is resolved: assets/fetch_model.sh --path).
MODEL  ?= qwen2.5-coder-0.5b-instruct
# The test suite's model: small, so `make test` stays well under 20 minutes
# (tests/run.c falls back to the same file when SEKV_MODEL is unset).
TEST_MODEL ?= gemma-3-270m
TEST_MODEL_PATH := $(shell sh assets/fetch_model.sh --path '$(TEST_MODEL)')
MODEL_PATH := $(shell sh assets/fetch_model.sh --path '$(MODEL)')

LIB_C   = $(wildcard engine/*/*.c store/*.c ui/*.c) $(filter-out app/main.c,$(wildcard app/*.c))
LIB_CC  = $(wildcard engine/*/*.cc)
LIB_OBJ = $(LIB_C:%.c=$(BUILD)/%.o) $(LIB_CC:%.cc=$(BUILD)/%.o)
TEST_OBJ = $(patsubst %.c,$(BUILD)/%.o,$(wildcard tests/*.c))

.PHONY: all test asan bench bench-compare bench-qa bench-deps deps model test-model run clean check-model
all: $(BIN)/sekv $(BIN)/sekv-tests $(BIN)/sekv-bench $(BIN)/sekv-membw $(BIN)/sekv-attn-dump \
	$(BIN)/sekv-tok-bench $(BIN)/sekv-quant-bench
	@echo "built $(BIN)/sekv (CPU backend; CUDA backend: not part of this build yet)"

$(BIN)/sekv: $(BUILD)/app/main.o $(BUILD)/libsekv.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(C_STD) -o $@ $^ $(LDLIBS)

$(BIN)/sekv-tests: $(TEST_OBJ) $(BUILD)/libsekv.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(C_STD) -o $@ $^ $(LDLIBS)

# Benchmarks (bench/): our engine's tokens/s and the machine's memory bandwidth.
$(BIN)/sekv-bench: $(BUILD)/bench/engine_bench.o $(BUILD)/libsekv.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(C_STD) -o $@ $^ $(LDLIBS)

# Tokenizer speed on megabyte documents (bench/tok_bench.c).
$(BIN)/sekv-tok-bench: $(BUILD)/bench/tok_bench.o $(BUILD)/libsekv.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(C_STD) -o $@ $^ $(LDLIBS)

# bench/quant_bench.c: matvec GB/s of each quant type and kernel set, the
# backend's decode and prefill matmuls (`./bin/sekv-quant-bench -t 2`).
$(BIN)/sekv-quant-bench: $(BUILD)/bench/quant_bench.o $(BUILD)/libsekv.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(C_STD) -o $@ $^ $(LDLIBS)

# bench/qa/attn_study.py: per-step attention mass of every global head.
$(BIN)/sekv-attn-dump: $(BUILD)/bench/qa/attn_dump.o $(BUILD)/libsekv.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(C_STD) -o $@ $^ $(LDLIBS)

$(BIN)/sekv-membw: $(BUILD)/bench/membw.o $(BUILD)/engine/base/clock.o
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(C_STD) -o $@ $^

$(BUILD)/libsekv.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# the one file that includes cairo.h (override: also under make asan's CFLAGS)
$(BUILD)/app/eval_plot.o: override CFLAGS += $(CAIRO_CFLAGS)
# the one file that includes poppler's and glib's headers
$(BUILD)/app/extract_pdf.o: override CFLAGS += $(POPPLER_CFLAGS)
# the tests' PDF fixtures are drawn with cairo
$(BUILD)/tests/pdf_fixture.o: override CFLAGS += $(CAIRO_CFLAGS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(C_STD) -c $< -o $@

$(BUILD)/%.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(CXX_STD) -c $< -o $@

deps:
	@sh tools/deps.sh

# MODEL=NAME fetches that recipe's model; `sh assets/fetch_model.sh --list`
# lists the names. Nothing to do (no download, no hashing) when it is there.
model:
	@sh assets/fetch_model.sh '$(MODEL)'

# the test suite's model (TEST_MODEL)
test-model:
	@sh assets/fetch_model.sh '$(TEST_MODEL)'

# The whole suite: unit tests, then integration tests with the real model.
test: deps test-model all
	SEKV_MODEL=$(TEST_MODEL_PATH) ./bin/sekv-tests

# Sanitizer build in build-asan/ and bin-asan/ (unit tests; the model tests
# run too, slowly).
asan: test-model
	$(MAKE) BUILD=build-asan BIN=bin-asan \
		CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer" \
		CXXFLAGS="-O1 -g -fsanitize=address,undefined" all
	LSAN_OPTIONS=suppressions=$(CURDIR)/tools/lsan.supp SEKV_MODEL=$(TEST_MODEL_PATH) ./bin-asan/sekv-tests $(T)

# bench/run.sh, SeKV decode speed against its ideal at ~30K tokens
# (bench/decode_speed.py, RATIO sekv_decode_vs_ideal), then the comparison
# with llama.cpp last (it ends with the RATIO lines).
bench: all model $(BIN)/sekv-bench $(BIN)/sekv-membw
	sh bench/run.sh
	python3 bench/decode_speed.py --model $(MODEL_PATH)
	sh bench/compare_llamacpp.sh -m '$(MODEL_PATH)'

# RIVAL_BIN=DIR compares with another build's DIR/sekv-bench instead of
# llama.cpp (e.g. the build before a change). MODEL=NAME|PATH: any GGUF;
# COMPARE_ARGS=--rival-only times llama.cpp alone (a model our engine
# cannot load yet).
bench-compare: all model $(BIN)/sekv-bench $(BIN)/sekv-membw
	RIVAL_BIN=$(RIVAL_BIN) sh bench/compare_llamacpp.sh -m '$(MODEL_PATH)' $(COMPARE_ARGS)

# QA benchmark (bench/qa/): 69 questions over licences and manuals of this
# Debian machine, full KV vs SeKV at 10%: answer accuracy, evidence
# recall@1/@3 and a BM25 baseline; records in build/bench-qa.jsonl. About
# 7 minutes on 2 cores; not part of `make test` or CI. BENCH_THREADS
# (default 2); QA_ARGS passes options (e.g. QA_ARGS="--limit 10").
bench-qa: all model
	python3 bench/qa/run_qa.py --model $(MODEL_PATH) $(QA_ARGS)

# llama.cpp through its Python binding, for bench-compare (builds llama.cpp
# from source, for AVX-512 without AMX where the CPU reports AMX; not used
# by CI). tools/bench_deps.sh.
bench-deps:
	@sh tools/bench_deps.sh

run: deps model all
	SEKV_MODEL=$(MODEL_PATH) sh tools/run_sample.sh

clean:
	rm -rf build build-asan bin bin-asan

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
