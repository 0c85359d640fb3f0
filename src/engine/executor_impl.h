/* The executor's state, shared by its job runner (executor.c), the
 * forward and backward of a stage (stage_compute.c), the gradients'
 * download (gradient_download.c) and its stage buffers (stage_buffers.c).
 * Internal to the engine. */
#ifndef RP_ENGINE_EXECUTOR_IMPL_H
#define RP_ENGINE_EXECUTOR_IMPL_H

#include "device/backend.h"
#include "engine/engine_impl.h"
#include "engine/memory_model.h"

typedef struct stage_buf {
    void *w;             /* weights of the stage's layers (+ a tied LM head's matrix), in
                          * the compute dtype of the host store's copy */
    size_t *off;         /* [nlayers + 1] element offset of layer first+i; last entry: tied
                          * matrix (the gradient buffer has the same offsets in fp32) */
    size_t *boff;        /* [nlayers] LoRA: element offset of layer first+i's frozen base,
                          * past the trainable part (rp_stage_base_floats) */
    rp_xfer_req *req;    /* [rp_stage_max_reqs(e)] */
    int nreq;
    int64_t t;           /* iteration, pipeline and job the buffer holds (t = 0: nothing) */
    int g, j;
    /* Uploads stream piece by piece: piece i < n is layer first+i, piece n
     * (a tied head only) the embedding as the LM head; a piece's trainable
     * weights are submitted once its version is in (the update gate), its
     * frozen base at once, and compute of a layer waits for its pieces only */
    rp_engine *e;
    rp_job job;
    rp_xfer_class cls;   /* the class of the pieces still to submit */
    int *piece_of;       /* [rp_stage_max_reqs(e)] the piece each request uploads */
    unsigned char *pending; /* [nlayers + 1] the piece waits for its version */
    unsigned char *ready;   /* [nlayers] layer first+i's pieces are on the device */
    _Atomic int *left;   /* [nlayers] layer first+i's uploads not done (a tied head's matrix
                            counts with the head), plus one while a prefetched job has not
                            started: at 0 the job says it uploaded the layer */
    /* a stage with the embedding holds only the rows its pipeline's tokens
     * read: their sorted ids, gathered on the host into `gather` (pinned)
     * and uploaded; tokens are renumbered to positions in `rows` */
    int32_t *rows;
    int64_t nrows;
    void *gather; /* compute dtype (a frozen base read in place: the base's dtype) */
    int gather_pinned;
} stage_buf;

/* What a staged save hands its consumer once it has landed
 * (staged_saves.c): nothing, a forward stage's output, a backward stage's
 * input gradient, of (stage, microbatch, iteration). */
typedef enum rp_save_publish_kind {
    RP_SAVE_PUBLISH_NONE = 0,
    RP_SAVE_PUBLISH_FWD_OUT,
    RP_SAVE_PUBLISH_BWD_OUT
} rp_save_publish_kind;
typedef struct rp_save_publish {
    rp_save_publish_kind kind;
    int stage, micro;
    int64_t t;
} rp_save_publish;

