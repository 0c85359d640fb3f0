# sources of bench
# bench_adamw: AdamW parameters/s against measured host bandwidth (bench/README.md)
noinst_PROGRAMS += bench/bench_adamw
bench_bench_adamw_SOURCES = bench/bench_adamw.c
bench_bench_adamw_LDADD = librp.la
EXTRA_DIST += bench/README.md
