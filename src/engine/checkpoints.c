/* Checkpoints of a training run (see checkpoints.h). */
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
#include "io/config.h"
#include "optim/lr.h"
#include "engine/run_impl.h"
#include "engine/lora_checkpoint.h"
#include "engine/checkpoint_steps.h"
#include "engine/protocol.h"
#include "engine/update_gate.h"
#include "optim/clip.h"

#define RP_CHECKPOINT_FORMAT 1

/* The options that change the results: a resumed run must have the same.
 * (Rank count, --plan, --recompute, --threads, --timeout, --trace, --log
 * and the like may differ.) One definition, for writing and checking. */
static json_object *semantic_options(const rp_train_options *o)
{
    json_object *j = json_object_new_object();
    json_object_object_add(j, "seq_len", json_object_new_int64(o->seq_len));
    json_object_object_add(j, "batch_size", json_object_new_int64(o->batch_size));
    json_object_object_add(j, "microbatches",
                           json_object_new_int64(o->microbatches ? o->microbatches
                                                                 : o->batch_size));
    /* the pipelines of every node: results depend on their total only */
    int64_t nodes = o->nodes > 1 ? o->nodes : 1;
    json_object_object_add(j, "pipelines", json_object_new_int64((int64_t)o->pipelines * nodes));
    json_object_object_add(j, "steps", json_object_new_int64(o->steps));
    json_object_object_add(j, "lr", json_object_new_double(o->lr));
    json_object_object_add(j, "min_lr", json_object_new_double(o->min_lr));
    json_object_object_add(j, "warmup_steps", json_object_new_int64(o->warmup_steps));
    json_object_object_add(j, "lr_schedule", json_object_new_string(rp_lr_kind_name(o->schedule)));
    json_object_object_add(j, "weight_decay", json_object_new_double(o->weight_decay));
    json_object_object_add(j, "beta1", json_object_new_double(o->beta1));
    json_object_object_add(j, "beta2", json_object_new_double(o->beta2));
    json_object_object_add(j, "eps", json_object_new_double(o->eps));
    json_object_object_add(j, "grad_clip", json_object_new_double(o->grad_clip));
    json_object_object_add(j, "dtype", json_object_new_string(o->dtype == RP_BF16 ? "bf16"
                                                                                : "fp32"));
    json_object_object_add(j, "shuffle", json_object_new_boolean(o->shuffle));
    if (o->shuffle) /* the seed draws the order of the epochs still to come */
        json_object_object_add(j, "shuffle_seed", json_object_new_uint64(o->seed));
    json_object_object_add(j, "grad_dtype", json_object_new_string(o->grad_dtype == RP_BF16 ? "bf16"
                                                                                         : "fp32"));
    json_object_object_add(j, "loss_mask", json_object_new_boolean(o->loss_mask != NULL));
    json_object_object_add(j, "documents", json_object_new_boolean(o->documents != NULL));
    json_object_object_add(j, "optimizer_lag", json_object_new_int(o->optimizer_lag));
    json_object_object_add(j, "router_aux_coef", json_object_new_double(o->router_aux_coef));
    return j;
}

/* The model config's fields that define the model, by name. */
typedef struct config_field {
    const char *name;
    double value;
} config_field;

static int config_fields(const rp_model_config *c, config_field *f)
{
    int n = 0;
    f[n++] = (config_field){"model_type", (double)c->arch};
    f[n++] = (config_field){"hidden_size", (double)c->hidden_size};
    f[n++] = (config_field){"intermediate_size", (double)c->intermediate_size};
    f[n++] = (config_field){"num_hidden_layers", (double)c->num_hidden_layers};
    f[n++] = (config_field){"num_attention_heads", (double)c->num_attention_heads};
    f[n++] = (config_field){"num_key_value_heads", (double)c->num_key_value_heads};
    f[n++] = (config_field){"head_dim", (double)c->head_dim};
    f[n++] = (config_field){"vocab_size", (double)c->vocab_size};
    f[n++] = (config_field){"tie_word_embeddings", (double)c->tie_word_embeddings};
    f[n++] = (config_field){"attention_bias", (double)c->attention_bias};
    f[n++] = (config_field){"rms_norm_eps", c->rms_norm_eps};
    f[n++] = (config_field){"rope_theta", c->rope_theta};
    f[n++] = (config_field){"rope_scaling.factor", c->rope_scaling.factor};
    f[n++] = (config_field){"num_experts", (double)c->moe.num_experts};
    f[n++] = (config_field){"num_experts_per_tok", (double)c->moe.num_experts_per_tok};
    f[n++] = (config_field){"moe_intermediate_size", (double)c->moe.moe_intermediate_size};
    f[n++] = (config_field){"decoder_sparse_step", (double)c->moe.decoder_sparse_step};
    f[n++] = (config_field){"norm_topk_prob", (double)c->moe.norm_topk_prob};
    return n;
}