typedef struct executor {
    rp_engine *e;
    rp_device *dev;
    int segment_pinned;  /* the segment's activations registered with the device */
    rp_xfer *xfer;
    stage_buf buf[2];
    int cur;             /* buffer of the running job */
    int64_t micro;       /* the microbatch the running job computes (node-local) */
    void *scratch;       /* the running job's alone: its workspace, then its gradients
                            (executor.c's scratch_begin points the three below into it) */
    float *grads;        /* gradients of the stage, same offsets as the weights (a tied
                            LM head's past the layers, as its matrix in the weights) */
    void *grads_bf16;    /* --grad-dtype bf16: the gradients rounded for the download,
                            same offsets (NULL with fp32) */
    float **acts;        /* [nlayers + 1] activation buffers of A floats */
    float *act_grad;     /* the gradient of the activations flowing down, A floats */
    void *act_narrow;    /* --activation-dtype bf16: A bf16 at the start of the running
                            job's workspace (free between layer calls), where an activation
                            is rounded and narrowed on its way to the host store and widened
                            on its way back (NULL with fp32) */
    float **saved;       /* [nsaved] what a block's forward keeps for its backward: one per
                            layer of the largest tail or backward stage (a backward stage
                            needs one with layer-grain recompute); forward jobs reuse the
                            first */
    int nsaved;
    float *kept_pool;    /* the kept layers' inputs and saved areas (plan.h's kept) for every
                            microbatch of the pipeline, on executors that keep them
                            (host_memory.h's rp_kept_on_executor; NULL: none, or read where
                            the arena holds them): stage_compute.c's pool_slot */
    size_t *kept_at;     /* [nlayers] where each kept layer's slots start in it, in floats */
    float *workspace;    /* scratch of the job's layer calls (its layers' largest) */
    void *base_scratch;  /* LoRA on an FP8 base: one block's base dequantised in the compute
                            dtype for its use (stage_buffers.c), the largest block's size,
                            shared by every job (NULL: no block is dequantised per use) */
    int base_layer;      /* the block whose base base_scratch holds (-1: none) */
    int32_t *tokens, *targets; /* device copies of the microbatch's token ids and targets */
    uint8_t *mask;
    int32_t *segments;   /* --documents: its segment starts on the device (NULL: none) */
    int32_t *host_tokens, *host_targets, *host_segments; /* host staging */
    uint8_t *host_mask;
    rp_xfer_req *grad_requests; /* [nlayers + 1] downloads */
    /* the last job's gradient download, under way while the next job starts
     * (gradient_download.c): its requests, the layer each brings, the
     * requests each layer still waits for (a tied head: its own and the
     * tied part) and the pipeline and iteration it announces */
    int grads_pending;
    int *grad_layer;        /* [nlayers + 1] */
    _Atomic int *grad_left; /* [nlayers] */
    int grad_first, grad_g;
    int64_t grad_t;
    /* the load-balancing loss of a mixture of experts (engine/router_aux.h):
     * its gradient per probability for the running microbatch, on the host
     * and the device (one buffer on host-addressable devices), and a
     * block's router statistics on the device before their download (NULL
     * there: written straight into the arena) */
    float *host_aux_grad, *aux_grad, *router_stats;
    /* staged saves (memory_model.h's rp_saves_staged; save_slot[0] NULL:
     * none): the slots on the device, each's download and what it
     * publishes once landed, and the slot the next save takes */
    void *save_slot[RP_SAVE_SLOTS];
    rp_xfer_req save_req[RP_SAVE_SLOTS];
    rp_save_publish save_publish[RP_SAVE_SLOTS];
    int save_next;
    /* the device is ordered by events (backend.h): no host wait after a
     * layer; copies and kernel ops are ordered on the device */
    int by_events;
    /* the layer clock (layer_clock.c): the pairs of marks not read yet,
     * oldest first, the measurement each adds to and its iteration; with
     * --trace, the host's time of the anchor mark the calls' spans on the
     * device's track are placed from (0: none) */
    int clock_first, clock_n;
    int clock_at[RP_DEVICE_MARKS / 2];
    int64_t clock_it[RP_DEVICE_MARKS / 2];
    uint64_t clock_anchor_ns;
    char name[128];      /* "2 (F2, layers 3-5) of iteration 7", for messages */
    size_t device_bytes; /* allocated on the device: what the planner counts for a plan */
} executor;

static inline size_t rp_layer_numel(const rp_engine *e, int l)
{
    return e->p->layers[l].numel;
}

/* Move bytes between host and device now, through the transfer engine's
 * queue of the given class (so a transfer of a higher class goes first). */
rp_status rp_exec_move(executor *x, void *dst, const void *src, size_t bytes, rp_xfer_class cls,
                       const char *tag, rp_error *err);

/* ---- staged saves (staged_saves.c) ---------------------------------------- */

/* Save the activation at dev (act_floats fp32 on the device) into host in
 * dtype (fp32, or the activation dtype it was rounded to) through the next
 * staging slot, and return with its download under way; `publish` (may be
 * NULL) is published once it has landed. */
rp_status rp_exec_save_staged(executor *x, void *host, const float *dev, rp_dtype dtype,
                              const char *tag, const rp_save_publish *publish, rp_error *err);
/* Hand a save to its consumer: publish p's event (nothing for NULL or
 * RP_SAVE_PUBLISH_NONE). */
void rp_exec_publish(rp_engine *e, const rp_save_publish *p);
/* Wait until every staged save has landed (the end of the run); the first
 * failure, if any. */
rp_status rp_exec_saves_landed(executor *x, rp_error *err);

/* ---- the layer times for the re-plan (layer_clock.c) ---------------------- */

/* A layer call of the running job starts (after its weights are in) and
 * stops (after its kernel ops are issued; on a device not ordered by
 * events, after rp_device_sync): backward 0 a forward, 1 a backward (the
 * head's forward and backward, one call, count as backward), in iteration
 * t. Nothing waits on the host, except start when hundreds of calls are
 * still unread. */
rp_status rp_layer_clock_start(executor *x, rp_error *err);
rp_status rp_layer_clock_stop(executor *x, int l, int backward, int64_t t, rp_error *err);
/* Adds the calls whose time the device has, to e->by_executor's
 * measurements; with `wait` every call (before the re-plan reads them).
 * With --trace each also becomes a span on the device's track. */
rp_status rp_layer_clock_settle(executor *x, int wait, rp_error *err);
/* With --trace: the anchor the device's spans are placed from, a mark
 * recorded with the device idle (after a sync), at a known host time.
 * Nothing without a trace. */
