/* Host memory of a training run: the parameter store's layout (built here
 * for the engine, run.c, and counted for `roundpipe plan`), which of
 * its ranges the executors pin for copies, and the totals a user sizes a
 * node (or a Slurm --mem) by. */
#ifndef RP_ENGINE_HOST_MEMORY_H
#define RP_ENGINE_HOST_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "device/device.h"
#include "engine/frozen_base.h"
#include "io/config.h"
#include "plan/plan.h"
#include "store/layout.h"

/* Offsets of the parameter store's regions, and the sizes they follow. */
typedef struct rp_param_store_map {
    size_t params;   /* the model state: per layer master, gradient, m, v (and compute) */
    size_t tied;     /* the tied LM head's gradient, one per pipeline */
    size_t group;    /* pipelines 1..P-1's gradients, gstride floats each */
    size_t emb_ids, emb_rows, emb_n; /* the embedding's gradient rows per pipeline */
    size_t ctrl;     /* the abort flag */
    size_t base;     /* LoRA: the frozen base converted once (engine/frozen_base.h) */
    size_t base_bytes;
    size_t tied_bytes, group_bytes, emb_rows_bytes;
    size_t gstride;  /* floats of one pipeline's gradients (goff[l]: layer l's offset) */
    int64_t emb_cap; /* rows a pipeline's tokens can touch: min(vocab, its tokens) */
    size_t bytes;    /* the whole store */
} rp_param_store_map;

/* The parameter store of a run with `pipelines` pipelines of
 * tokens_per_pipeline tokens each (per iteration): *layout (may be NULL:
 * only counted) and *map; goff (may be NULL) receives each layer's offset
 * in a pipeline's gradients. */
rp_status rp_param_store_layout(const rp_model_config *cfg, rp_dtype dtype, int pipelines,
                                int64_t tokens_per_pipeline, size_t base_bytes, size_t *goff,
                                rp_store_layout **layout, rp_param_store_map *map,
                                rp_error *err);

/* The rule for what executors pin of layer l's arrays (the rest of the
 * model state, master weights and AdamW moments, no copy touches): its
 * compute copy, which is uploaded, except the embedding's, which travels as
 * gathered rows unless it is a tied head's matrix; its gradient, which is
 * downloaded into, except the embedding's, which comes back as rows. */
static inline int rp_pin_layer_compute(int layer, int tied) { return layer > 0 || tied; }
static inline int rp_pin_layer_grad(int layer) { return layer > 0; }

/* What a run needs of a node's host memory. */
typedef struct rp_host_memory {
    size_t param_store; /* parameters, optimizer state, gradient areas (rp_param_store_layout)
                           and a LoRA base converted into the store */
    size_t activations; /* a segment's activation arena (depends on the plan) */
    size_t kept;        /* of it, the kept layers' inputs and saved areas (plan.h's kept) */
    int kept_layers;    /* the plan's kept */
    int kept_on_executor; /* they lie in the executors' own memory (rp_kept_on_executor):
                             nothing of them here (kept is 0) */
    size_t pinned;      /* of both, registered with every GPU for copies */
    int lora;           /* the model is LoRA's: adapters trained, a frozen base */
    size_t base_store;  /* LoRA: of param_store, the frozen base converted into it (a
                           mapped FP8 base: its odd tensors, frozen_base.h) */
    size_t base_mapped; /* LoRA: the frozen base read in place from the model's safetensors
                           files (the page cache's, one copy per node; not in the store) */
    size_t base_bf16;   /* LoRA, an FP8 base mapped (issue 36): the same tensors' bytes in
                           bf16, for comparison (0 otherwise) */
    size_t speculative_backup; /* --speculative-update on: the node's ranks' backups of the
                                  blocks' master, m and v (private memory, not the store; set
                                  by the engine, engine/speculative.c; 0 otherwise) */
} rp_host_memory;

/* Each layer's saved area as a kept layer holds it in the host store
 * (arena.h's kept_floats), for executors of `device` computing in dtype
 * microbatches of samples_per_micro sequences of seq_len tokens: a block's
 * rp_block_saved_floats_of, 0 for the embedding and the head; *out
 * (num_layers entries, freed by the caller). */
/* The host bytes a node's run may use (--recompute auto keeps activations
 * within them): limit_mib (--host-memory-limit-mib) when > 0, else this
 * machine's MemAvailable now; 0 when unknown. *from names which. */
int64_t rp_host_memory_limit(double limit_mib, const char **from);

/* 1 when executors of `device` keep a kept layer's activations in a pool
 * of their own memory (plan/cost.h's keep_on_executor, engine/executor.c):
 * devices the host does not address (GPUs), and CPU executors when the
 * environment sets RP_TEST_KEEP_ON_EXECUTOR=1 (that path tested on a
 * machine without a GPU); 0 when they read them where the host store holds
 * them (arena.h's kept). */
int rp_kept_on_executor(rp_device_kind device);

rp_status rp_host_kept_floats(rp_device_kind device, rp_dtype dtype, const rp_model_config *cfg,
                              int64_t samples_per_micro, int64_t seq_len, size_t **out,
                              rp_error *err);

/* The host memory of a run of `plan` (microbatches in all, over
 * `pipelines` pipelines, tokens_per_micro tokens each, recompute_layer as
 * --recompute layer, act_dtype as --activation-dtype, kept_floats from rp_host_kept_floats: may be NULL when
 * the plan keeps none; kept_on_executor from rp_kept_on_executor: then the
 * host store holds nothing of the kept layers), as the engine allocates and pins it; the events
 * region beside the activations (a few KiB) is left out. With LoRA
 * (cfg->lora.rank > 0) `base` is the run's frozen base, opened as train
 * opens it (rp_frozen_base_open): mapped, or converted into the store; it
 * is not used otherwise (may be NULL). */
rp_status rp_host_memory_count(const rp_model_config *cfg, rp_dtype dtype, int pipelines,
                               int microbatches, int64_t tokens_per_micro, const rp_plan *plan,
                               int recompute_layer, rp_dtype act_dtype,
                               const size_t *kept_floats, int kept_on_executor,
                               const rp_frozen_base *base,
                               rp_host_memory *out, rp_error *err);

/* The figures in words, as `roundpipe plan` and train's start-up print
 * them: "host memory per node: T in /dev/shm (model state and gradients
 * S[, the frozen base converted into it B], activations A[ of which K
 * kept by N blocks instead of recomputed][; kept by N blocks instead of
 * recomputed, in the executors' own memory])[ + the frozen
 * base B mapped read-only from the model's safetensors files (...) =
 * total][ + the speculative update's backup U in the ranks' own memory =
 * total]", sizes in GiB, or MiB below one GiB. */
void rp_host_memory_format(const rp_host_memory *hm, char *buf, size_t len);

#endif
