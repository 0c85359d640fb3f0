/* Writing checkpoints (checkpoints.h): the checkpoint directory locked
 * for the run and cleared of a killed run's half-written ones; the
 * checkpoint of step c, layer by layer, and its trainer state; the writer
 * thread that writes each layer as soon as it is final for c while
 * training goes on (the update that would change it waits: the update
 * gate); a segment's last checkpoint after it; the failures remembered. */
#include "engine/checkpoints.h"
#include "engine/node_sums.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "io/checkpoint_lock.h"
#include "io/output_path.h"
#include "io/saved_tensors.h"
#include "io/config.h"
#include "optim/lr.h"
#include "engine/run_impl.h"
#include "engine/lora_checkpoint.h"
#include "engine/checkpoint_contents.h"
#include "engine/checkpoint_steps.h"
#include "engine/protocol.h"
#include "engine/update_gate.h"
#include "optim/clip.h"

rp_status rp_checkpoint_dir_lock(const rp_train_options *o, MPI_Comm comm,
                                 rp_checkpoint_lock **lock, rp_error *err)
{
    *lock = NULL;
    if (!o->checkpoint_dir)
        return RP_OK;
    int rank;
    MPI_Comm_rank(comm, &rank);
    rp_status s = RP_OK;
    if (rank == 0) { /* the writer of every checkpoint */
        s = rp_output_dir_check("--checkpoint-dir", o->checkpoint_dir, err);
        if (s == RP_OK)
            s = rp_checkpoint_lock_take(o->checkpoint_dir, lock, err);
    }
    int ok = s == RP_OK, all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm);
    if (all)
        return RP_OK;
    rp_checkpoint_lock_release(lock);
    return s != RP_OK ? s : rp_error_echo(err, RP_ERR_INVALID_ARG, "rank 0 refused "
                                         "--checkpoint-dir %s", o->checkpoint_dir);
}

void rp_checkpoint_remove_killed_writes(const rp_train_options *o, const rp_logger *lg)
{
    char removed[8][32];
    int n = rp_checkpoint_remove_stale(o->checkpoint_dir, removed, 8);
    for (int i = 0; i < n && i < 8; i++)
        rp_log(lg, RP_LOG_WARN, "removed %s/%s, a checkpoint a killed run left half-written",
               o->checkpoint_dir, removed[i]);
    if (n > 8)
        rp_log(lg, RP_LOG_WARN, "removed %d more checkpoints killed runs left half-written",
               n - 8);
}

/* ---- the checkpoint of step c ------------------------------------------- */

/* A checkpoint being written: its tensor lists and where each layer's
 * tensors start in them; the model file's under transformers' names
 * (saved: gpt-oss's experts fused, io/saved_tensors.h), so that it loads
 * in transformers as --save's does. Pending (a lagged optimizer before its last step):
 * the state before the update of step c, and c's summed gradient, which a
 * resumed run applies as its first update. */
typedef struct ck {
    rp_checkpoint_writer *w;
    rp_tensor_ref *model, *optim, *grad;
    int nmodel, noptim, ngrad;
    rp_saved_tensors *saved; /* model.safetensors' list, from model */
    int *first; /* [nlayers + 1]: layer l's tensors are [first[l], first[l + 1]) of model */
    int pending;
    double t0;      /* begun */
    double writing; /* seconds spent writing (not waiting for layers) */
    int async;      /* written while training goes on */
    uint64_t held0; /* then: this rank's updates held before it */
} ck;

static void ck_free(ck *k)
{
    rp_checkpoint_abort(&k->w);
    rp_saved_tensors_free(&k->saved);
    free(k->model);
    free(k->optim);
    free(k->grad);
    free(k->first);
    memset(k, 0, sizeof *k);
}

