/* Setting one `roundpipe train` option by name: the command line and the
 * public API (rp_train_config_set) go through this one table, so they
 * accept the same names and values and fail with the same messages. */
#include <stdio.h>
#include <string.h>

#include "core/args.h"
#include "engine/train_options.h"
#include "plan/deal.h"

/* fp16 only where allowed: a saved file may hold it, executors do not compute in it */
static rp_status parse_dtype(const char *opt, const char *s, int allow_f16, rp_dtype *out,
                             rp_error *err)
{
    if (strcmp(s, "fp32") == 0 || strcmp(s, "float32") == 0)
        *out = RP_F32;
    else if (strcmp(s, "bf16") == 0 || strcmp(s, "bfloat16") == 0)
        *out = RP_BF16;
    else if (allow_f16 && (strcmp(s, "fp16") == 0 || strcmp(s, "float16") == 0))
        *out = RP_F16;
    else
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: '%s' is not one of fp32, bf16%s", opt,
                            s, allow_f16 ? ", fp16" : "");
    return RP_OK;
}

/* Map a word of `words` (NULL-terminated) to its index. */
static rp_status parse_word(const char *opt, const char *s, const char *const *words, int *out,
                            rp_error *err)
{
    char list[128] = "";
    for (int i = 0; words[i]; i++) {
        if (strcmp(s, words[i]) == 0) {
            *out = i;
            return RP_OK;
        }
        strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, words[i], sizeof list - strlen(list) - 1);
    }
    return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: '%s' is not one of %s", opt, s, list);
}

/* A flag: no value (the command line), or 1/0, true/false (the API). */
static rp_status parse_flag(const char *opt, const char *s, int *out, rp_error *err)
{
    if (!s || !strcmp(s, "1") || !strcmp(s, "true"))
        *out = 1;
    else if (!strcmp(s, "0") || !strcmp(s, "false"))
        *out = 0;
    else
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: '%s' is not 1 or 0", opt, s);
    return RP_OK;
}

