# Fuzzing the file parsers with libFuzzer (clang, found by configure as
# FUZZ_CC). `make fuzz` builds each target from the sources it needs and runs
# it for FUZZ_SECONDS, starting from the seed corpus in fuzz/corpus/<target>
# (new inputs go to fuzz/work/<target> in the build tree, crashes to
# fuzz/work/). Not part of `make check`.
FUZZ_SECONDS ?= 30
FUZZ_TARGETS = safetensors config npy
FUZZ_FLAGS = -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	-D_GNU_SOURCE -std=c11 -I$(top_srcdir)/include -I$(top_srcdir)/src -I$(top_builddir) \
	$(MPI_INCLUDE_CFLAGS) $(JSON_CFLAGS)
FUZZ_CORE_SRC = $(top_srcdir)/src/core/error.c $(top_srcdir)/src/core/dtype.c
FUZZ_safetensors_SRC = $(top_srcdir)/src/io/safetensors.c $(top_srcdir)/src/io/safetensors_header.c
FUZZ_config_SRC = $(top_srcdir)/src/io/config.c $(top_srcdir)/src/io/json_util.c \
	$(top_srcdir)/src/io/quant_modules.c \
	$(top_srcdir)/src/io/read_file.c
FUZZ_npy_SRC = $(top_srcdir)/src/io/npy.c $(top_srcdir)/src/io/npy_check.c

EXTRA_DIST += fuzz/fuzz_safetensors.c fuzz/fuzz_config.c fuzz/fuzz_npy.c \
	fuzz/corpus/safetensors/mixed.safetensors fuzz/corpus/safetensors/roundpipe.safetensors \
	fuzz/corpus/config/llama3_v4.json fuzz/corpus/config/llama3_v5.json \
	fuzz/corpus/config/qwen3_v5.json fuzz/corpus/config/qwen3_roundpipe.json \
	fuzz/corpus/npy/b1.npy fuzz/corpus/npy/i4.npy fuzz/corpus/npy/u2.npy \
	fuzz/corpus/npy/v2_i8.npy fuzz/corpus/npy/v3_u4.npy

fuzz: fuzz-local
fuzz-local:
	@if test -z "$(FUZZ_CC)"; then \
	  echo "make fuzz: no clang found by configure (set FUZZ_CC=clang); skipping fuzzing"; \
	  exit 0; \
	fi; \
	mkdir -p fuzz/work; \
	for t in $(FUZZ_TARGETS); do \
	  case $$t in \
	    safetensors) src="$(FUZZ_safetensors_SRC)";; \
	    config) src="$(FUZZ_config_SRC)";; \
	    npy) src="$(FUZZ_npy_SRC)";; \
	  esac; \
	  echo "  FUZZCC   fuzz/fuzz_$$t"; \
	  $(FUZZ_CC) $(FUZZ_FLAGS) $(top_srcdir)/fuzz/fuzz_$$t.c $$src $(FUZZ_CORE_SRC) \
	    $(JSON_LIBS) -lm -o fuzz/fuzz_$$t || exit 1; \
	  mkdir -p fuzz/work/$$t; \
	  echo "  FUZZ     fuzz_$$t for $(FUZZ_SECONDS) s"; \
	  ./fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	    -print_final_stats=1 -artifact_prefix=fuzz/work/$$t- \
	    fuzz/work/$$t $(top_srcdir)/fuzz/corpus/$$t 2> fuzz/work/$$t.log; \
	  rc=$$?; \
	  grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' fuzz/work/$$t.log; \
	  if test $$rc -ne 0; then \
	    echo "fuzz_$$t found a problem (exit $$rc); see fuzz/work/$$t.log"; \
	    tail -40 fuzz/work/$$t.log; exit 1; \
	  fi; \
	done

fuzz-clean:
	rm -rf fuzz/work fuzz/fuzz_safetensors fuzz/fuzz_config fuzz/fuzz_npy

.PHONY: fuzz fuzz-local fuzz-clean
