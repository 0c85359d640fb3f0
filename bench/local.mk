# sources of bench
# bench_adamw: AdamW parameters/s against measured host bandwidth (bench/README.md)
noinst_PROGRAMS += bench/bench_adamw
EXTRA_DIST += bench/torch_adamw_peer.py
bench_bench_adamw_SOURCES = bench/bench_adamw.c bench/bench_args.h
bench_bench_adamw_LDADD = librp.la
# bench_attention_documents: packed documents' attention cost against one document's (bench/README.md)
noinst_PROGRAMS += bench/bench_attention_documents
bench_bench_attention_documents_SOURCES = bench/bench_attention_documents.c bench/bench_args.h
bench_bench_attention_documents_LDADD = librp.la
# bench_block: one decoder block's forward and backward, op by op (bench/README.md)
noinst_PROGRAMS += bench/bench_block
bench_bench_block_SOURCES = bench/bench_block.c bench/bench_args.h
bench_bench_block_LDADD = librp.la -lm
# bench_moe_gemm: grouped expert GEMMs against one dense GEMM of the same total shape (bench/README.md)
noinst_PROGRAMS += bench/bench_moe_gemm
bench_bench_moe_gemm_SOURCES = bench/bench_moe_gemm.c bench/bench_args.h
bench_bench_moe_gemm_LDADD = librp.la -lm
EXTRA_DIST += bench/README.md
# bench_train_peer.sh: roundpipe's CPU executors against a PyTorch eager loop (bench/README.md)
EXTRA_DIST += bench/bench_train_peer.sh bench/torch_train_peer.py bench/qwen3-25m-config.json
# bench_nodes.sh: bytes per node per step against the rule, AdamW per node on 1, 2, 4 pseudo-nodes
EXTRA_DIST += bench/bench_nodes.sh bench/bench_checkpoint.sh
# configs and scripts bench/README.md's figures come from (plan, simulate, LoRA memory)
EXTRA_DIST += bench/moe/qwen3-235b-a22b-config.json bench/moe/qwen3-235b-a22b-fp8-config.json \
	bench/moe/qwen3-30b-a3b-config.json bench/paper/plan-gpt-oss-20b.sh \
	bench/paper/simulate-all.sh bench/paper/simulate-nodes.sh bench/lora/make_model.py \
	bench/lora/memory.sh bench/paper/gpt-oss-20b-config.json
EXTRA_DIST += bench/figures/issue33-trace-25m-1x2.png bench/figures/issue33-trace-25m-1x2-speculative.png