static rp_status ck_begin(rp_engine *e, int64_t c, int pending, ck *k, rp_error *err)
{
    memset(k, 0, sizeof *k);
    k->t0 = rp_now();
    k->pending = pending;
    const rp_params *p = e->p;
    k->model = rp_params_master_tensors(p, &k->nmodel);
    k->optim = rp_checkpoint_optimizer_tensors(p, &k->noptim);
    k->grad = pending ? rp_checkpoint_gradient_tensors(p, &k->ngrad) : NULL;
    k->first = calloc((size_t)p->nlayers + 1, sizeof *k->first);
    if (!k->model || !k->optim || (pending && !k->grad) || !k->first) {
        ck_free(k);
        return rp_error_set(err, RP_ERR_NOMEM, "checkpoint of step %lld: the tensor lists",
                            (long long)c);
    }
    for (int l = 0; l < p->nlayers; l++)
        k->first[l + 1] = k->first[l] + p->layers[l].nparams;
    rp_status s = rp_saved_tensors_make(k->model, k->nmodel, &k->saved, err);
    if (s != RP_OK) {
        ck_free(k);
        return s;
    }
    int nsaved;
    const rp_tensor_ref *saved = rp_saved_tensors_list(k->saved, &nsaved);
    /* AdamW's state and a pending gradient keep roundpipe's names: only
     * roundpipe reads them */
    rp_checkpoint_file files[3] = {{"model.safetensors", saved, nsaved},
                                   {"optimizer.safetensors", k->optim, k->noptim},
                                   {RP_PENDING_FILE, k->grad, k->ngrad}};
    /* a full model's checkpoint is the model a resumed run starts from: its
     * tokenizer goes with it (a LoRA run's base keeps its own) */
    rp_checkpoint_content content = {files, pending ? 3 : 2, &p->cfg, e->model_config_text,
                                     e->lora ? NULL : e->companions};
    s = rp_checkpoint_begin(e->o->checkpoint_dir, c, &content, &k->w, err);
    if (s != RP_OK)
        ck_free(k);
    return s;
}

/* The bytes a layer of numel elements adds to a checkpoint: its master, m
 * and v (and pending gradient) in fp32. */
static uint64_t ck_layer_bytes(int pending, size_t numel)
{
    return (pending ? 4u : 3u) * (uint64_t)numel * 4u;
}

/* Layer l's master, m and v (and pending gradient), read now. */
static rp_status ck_layer(ck *k, int l, rp_error *err)
{
    double t0 = rp_now();
    int a = k->first[l], n = k->first[l + 1] - a, sa, sn;
    rp_status s = rp_saved_tensors_range(k->saved, a, n, &sa, &sn, err);
    if (s == RP_OK)
        s = rp_checkpoint_put(k->w, 0, sa, sn, err);
    if (s == RP_OK)
        s = rp_checkpoint_put(k->w, 1, a, n, err); /* m */
    if (s == RP_OK)
        s = rp_checkpoint_put(k->w, 1, k->nmodel + a, n, err); /* v */
    if (s == RP_OK && k->pending)
        s = rp_checkpoint_put(k->w, 2, a, n, err);
    k->writing += rp_now() - t0;
    return s;
}

/* trainer_state.json and the rename; the line saying so. */
static rp_status ck_finish(rp_engine *e, ck *k, int64_t c, int64_t adam, float coef,
                           rp_error *err)
{
    const rp_train_options *o = e->o;
    json_object *st = json_object_new_object();
    json_object_object_add(st, "format", json_object_new_int(RP_CHECKPOINT_FORMAT));
    json_object_object_add(st, "roundpipe_version", json_object_new_string(rp_version_string()));
    json_object_object_add(st, "step", json_object_new_int64(c));
    json_object_object_add(st, "adam_step", json_object_new_int64(adam));
    json_object_object_add(st, "samples_seen", json_object_new_int64(c * o->batch_size));
    json_object_object_add(st, "seed", json_object_new_uint64(o->seed));
    json_object_object_add(st, "data", json_object_new_string(o->data));
    json_object_object_add(st, "options", rp_checkpoint_semantic_options(o));
    if (!e->lora) /* what the run's --save writes, whichever run resumes from here */
        json_object_object_add(st, "model_dtype",
                               json_object_new_string(rp_dtype_name(e->p->loaded_dtype)));
    rp_status s = RP_OK;
    if (e->lora) /* the adapters' settings and the base they are trained on */
        s = rp_lora_checkpoint_state(st, &e->p->cfg, o, e->by_checkpoint_writer.lora_base_hash,
                                     err);
    if (k->pending) { /* the weights are of step c - 1; c's update follows on resume */
        json_object *pu = json_object_new_object();
        json_object_object_add(pu, "step", json_object_new_int64(c));
        json_object_object_add(pu, "clip_coef", json_object_new_double((double)coef));
        json_object_object_add(pu, "gradient", json_object_new_string(RP_PENDING_FILE));
        json_object_object_add(st, "pending_update", pu);
    }
    char dir[4200];
    double t0 = rp_now();
    if (s == RP_OK)
        s = rp_checkpoint_finish(&k->w, st, (int)o->keep_checkpoints, dir, sizeof dir, err);
    json_object_put(st);
    k->writing += rp_now() - t0;
    if (s == RP_OK) {
        double mib = 0;
        for (int l = 0; l < e->p->nlayers; l++)
            mib += (double)ck_layer_bytes(k->pending, e->p->layers[l].numel) / 1048576.0;
        char how[128] = "";
        if (k->async)
            snprintf(how, sizeof how, ", while training went on: %.2f s writing, updates held "
                     "%.3f s for it", k->writing,
                     (double)(atomic_load(&e->by_optimizer.ck_held_ns) - k->held0) / 1e9);
        rp_log(e->lg, RP_LOG_INFO, "checkpoint of step %lld written: %s (%.1f MiB in %.2f s%s)",
               (long long)c, dir, mib, rp_now() - k->t0, how);
    }
    ck_free(k);
    return s;
}