rp_status rp_train_options_set(rp_train_options *o, const char *name, const char *a, rp_error *err)
{
    char opt[64];
    int64_t v;
    int w;
    snprintf(opt, sizeof opt, "--%s", name);
#define IS(n) (strcmp(name, n) == 0)
    if (IS("model")) o->model_dir = a;
    else if (IS("init-config")) o->init_config = a;
    else if (IS("data")) o->data = a;
    else if (IS("loss-mask")) o->loss_mask = a;
    else if (IS("documents")) o->documents = a;
    else if (IS("eval-data")) o->eval_data = a;
    else if (IS("eval-mask")) o->eval_mask = a;
    else if (IS("eval-documents")) o->eval_documents = a;
    else if (IS("log")) o->log_path = a;
    else if (IS("save")) o->save_dir = a;
    else if (IS("plan")) o->plan = a;
    else if (IS("checkpoint-dir")) o->checkpoint_dir = a;
    else if (IS("resume")) o->resume = a;
    else if (IS("checkpoint-every"))
        return rp_arg_int(opt, a, 0, INT64_MAX, &o->checkpoint_every, err);
    else if (IS("eval-every"))
        return rp_arg_int(opt, a, 0, INT64_MAX, &o->eval_every, err);
    else if (IS("eval-samples"))
        return rp_arg_int(opt, a, 0, INT64_MAX, &o->eval_samples, err);
    else if (IS("keep-checkpoints"))
        return rp_arg_int(opt, a, 0, 1000000, &o->keep_checkpoints, err);
    else if (IS("trace")) o->trace = a;
    else if (IS("seq-len")) return rp_arg_int(opt, a, 1, INT32_MAX, &o->seq_len, err);
    else if (IS("batch-size")) return rp_arg_int(opt, a, 1, INT32_MAX, &o->batch_size, err);
    else if (IS("microbatches")) return rp_arg_int(opt, a, 1, INT32_MAX, &o->microbatches, err);
    else if (IS("steps")) return rp_arg_int(opt, a, 0, INT64_MAX, &o->steps, err);
    else if (IS("warmup-steps")) return rp_arg_int(opt, a, 0, INT64_MAX, &o->warmup_steps, err);
    else if (IS("lr")) return rp_arg_double(opt, a, &o->lr, err);
    else if (IS("min-lr")) return rp_arg_double(opt, a, &o->min_lr, err);
    else if (IS("weight-decay")) return rp_arg_double(opt, a, &o->weight_decay, err);
    else if (IS("beta1")) return rp_arg_double(opt, a, &o->beta1, err);
    else if (IS("beta2")) return rp_arg_double(opt, a, &o->beta2, err);
    else if (IS("eps")) return rp_arg_double(opt, a, &o->eps, err);
    else if (IS("grad-clip")) return rp_arg_double(opt, a, &o->grad_clip, err);
    else if (IS("timeout")) return rp_arg_double(opt, a, &o->timeout_s, err);
    else if (IS("chunk-mib")) return rp_arg_double(opt, a, &o->chunk_mib, err);
    else if (IS("link-groups")) o->link_groups = a;
    else if (IS("topology")) o->topology = a;
    else if (IS("activation-numa")) {
        static const char *const words[] = {"interleave", "reader", NULL};
        return parse_word(opt, a, words, &o->activation_numa, err);
    }
    else if (IS("deal")) {
        rp_deal_choice d;
        RP_TRY(rp_deal_parse(a, opt, &d, err));
        o->deal = (int)d;
    }
    else if (IS("memory-limit-mib")) return rp_arg_double(opt, a, &o->memory_limit_mib, err);
    else if (IS("seed")) return rp_arg_u64(opt, a, &o->seed, err);
    else if (IS("lr-schedule")) return rp_lr_kind_parse(a, opt, &o->schedule, err);
    else if (IS("dtype")) {
        RP_TRY(parse_dtype(opt, a, 0, &o->dtype, err));
        o->dtype_set = 1;
    }
    else if (IS("shuffle")) /* a flag: no value, or 1/0 through the API */
        return parse_flag(opt, a, &o->shuffle, err);
    else if (IS("lora-rank")) return rp_arg_int(opt, a, 0, 65536, &o->lora_rank, err);
    else if (IS("lora-alpha")) {
        RP_TRY(rp_arg_double(opt, a, &o->lora_alpha, err));
        o->lora_given |= RP_LORA_GIVEN_ALPHA;
    } else if (IS("lora-targets")) {
        o->lora_targets = a;
        o->lora_given |= RP_LORA_GIVEN_TARGETS;
    } else if (IS("lora-dropout")) {
        RP_TRY(rp_arg_double(opt, a, &o->lora_dropout, err));
        o->lora_given |= RP_LORA_GIVEN_DROPOUT;
    } else if (IS("use-rslora")) {
        RP_TRY(parse_flag(opt, a, &o->use_rslora, err));
        o->lora_given |= RP_LORA_GIVEN_RSLORA;
    } else if (IS("lora-init")) {
        o->lora_init = a;
        o->lora_given |= RP_LORA_GIVEN_INIT;
    } else if (IS("save-merged")) {
        o->save_merged = a;
        o->lora_given |= RP_LORA_GIVEN_MERGED;
    }
    else if (IS("router-aux-coef"))
        return rp_arg_double(opt, a, &o->router_aux_coef, err);
    else if (IS("grad-dtype"))
        RP_TRY(parse_dtype(opt, a, 0, &o->grad_dtype, err));
    else if (IS("save-dtype")) {
        RP_TRY(parse_dtype(opt, a, 1, &o->save_dtype, err));
        o->save_dtype_set = 1;
    } else if (IS("device")) return rp_device_kind_parse(a, &o->device, err);
    else if (IS("threads")) {
        RP_TRY(rp_arg_int(opt, a, 0, 4096, &v, err));
        o->threads = (int)v;
    } else if (IS("optimizer-lag")) {
        RP_TRY(rp_arg_int(opt, a, 0, 1, &v, err));
        o->optimizer_lag = (int)v;
    } else if (IS("ranks-per-node")) {
        RP_TRY(rp_arg_int(opt, a, 1, 1 << 20, &v, err));
        o->ranks_per_node = (int)v;
    } else if (IS("pipelines")) {
        RP_TRY(rp_arg_int(opt, a, 1, 4096, &v, err));
        o->pipelines = (int)v;
    } else if (IS("recompute")) {
        static const char *const words[] = {"stage", "layer", NULL};
        RP_TRY(parse_word(opt, a, words, &w, err));
        o->recompute_layer = w;
    } else if (IS("bind")) {
        static const char *const words[] = {"no", "yes", NULL};
        RP_TRY(parse_word(opt, a, words, &w, err));
        o->bind = w;
    } else if (IS("progress")) {
        static const char *const words[] = {"auto", "line", "none", NULL};
        RP_TRY(parse_word(opt, a, words, &w, err));
        o->progress = (rp_progress_mode)w;
    } else
        return rp_error_set(err, RP_ERR_INVALID_ARG, "unknown option '%s'", opt);
#undef IS
    return RP_OK;
}