/* The checkpoint's config against the one the user named with --resume. */
static rp_status check_config(const char *dir, const rp_train_options *o, rp_error *err)
{
    if (!o->model_dir && !o->init_config)
        return RP_OK;
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    rp_model_config a, b;
    RP_TRY(rp_config_load(path, &a, err));
    char given[4200];
    if (o->model_dir)
        snprintf(given, sizeof given, "%s/config.json", o->model_dir);
    else
        snprintf(given, sizeof given, "%s", o->init_config);
    RP_TRY(rp_config_load(given, &b, err));
    if (a.arch != b.arch)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "--resume %s: config.json: model_type is %s, but %s has %s (a "
                            "checkpoint of another model)", dir,
                            rp_arch_name(a.arch), given, rp_arch_name(b.arch));
    config_field fa[24], fb[24];
    int n = config_fields(&a, fa);
    config_fields(&b, fb);
    for (int i = 1; i < n; i++) /* model_type compared above */
        if (fa[i].value != fb[i].value)
            return rp_error_set(err, RP_ERR_INVALID_ARG,
                                "--resume %s: config.json: %s is %.17g, but %s has %.17g (a "
                                "checkpoint of another model)", dir, fa[i].name, fa[i].value,
                                given, fb[i].value);
    if (memcmp(a.moe.mlp_only, b.moe.mlp_only, sizeof a.moe.mlp_only) != 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "--resume %s: config.json: mlp_only_layers differs from %s's (a "
                            "checkpoint of another model)", dir, given);
    return RP_OK;
}

/* Options added to the format after checkpoints were written with it: a
 * checkpoint without one resumes as if it held the default. */
static int added_later_at_default(const char *key, json_object *want)
{
    static const struct {
        const char *key, *json; /* the default, as semantic_options writes it */
    } later[] = {{"grad_dtype", "\"fp32\""}, {"shuffle", "false"}, {"documents", "false"},
                 {"router_aux_coef", "0.0"}};
    for (size_t i = 0; i < sizeof later / sizeof *later; i++)
        if (strcmp(key, later[i].key) == 0)
            return strcmp(json_object_to_json_string(want), later[i].json) == 0;
    return 0;
}

/* st's field `name` (in `where`, "" for the top level) as a whole number
 * in [lo, hi] into *out: "3", 3.7 and a missing field are refused naming
 * the file and the field. */
static rp_status whole_field(json_object *st, const char *file, const char *where,
                             const char *name, int64_t lo, int64_t hi, int64_t *out, rp_error *err)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(st, name, &v))
        return rp_error_set(err, RP_ERR_FORMAT, "%s: no \"%s%s\"", file, where, name);
    if (!json_object_is_type(v, json_type_int))
        return rp_error_set(err, RP_ERR_FORMAT, "%s: \"%s%s\" is %s, not a whole number", file,
                            where, name, json_object_to_json_string(v));
    errno = 0;
    int64_t x = json_object_get_int64(v);
    if (errno == ERANGE || x < lo || x > hi)
        return rp_error_set(err, RP_ERR_FORMAT, "%s: \"%s%s\" is %s, not in [%lld, %lld]", file,
                            where, name, json_object_to_json_string(v), (long long)lo,
                            (long long)hi);
    *out = x;
    return RP_OK;
}

/* "model_dtype": the dtype the run's model was stored in before training
 * (its --model's, F32 for --init-config), which --save writes by default;
 * the checkpoint's own weights are fp32 whatever it was. Absent (a
 * checkpoint written before it was recorded): F32. */