/* The checkpoint of step c could not be written (a full disk, a directory
 * gone, a diverged update): said now, the run goes on to its other outputs
 * and ends with an error (rp_checkpoint_failures). */
static void ck_not_written(rp_engine *e, int64_t c, const rp_error *why)
{
    rp_log(e->lg, RP_LOG_ERROR, "checkpoint of step %lld not written: %s; the older checkpoints "
           "are kept, training and the other outputs go on, and the run will end with an error",
           (long long)c, why->msg);
    if (!e->by_checkpoint_writer.ck_failed) {
        e->by_checkpoint_writer.ck_failed = c;
        e->by_checkpoint_writer.ck_error = *why;
    }
}

rp_status rp_checkpoint_failures(const rp_engine *e, rp_error *err)
{
    if (!e->by_checkpoint_writer.ck_failed)
        return RP_OK;
    return rp_error_set(err, RP_ERR_IO,
                        "--checkpoint-dir %s: the checkpoint of step %lld was "
                        "not written: %.700s",
                        e->o->checkpoint_dir, (long long)e->by_checkpoint_writer.ck_failed,
                        e->by_checkpoint_writer.ck_error.msg);
}

/* The checkpoint writer's span of layer l of step c, written since t0: the
 * trace plot names the gap a checkpoint makes between steps from these. */
static void trace_layer_written(rp_engine *e, int l, int64_t c, uint64_t t0)
{
    if (!e->trace)
        return;
    char span[64];
    snprintf(span, sizeof span, "write layer %d (step %lld)", l, (long long)c);
    rp_trace_span(e->trace, RP_TRACK_CHECKPOINT, span, t0, rp_trace_now_ns());
}

rp_status rp_checkpoint_save(rp_engine *e, MPI_Comm comm, rp_error *err)
{
    rp_status s = RP_OK;
    if (e->nd.world_rank == 0 &&
        e->by_checkpoint_writer.ck_written == e->it_last) /* written while it ran */
        return rp_run_agree(e, s, comm, err);
    int nodes = e->nd.nodes > 1;
    if (nodes) /* each node keeps its slices' state: all of it on node 0 */
        RP_TRY(rp_run_agree(
            e, rp_node_collect(e, 1, rp_gate_checkpoint_pending(e, e->it_last), err), comm, err));
    if (e->nd.world_rank == 0) { /* every node holds the same state: node 0's */
        ck k;
        int pending = rp_gate_checkpoint_pending(e, e->it_last);
        s = ck_begin(e, e->it_last, pending, &k, err);
        /* training waits: how far it is, when that takes long */
        uint64_t total = 0, done = 0;
        for (int l = 0; l < e->p->nlayers; l++)
            total += ck_layer_bytes(k.pending, e->p->layers[l].numel);
        rp_work_lines lines;
        char what[64];
        snprintf(what, sizeof what, "writing the checkpoint of step %lld", (long long)e->it_last);
        rp_work_lines_start(&lines, e->lg, rp_engine_tells_work(e), what);
        for (int l = 0; s == RP_OK && l < e->p->nlayers; l++) {
            uint64_t t0 = e->trace ? rp_trace_now_ns() : 0;
            if ((s = ck_layer(&k, l, err)) == RP_OK)
                trace_layer_written(e, l, e->it_last, t0);
            done += ck_layer_bytes(k.pending, e->p->layers[l].numel);
            if (s == RP_OK)
                rp_work_lines_told(&lines, done, total);
        }
        if (s == RP_OK)
            s = ck_finish(e, &k, e->it_last, e->by_optimizer.adam_step, e->by_optimizer.lag_coef,
                          err);
        ck_free(&k);
        if (s != RP_OK) {
            ck_not_written(e, e->it_last, err);
            s = RP_OK;
        }
    }
    s = rp_run_agree(e, s, comm, err);
    if (nodes) /* written: node 0 keeps its own slices again */
        rp_node_release_others(e);
    return s;
}

