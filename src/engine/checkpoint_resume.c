/* Resuming from a checkpoint (checkpoints.h): the checkpoint found
 * (--resume auto: the newest complete one), checked against the run (its
 * format and checksums, the options that change the results, the model
 * config, a LoRA checkpoint's settings and base) and its AdamW state and
 * pending gradient read back into the store. */
#include "engine/checkpoints.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/checkpoint_contents.h"
#include "engine/lora_checkpoint.h"
#include "io/checkpoint.h"
#include "io/config.h"
#include "optim/lr.h"


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
 * checkpoint without one resumes as if it held the default (for the token
 * tile, the default's tile for this run's microbatches). */
static int added_later_at_default(const rp_train_options *o, const char *key, json_object *want)
{
    if (strcmp(key, "token_tile") == 0)
        return json_object_get_int64(want) == rp_checkpoint_token_tile(o, 0);
    static const struct {
        const char *key, *json; /* the default, as rp_checkpoint_semantic_options writes it */
    } later[] = {{"grad_dtype", "\"fp32\""}, {"shuffle", "false"}, {"documents", "false"},
                 {"router_aux_coef", "0.0"}, {"activation_dtype", "\"fp32\""},
                 {"router_aux_off", "false"}};
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
    json_object *mine = rp_checkpoint_semantic_options(o);
    rp_status s = RP_OK;
    json_object_object_foreach(mine, key, want)
    {
        json_object *have = NULL;
        if (s != RP_OK)
            break;
        if (!json_object_object_get_ex(opts, key, &have)) {
            if (!added_later_at_default(o, key, want))
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

rp_status rp_checkpoint_load_optimizer(rp_params *p, const char *dir, int pending, int first,
                                       int end, rp_error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    int n = 0;
    rp_tensor_ref *t = rp_checkpoint_optimizer_tensors(p, &n);
    if (!t)
        return rp_error_set(err, RP_ERR_NOMEM, "%s: the tensor list", path);
    n = rp_params_tensors_keep_layers(p, t, 2, first, end);
    rp_status s = rp_model_dir_load_file(path, t, n, err);
    free(t);
    if (s != RP_OK || !pending)
        return s;
    snprintf(path, sizeof path, "%s/" RP_PENDING_FILE, dir);
    if (!(t = rp_checkpoint_gradient_tensors(p, &n)))
        return rp_error_set(err, RP_ERR_NOMEM, "%s: the tensor list", path);
    n = rp_params_tensors_keep_layers(p, t, 1, first, end);
    s = rp_model_dir_load_file(path, t, n, err);
    free(t);
    return s;
}