static rp_status read_model_dtype(const char *dir, json_object *st, rp_dtype *out, rp_error *err)
{
    static const rp_dtype known[] = {RP_F32, RP_BF16, RP_F16};
    *out = RP_F32;
    json_object *v = NULL;
    if (!json_object_object_get_ex(st, "model_dtype", &v))
        return RP_OK;
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (json_object_is_type(v, json_type_string) &&
            strcmp(json_object_get_string(v), rp_dtype_name(known[i])) == 0) {
            *out = known[i];
            return RP_OK;
        }
    return rp_error_set(err, RP_ERR_FORMAT, "%s/%s: \"model_dtype\" is %s, not \"F32\", "
                        "\"BF16\" or \"F16\"", dir, RP_CHECKPOINT_STATE,
                        json_object_to_json_string(v));
}

/* The checkpoint's trainer state against this run: the format, the options
 * that change the results; *step and *adam_step read. */
static rp_status check_state(const char *dir, json_object *st, const rp_train_options *o,
                             int64_t *step, int64_t *adam_step, int *pending, float *coef,
                             rp_error *err)
{
    char file[4200];
    snprintf(file, sizeof file, "%s/%s", dir, RP_CHECKPOINT_STATE);
    json_object *v = NULL, *opts = NULL;
    int64_t format = 0, pending_step = 0;
    RP_TRY(whole_field(st, file, "", "format", RP_CHECKPOINT_FORMAT, RP_CHECKPOINT_FORMAT, &format,
                       err));
    RP_TRY(whole_field(st, file, "", "step", 1, INT64_MAX, step, err));
    RP_TRY(whole_field(st, file, "", "adam_step", 0, *step, adam_step, err));
    *pending = 0;
    *coef = 1.0f;
    if (json_object_object_get_ex(st, "pending_update", &v)) { /* a lagged optimizer's */
        json_object *pc = NULL;
        if (!json_object_is_type(v, json_type_object))
            return rp_error_set(err, RP_ERR_FORMAT, "%s: \"pending_update\" is not an object",
                                file);
        RP_TRY(whole_field(v, file, "pending_update.", "step", *step, *step, &pending_step, err));
        if (!json_object_object_get_ex(v, "clip_coef", &pc) ||
            !(json_object_is_type(pc, json_type_double) ||
              json_object_is_type(pc, json_type_int)) ||
            !(json_object_get_double(pc) > 0 && json_object_get_double(pc) <= 1) ||
            *adam_step >= *step)
            return rp_error_set(err, RP_ERR_FORMAT, "%s: \"pending_update\" is invalid (its "
                                "step must be \"step\", its clip_coef in (0, 1], adam_step "
                                "below it)", file);
        *pending = 1;
        *coef = (float)json_object_get_double(pc);
    }
    if (!json_object_object_get_ex(st, "options", &opts) ||
        !json_object_is_type(opts, json_type_object))
        return rp_error_set(err, RP_ERR_FORMAT, "%s: no \"options\" object", file);
    json_object *mine = semantic_options(o);
    rp_status s = RP_OK;
    json_object_object_foreach(mine, key, want)
    {
        json_object *have = NULL;
        if (s != RP_OK)
            break;
        if (!json_object_object_get_ex(opts, key, &have)) {
            if (!added_later_at_default(key, want))
                s = rp_error_set(err, RP_ERR_FORMAT, "%s: \"options\" has no \"%s\"", file,
                                 key);
        } else if (!json_object_equal(have, want))
            s = rp_error_set(err, RP_ERR_INVALID_ARG,
                             "%s: options.%s is %s, this run has %s: an option that changes the "
                             "results must match the checkpoint's", file, key,
                             json_object_to_json_string(have), json_object_to_json_string(want));
    }
    json_object_put(mine);
    /* auto may find the run's own last checkpoint (a run stopped after it):
     * then there is nothing to train, and the outputs are written from it */
    int automatic = strcmp(o->resume, "auto") == 0;
    if (s == RP_OK && o->steps && (*step > o->steps || (*step == o->steps && !automatic)))
        s = rp_error_set(err, RP_ERR_INVALID_ARG, "--resume %s: the checkpoint is of step %lld, "
                         "and --steps is %lld: nothing left to run", dir, (long long)*step,
                         (long long)o->steps);
    return s;
}

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