rp_status rp_layer_clock_anchor(executor *x, rp_error *err);

/* ---- stage buffers (stage_buffers.c) ------------------------------------- */

/* Uploads of one stage: a request per layer, one per frozen base tensor
 * (LoRA), and a tied head's matrix. */
size_t rp_stage_max_reqs(const rp_engine *e);

/* Elements of layer l a stage holds on the device (weights, and gradient
 * when it trains): the embedding's rows a batch can read
 * (e->emb_device_rows), never its whole table; a layer's numel otherwise. */
size_t rp_stage_layer_elements(const rp_engine *e, int l);

/* Does this job need the tied embedding matrix as its LM head? */
int rp_stage_needs_tied(const rp_engine *e, const rp_job *job);

/* Floats of the job's stage on the device (its layers, each rounded up to
 * 16 floats, and a tied head's matrix); off[i] (when not NULL) the offset of
 * layer first+i, off[num_layers] the tied matrix's. */
size_t rp_stage_floats(const rp_engine *e, const rp_job *job, size_t *off);

/* LoRA: elements of the job's frozen bases, laid out after
 * rp_stage_floats's (boff[i], when not NULL, the offset of layer first+i's);
 * 0 without LoRA or with a base read in place (e->base_in_place: then a
 * stage with the embedding gathers its rows in the base's dtype into
 * `gather` and reads them there). */
size_t rp_stage_base_floats(const rp_engine *e, const rp_job *job, size_t *boff);

/* Job j of pipeline g in iteration t starts: its weights go to
 * x->buf[x->cur] (the buffer the previous job began to prefetch them into,
 * or this one), each layer as soon as its version is in, and the next job's
 * prefetch begins in the other buffer. Waits for nothing, except with a
 * lagged optimizer (rp_gate_weights_before_compute) for every version. */
rp_status rp_stage_acquire(executor *x, const rp_job *job, int64_t t, int g, int j,
                           rp_error *err);

/* Before the running job computes layer l: wait until l's weights (a
 * tied head's matrix with the head) are on the device, submitting what has
 * landed meanwhile, of this job and of the next one's prefetch. Ordered by
 * events (x->by_events with asynchronous copies), the host waits only until
 * their copies are issued and the device's compute waits for them. */
rp_status rp_stage_wait_layer(executor *x, const rp_job *job, int l, rp_error *err);

/* Token ids to positions in the stage's embedding rows (all present: the
 * rows are this pipeline's tokens). */
void rp_stage_renumber(const stage_buf *b, int32_t *ids, int64_t count);

/* The stage's gradient buffer of layer l (fp32, the weights' offsets). */
static inline float *rp_exec_layer_grad(executor *x, const rp_job *job, int l)
{
    return x->grads + x->buf[x->cur].off[l - job->first];
}

/* The tied LM head's gradient [vocab, hidden]: in the gradient buffer past
 * the stage's layers, where the weights buffer holds the tied matrix. */
static inline float *rp_exec_tied_grad(executor *x, const rp_job *job)
{
    size_t vh = (size_t)(x->e->p->cfg.vocab_size * x->e->hidden);
    return x->grads + (rp_stage_floats(x->e, job, NULL) - vh);
}

/* ---- one microbatch m of a job's stage (stage_compute.c) ------------------ */

/* A forward job: its input from the stage below (or the tokens), its
 * layers, the activation checkpoints it saves, its output. */
rp_status rp_stage_forward(executor *x, const rp_job *job, int64_t t, int m, rp_error *err);

/* The tail: its blocks' forward, the head's loss (scaled by `scale`, one
 * over the step's counted targets) and backward, its blocks' backward. */
rp_status rp_stage_tail(executor *x, const rp_job *job, int64_t t, int m, float scale,
                        rp_error *err);

/* A backward job: its layers recomputed from their checkpoint, then their
 * backward from the gradient the stage above handed down. */
rp_status rp_stage_backward(executor *x, const rp_job *job, int64_t t, int m, rp_error *err);

/* ---- after a tail or backward job's microbatches (gradient_download.c) ---- */

/* Start the download of the job's gradients into pipeline g's host buffers
 * (a tail with a tied LM head: also its part of the embedding's gradient)
 * and return: each layer is announced to the optimizer as soon as it has
 * landed (on the transfer engine's thread), while the next job starts
 * (--grad-dtype bf16 with synchronous copies: the job waits, widening and
 * announcing each layer as it lands).
 * Summing over the pipelines, the tied part and the norms are the
 * optimizer's (optimizer.c). */
rp_status rp_stage_download_grads(executor *x, const rp_job *job, int64_t t, int g,
                                  rp_error *err);

/* Wait until the download started last is down (before anything writes the
 * scratch that holds the gradients on the device, and at the end of the
 * run); its first failure, if any. */
rp_status rp_stage_grads_landed(executor *x, rp_error *err);

#endif