/* ---- written while training goes on ------------------------------------- */

int rp_checkpoint_writer_needed(const rp_engine *e)
{
    return e->nd.node == 0 && rp_checkpoint_due_in_segment(e);
}

/* The updates applied once step `last` is done: the count at the segment's
 * start plus each step since with a counted target (a pending update of a
 * resumed run first). */
static int64_t adam_after(const rp_engine *e, int64_t last)
{
    int64_t a = e->adam_first;
    int64_t from = rp_engine_resumes_pending(e) ? e->resume_step : e->it_first;
    for (int64_t t = from; t <= last; t++)
        a += rp_engine_counted(e, t) > 0;
    return a;
}

/* Step c's layers in the order their state becomes ready, which is the
 * order the next updates need them: bottom up when the updates follow a
 * global norm (by need), otherwise top down as the gradients land. */
static int ck_layer_at(const rp_engine *e, int i)
{
    int bottom_up = rp_gate_order_of(e) == RP_GATE_BY_NEED;
    return bottom_up ? i : e->num_layers - 1 - i;
}

static rp_status write_one(rp_engine *e, int64_t c, rp_error *err)
{
    char who[64];
    snprintf(who, sizeof who, "checkpoint writer, step %lld", (long long)c);
    int pending = rp_gate_checkpoint_pending(e, c);
    ck k;
    rp_error why = {0}; /* the checkpoint's failure, which is not the run's */
    rp_status w = ck_begin(e, c, pending, &k, &why);
    k.async = 1;
    k.held0 = atomic_load(&e->by_optimizer.ck_held_ns);
    rp_status s = RP_OK;
    float coef = 1.0f;
    if (pending && e->o->grad_clip > 0) { /* before any update of c: its norms still there */
        double total, norm;
        s = rp_gate_wait_global_sumsq(e, c, who, &total, err);
        if (s == RP_OK)
            s = rp_clip_coef(total, e->o->grad_clip, &norm, &coef, err);
    }
    /* test hook: a slow disk, RP_FAULT_CHECKPOINT_LAYER_MS=N per layer */
    const char *slow = getenv("RP_FAULT_CHECKPOINT_LAYER_MS");
    for (int i = 0; s == RP_OK && i < e->num_layers; i++) {
        int l = ck_layer_at(e, i);
        s = rp_gate_wait_checkpoint_state(e, l, c, pending, who, err);
        if (s == RP_OK && slow && atoi(slow) > 0)
            usleep((useconds_t)atoi(slow) * 1000);
        uint64_t t0 = e->trace ? rp_trace_now_ns() : 0;
        if (s == RP_OK && w == RP_OK && (w = ck_layer(&k, l, &why)) != RP_OK)
            ck_free(&k);
        if (s == RP_OK && w == RP_OK)
            trace_layer_written(e, l, c, t0);
        if (s == RP_OK) /* written or not: the held updates go on */
            rp_proto_publish_written(e, l, c);
    }
    if (s != RP_OK) {
        ck_free(&k);
        return s;
    }
    if (w == RP_OK)
        w = ck_finish(e, &k, c, adam_after(e, pending ? c - 1 : c), coef, &why);
    if (w == RP_OK)
        e->by_checkpoint_writer.ck_written = c;
    else
        ck_not_written(e, c, &why);
    return RP_OK;
}

void *rp_checkpoint_writer_main(void *arg)
{
    rp_engine *e = arg;
    rp_error err = {0};
    rp_status s = RP_OK;
    for (int64_t c = e->it_first; s == RP_OK && c < e->it_last; c++)
        if (rp_checkpoint_in_segment(e, c))
            s = write_one(e, c, &err);
    if (s != RP_OK && s != RP_STOP) /* a stop before c: that checkpoint is not needed */
        rp_engine_fail(e, s, &err);
    return NULL;
}