rp_status rp_checkpoint_resolve(rp_train_options *resolved, MPI_Comm comm, const rp_logger *lg,
                                rp_resume *out, rp_error *err)
{
    memset(out, 0, sizeof *out);
    if (!resolved->resume)
        return RP_OK;
    int rank;
    MPI_Comm_rank(comm, &rank);
    rp_status s = RP_OK;
    int64_t v[6] = {0}; /* found, step, adam_step, pending, recorded base, model dtype */
    float coef = 1.0f;
    if (rank == 0) {
        if (strcmp(resolved->resume, "auto") == 0) {
            s = rp_checkpoint_latest(resolved->checkpoint_dir, out->dir, sizeof out->dir, err);
            if (s == RP_OK && !out->dir[0])
                rp_log(lg, RP_LOG_INFO, "--resume auto: no complete checkpoint under %s: "
                       "starting fresh", resolved->checkpoint_dir);
        } else {
            snprintf(out->dir, sizeof out->dir, "%s", resolved->resume);
        }
        json_object *st = NULL;
        if (s == RP_OK && out->dir[0])
            s = rp_checkpoint_open(out->dir, &st, err);
        int pending = 0;
        if (s == RP_OK && st)
            s = check_state(out->dir, st, resolved, &v[1], &v[2], &pending, &coef, err);
        v[3] = pending;
        rp_dtype model_dtype = RP_F32;
        if (s == RP_OK && st)
            s = read_model_dtype(out->dir, st, &model_dtype, err);
        v[5] = model_dtype;
        if (s == RP_OK && st) /* before the config: it may name the recorded base */
            s = rp_lora_checkpoint_check(out->dir, st, resolved, out->base, sizeof out->base,
                                         err);
        if (s == RP_OK && st)
            s = check_config(out->dir, resolved, err);
        v[4] = resolved->model_dir == out->base ? 1 : resolved->init_config == out->base ? 2 : 0;
        json_object_put(st);
        v[0] = s == RP_OK && out->dir[0];
    }
    /* everyone learns the outcome, the directory and the step */
    int ok = s == RP_OK, all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm);
    if (!all)
        return s != RP_OK ? s : rp_error_echo(err, RP_ERR_INVALID_ARG, "rank 0 refused --resume");
    MPI_Bcast(v, 6, MPI_INT64_T, 0, comm);
    MPI_Bcast(&coef, 1, MPI_FLOAT, 0, comm);
    MPI_Bcast(out->dir, (int)sizeof out->dir, MPI_CHAR, 0, comm);
    MPI_Bcast(out->base, (int)sizeof out->base, MPI_CHAR, 0, comm);
    if (!v[0]) { /* auto found none: a fresh start, which needs a model */
        out->dir[0] = '\0';
        if (!resolved->model_dir && !resolved->init_config)
            return rp_error_set(err, RP_ERR_INVALID_ARG, "--resume auto found no checkpoint "
                                "under %s, and there is no --model or --init-config to start "
                                "from", resolved->checkpoint_dir);
        return RP_OK;
    }
    out->step = v[1];
    out->adam_step = v[2];
    out->pending = (int)v[3];
    out->coef = coef;
    out->model_dtype = (rp_dtype)v[5];
    if (resolved->lora_rank >= 1) { /* the adapters: the model is the base */
        if (v[4] == 1)
            resolved->model_dir = out->base;
        else if (v[4] == 2)
            resolved->init_config = out->base;
    } else { /* the checkpoint is the model */
        resolved->model_dir = out->dir;
        resolved->init_config = NULL;
    }
    if (rank == 0 && resolved->steps && out->step == resolved->steps)
        rp_log(lg, RP_LOG_INFO, "resuming from %s: step %lld, the last, is done: nothing left "
               "to train", out->dir, (long long)out->step);
    else if (rank == 0)
        rp_log(lg, RP_LOG_INFO, "resuming from %s: step %lld done, continuing at step %lld",
               out->dir, (long long)out->step, (long long)out->step + 1);
    return RP_OK;
}

/* AdamW's state as the checkpoint names it: m then v, "<name>.exp_avg" and
 * "<name>.exp_avg_sq". */
