/* Checkpoints of a training run (see checkpoints.h). */
#include "engine/checkpoints.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint.h"
#include "io/config.h"
#include "optim/lr.h"
#include "engine/run_impl.h"

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
    json_object_object_add(j, "pipelines", json_object_new_int64(o->pipelines));
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
    json_object_object_add(j, "optimizer_lag", json_object_new_int(o->optimizer_lag));
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
                            a.arch == RP_ARCH_QWEN3 ? "qwen3" : "llama", given,
                            b.arch == RP_ARCH_QWEN3 ? "qwen3" : "llama");
    config_field fa[16], fb[16];
    int n = config_fields(&a, fa);
    config_fields(&b, fb);
    for (int i = 1; i < n; i++) /* model_type compared above */
        if (fa[i].value != fb[i].value)
            return rp_error_set(err, RP_ERR_INVALID_ARG,
                                "--resume %s: config.json: %s is %.17g, but %s has %.17g (a "
                                "checkpoint of another model)", dir, fa[i].name, fa[i].value,
                                given, fb[i].value);
    return RP_OK;
}

/* Options added to the format after checkpoints were written with it: a
 * checkpoint without one resumes as if it held the default. */
static int added_later_at_default(const char *key, json_object *want)
{
    static const struct {
        const char *key, *json; /* the default, as semantic_options writes it */
    } later[] = {{"grad_dtype", "\"fp32\""}, {"shuffle", "false"}};
    for (size_t i = 0; i < sizeof later / sizeof *later; i++)
        if (strcmp(key, later[i].key) == 0)
            return strcmp(json_object_to_json_string(want), later[i].json) == 0;
    return 0;
}

/* The checkpoint's trainer state against this run: the format, the options
 * that change the results; *step and *adam_step read. */
static rp_status check_state(const char *dir, json_object *st, const rp_train_options *o,
                             int64_t *step, int64_t *adam_step, rp_error *err)
{
    char file[4200];
    snprintf(file, sizeof file, "%s/%s", dir, RP_CHECKPOINT_STATE);
    json_object *v = NULL, *opts = NULL;
    if (!json_object_object_get_ex(st, "format", &v) ||
        json_object_get_int(v) != RP_CHECKPOINT_FORMAT)
        return rp_error_set(err, RP_ERR_FORMAT, "%s: \"format\" is not %d", file,
                            RP_CHECKPOINT_FORMAT);
    if (!json_object_object_get_ex(st, "step", &v) || json_object_get_int64(v) < 1)
        return rp_error_set(err, RP_ERR_FORMAT, "%s: no valid \"step\"", file);
    *step = json_object_get_int64(v);
    if (!json_object_object_get_ex(st, "adam_step", &v) || json_object_get_int64(v) < 0 ||
        json_object_get_int64(v) > *step)
        return rp_error_set(err, RP_ERR_FORMAT, "%s: no valid \"adam_step\"", file);
    *adam_step = json_object_get_int64(v);
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

rp_status rp_checkpoint_resolve(rp_train_options *resolved, MPI_Comm comm, const rp_logger *lg,
                                rp_resume *out, rp_error *err)
{
    memset(out, 0, sizeof *out);
    if (!resolved->resume)
        return RP_OK;
    int rank;
    MPI_Comm_rank(comm, &rank);
    rp_status s = RP_OK;
    int64_t v[3] = {0, 0, 0}; /* found, step, adam_step */
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
        if (s == RP_OK && st)
            s = check_state(out->dir, st, resolved, &v[1], &v[2], err);
        if (s == RP_OK && st)
            s = check_config(out->dir, resolved, err);
        json_object_put(st);
        v[0] = s == RP_OK && out->dir[0];
    }
    /* everyone learns the outcome, the directory and the step */
    int ok = s == RP_OK, all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm);
    if (!all)
        return s != RP_OK ? s : rp_error_set(err, RP_ERR_INVALID_ARG, "rank 0 refused --resume");
    MPI_Bcast(v, 3, MPI_INT64_T, 0, comm);
    MPI_Bcast(out->dir, (int)sizeof out->dir, MPI_CHAR, 0, comm);
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
    resolved->model_dir = out->dir; /* the checkpoint is the model */
    resolved->init_config = NULL;
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

rp_status rp_checkpoint_load_optimizer(rp_params *p, const char *dir, rp_error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    int n = 0;
    rp_tensor_ref *t = optimizer_tensors(p, &n);
    if (!t)
        return rp_error_set(err, RP_ERR_NOMEM, "%s: the tensor list", path);
    rp_status s = rp_model_dir_load_file(path, t, n, err);
    free(t);
    return s;
}

int rp_checkpoint_due(const rp_engine *e, int64_t t)
{
    const rp_train_options *o = e->o;
    if (!o->checkpoint_dir)
        return 0;
    return t == e->steps || (o->checkpoint_every > 0 && t % o->checkpoint_every == 0);
}

rp_status rp_checkpoint_save(rp_engine *e, const char *template_config, MPI_Comm comm,
                             rp_error *err)
{
    rp_status s = RP_OK;
    if (e->rank == 0) {
        const rp_train_options *o = e->o;
        double t0 = rp_now();
        int nmodel = 0, noptim = 0;
        rp_tensor_ref *model = rp_params_master_tensors(e->p, &nmodel);
        rp_tensor_ref *optim = optimizer_tensors(e->p, &noptim);
        if (!model || !optim) {
            s = rp_error_set(err, RP_ERR_NOMEM, "checkpoint: the tensor lists");
        } else {
            json_object *st = json_object_new_object();
            json_object_object_add(st, "format", json_object_new_int(RP_CHECKPOINT_FORMAT));
            json_object_object_add(st, "roundpipe_version",
                                   json_object_new_string(rp_version_string()));
            json_object_object_add(st, "step", json_object_new_int64(e->it_last));
            json_object_object_add(st, "adam_step", json_object_new_int64(e->adam_step));
            json_object_object_add(st, "samples_seen",
                                   json_object_new_int64(e->it_last * o->batch_size));
            json_object_object_add(st, "seed", json_object_new_uint64(o->seed));
            json_object_object_add(st, "data", json_object_new_string(o->data));
            json_object_object_add(st, "options", semantic_options(o));
            rp_checkpoint_content c = {model, nmodel, optim, noptim, &e->p->cfg,
                                       template_config, st};
            char dir[4200];
            s = rp_checkpoint_write(o->checkpoint_dir, e->it_last, (int)o->keep_checkpoints, &c,
                                    dir, sizeof dir, err);
            json_object_put(st);
            if (s == RP_OK) {
                double mib = 0;
                for (int l = 0; l < e->p->nlayers; l++)
                    mib += 3.0 * (double)e->p->layers[l].numel * 4 / 1048576.0;
                rp_log(e->lg, RP_LOG_INFO, "checkpoint of step %lld written: %s (%.1f MiB in "
                       "%.2f s)", (long long)e->it_last, dir, mib, rp_now() - t0);
            }
        }
        free(model);
        free(optim);
    }
    return rp_run_agree(e, s, comm, err);
}