static rp_tensor_ref *optimizer_tensors(const rp_params *p, int *n)
{
    static const rp_params_array which[2] = {RP_PARAMS_M, RP_PARAMS_V};
    static const char *const suffix[2] = {".exp_avg", ".exp_avg_sq"};
    return rp_params_tensors(p, 2, which, suffix, n);
}

/* The summed gradient of a pending update, under the parameters' names. */
static rp_tensor_ref *gradient_tensors(const rp_params *p, int *n)
{
    static const rp_params_array grad = RP_PARAMS_GRAD;
    static const char *const none = "";
    return rp_params_tensors(p, 1, &grad, &none, n);
}

rp_status rp_checkpoint_load_optimizer(rp_params *p, const char *dir, int pending, rp_error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    int n = 0;
    rp_tensor_ref *t = optimizer_tensors(p, &n);
    if (!t)
        return rp_error_set(err, RP_ERR_NOMEM, "%s: the tensor list", path);
    rp_status s = rp_model_dir_load_file(path, t, n, err);
    free(t);
    if (s != RP_OK || !pending)
        return s;
    snprintf(path, sizeof path, "%s/" RP_PENDING_FILE, dir);
    if (!(t = gradient_tensors(p, &n)))
        return rp_error_set(err, RP_ERR_NOMEM, "%s: the tensor list", path);
    s = rp_model_dir_load_file(path, t, n, err);
    free(t);
    return s;
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
 * tensors start in them. Pending (a lagged optimizer before its last step):
 * the state before the update of step c, and c's summed gradient, which a
 * resumed run applies as its first update. */
typedef struct ck {
    rp_checkpoint_writer *w;
    rp_tensor_ref *model, *optim, *grad;
    int nmodel, noptim, ngrad;
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
    k->optim = optimizer_tensors(p, &k->noptim);
    k->grad = pending ? gradient_tensors(p, &k->ngrad) : NULL;
    k->first = calloc((size_t)p->nlayers + 1, sizeof *k->first);
    if (!k->model || !k->optim || (pending && !k->grad) || !k->first) {
        ck_free(k);
        return rp_error_set(err, RP_ERR_NOMEM, "checkpoint of step %lld: the tensor lists",
                            (long long)c);
    }
    for (int l = 0; l < p->nlayers; l++)
        k->first[l + 1] = k->first[l] + p->layers[l].nparams;
    rp_checkpoint_file files[3] = {{"model.safetensors", k->model, k->nmodel},
                                   {"optimizer.safetensors", k->optim, k->noptim},
                                   {RP_PENDING_FILE, k->grad, k->ngrad}};
    /* a full model's checkpoint is the model a resumed run starts from: its
     * tokenizer goes with it (a LoRA run's base keeps its own) */
    rp_checkpoint_content content = {files, pending ? 3 : 2, &p->cfg, e->model_config_text,
                                     e->lora ? NULL : e->companions};
    rp_status s = rp_checkpoint_begin(e->o->checkpoint_dir, c, &content, &k->w, err);
    if (s != RP_OK)
        ck_free(k);
    return s;
}

/* Layer l's master, m and v (and pending gradient), read now. */
static rp_status ck_layer(ck *k, int l, rp_error *err)
{
    double t0 = rp_now();
    int a = k->first[l], n = k->first[l + 1] - a;
    rp_status s = rp_checkpoint_put(k->w, 0, a, n, err);
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
    json_object_object_add(st, "options", semantic_options(o));
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
            mib += (k->pending ? 4.0 : 3.0) * (double)e->p->layers[l].numel * 4 / 1048576.0;
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
        for (int l = 0; s == RP_OK && l < e->p->nlayers; l++)
            s = ck_layer(&k, l, err);
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
    for (int64_t c = e->it_first; c < e->it_last; c++)
        if (rp_checkpoint_in_segment(e, c))
            return 1;
    return 0;
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
        if (s == RP_OK && w == RP_OK && e->trace) {
            char span[64];
            snprintf(span, sizeof span, "write layer %d (step %lld)", l, (long long)c);
            rp_trace_span(e->trace, RP_TRACK_CHECKPOINT, span, t0, rp_trace_now_ns());
        }
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
