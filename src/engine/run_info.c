#include "engine/run_info.h"

#include <json-c/json.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "io/atomic_file.h"
#include "plan/deal.h"

static json_object *str_or_null(const char *s)
{
    return s ? json_object_new_string(s) : NULL;
}

/* A number written as %.9g ("0.003", not "0.0030000000000000001"). */
static json_object *num(double x)
{
    char buf[40];
    snprintf(buf, sizeof buf, "%.9g", x);
    return json_object_new_double_s(x, buf);
}

static void add(json_object *o, const char *key, json_object *v)
{
    json_object_object_add(o, key, v);
}

/* The training options under their command-line names. */
static json_object *options_json(const rp_train_options *o)
{
    json_object *j = json_object_new_object();
    add(j, "model", str_or_null(o->model_dir));
    add(j, "init-config", str_or_null(o->init_config));
    add(j, "data", str_or_null(o->data));
    add(j, "loss-mask", str_or_null(o->loss_mask));
    add(j, "documents", str_or_null(o->documents));
    add(j, "eval-data", str_or_null(o->eval_data));
    add(j, "eval-mask", str_or_null(o->eval_mask));
    add(j, "eval-documents", str_or_null(o->eval_documents));
    add(j, "eval-every", json_object_new_int64(o->eval_every));
    add(j, "eval-samples", json_object_new_int64(o->eval_samples));
    add(j, "log", str_or_null(o->log_path));
    add(j, "save", str_or_null(o->save_dir));
    add(j, "seq-len", json_object_new_int64(o->seq_len));
    add(j, "batch-size", json_object_new_int64(o->batch_size));
    add(j, "microbatches",
        json_object_new_int64(o->microbatches ? o->microbatches : o->batch_size));
    add(j, "steps", json_object_new_int64(o->steps));
    add(j, "lr", num(o->lr));
    add(j, "min-lr", num(o->min_lr));
    add(j, "warmup-steps", json_object_new_int64(o->warmup_steps));
    add(j, "lr-schedule", json_object_new_string(rp_lr_kind_name(o->schedule)));
    add(j, "weight-decay", num(o->weight_decay));
    add(j, "beta1", num(o->beta1));
    add(j, "beta2", num(o->beta2));
    add(j, "eps", num(o->eps));
    add(j, "grad-clip", num(o->grad_clip));
    add(j, "dtype", json_object_new_string(o->dtype == RP_BF16 ? "bf16" : "fp32"));
    add(j, "shuffle", json_object_new_boolean(o->shuffle));
    add(j, "grad-dtype", json_object_new_string(o->grad_dtype == RP_BF16 ? "bf16" : "fp32"));
    add(j, "activation-dtype",
        json_object_new_string(o->activation_dtype == RP_BF16 ? "bf16" : "fp32"));
    add(j, "save-dtype", o->save_dtype_set ? json_object_new_string(
                             o->save_dtype == RP_BF16 ? "bf16" : "fp32") : NULL);
    add(j, "seed", json_object_new_int64((int64_t)o->seed));
    add(j, "device", json_object_new_string(rp_device_kind_name(o->device)));
    add(j, "threads", json_object_new_int(o->threads));
    add(j, "plan", str_or_null(o->plan));
    add(j, "recompute", json_object_new_string(rp_recompute_name(o->recompute)));
    add(j, "weight-buffers", json_object_new_string(o->weight_buffers == 1   ? "1"
                                                    : o->weight_buffers == 2 ? "2"
                                                                             : "auto"));
    add(j, "timeout", num(o->timeout_s));
    add(j, "optimizer-lag", json_object_new_int(o->optimizer_lag));
    add(j, "speculative-update",
        json_object_new_string(o->speculative_update == RP_SPECULATIVE_ON    ? "on"
                               : o->speculative_update == RP_SPECULATIVE_OFF ? "off"
                                                                             : "auto"));
    add(j, "chunk-mib", num(o->chunk_mib));
    add(j, "link-groups", str_or_null(o->link_groups));
    add(j, "topology", str_or_null(o->topology));
    add(j, "activation-numa", json_object_new_string(o->activation_numa ? "reader" : "interleave"));
    add(j, "deal", json_object_new_string(o->deal == RP_DEAL_NATURAL       ? "natural"
                                          : o->deal == RP_DEAL_INTERLEAVED ? "interleaved"
                                                                           : "best"));
    add(j, "trace", str_or_null(o->trace));
    add(j, "memory-limit-mib", num(o->memory_limit_mib));
    add(j, "host-memory-limit-mib", num(o->host_memory_limit_mib));
    add(j, "bind", json_object_new_string(o->bind ? "yes" : "no"));
    add(j, "pipelines", json_object_new_int(o->pipelines));
    add(j, "ranks-per-node", o->ranks_per_node ? json_object_new_int(o->ranks_per_node) : NULL);
    add(j, "token-tile", json_object_new_int64(o->token_tile));
    add(j, "mlp-chunk-tokens", json_object_new_int64(o->mlp_chunk_tokens));
    add(j, "checkpoint-dir", str_or_null(o->checkpoint_dir));
    add(j, "checkpoint-every", json_object_new_int64(o->checkpoint_every));
    add(j, "keep-checkpoints", json_object_new_int64(o->keep_checkpoints));
    add(j, "lora-rank", json_object_new_int64(o->lora_rank));
    add(j, "lora-alpha", o->lora_given & RP_LORA_GIVEN_ALPHA ? num(o->lora_alpha) : NULL);
    add(j, "lora-targets", str_or_null(o->lora_targets));
    add(j, "lora-dropout", num(o->lora_dropout));
    add(j, "use-rslora", json_object_new_boolean(o->use_rslora));
    add(j, "lora-init", str_or_null(o->lora_init));
    add(j, "save-merged", str_or_null(o->save_merged));
    add(j, "router-aux-coef", num(o->router_aux_coef));
    add(j, "resume", str_or_null(o->resume));
    return j;
}

rp_status rp_run_info_write(const rp_run_info *info, const char *log_path, rp_error *err)
{
    char path[4200], when[64] = "", host[256] = "";
    snprintf(path, sizeof path, "%s.run.json", log_path);
    time_t secs = (time_t)info->start_time;
    struct tm utc;
    if (gmtime_r(&secs, &utc))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &utc);
    if (gethostname(host, sizeof host) != 0)
        host[0] = '\0';
    host[sizeof host - 1] = '\0';
    json_object *j = json_object_new_object();
    add(j, "roundpipe_version", json_object_new_string(rp_version_string()));
    char start[40];
    snprintf(start, sizeof start, "%.3f", info->start_time);
    add(j, "start_time", json_object_new_double_s(info->start_time, start));
    add(j, "start_time_utc", json_object_new_string(when));
    add(j, "host", json_object_new_string(host));
    add(j, "model", json_object_new_string(info->o->model_dir ? info->o->model_dir
                                                              : info->o->init_config));
    add(j, "layers", json_object_new_int(info->layers));
    add(j, "parameters", json_object_new_int64((int64_t)info->parameters));
    add(j, "ranks", json_object_new_int(info->ranks));
    add(j, "nodes", json_object_new_int(info->nodes));
    add(j, "device", json_object_new_string(info->device));
    add(j, "threads_per_rank", json_object_new_int(info->threads_per_rank));
    add(j, "plan", json_object_new_string(info->plan));
    json_object *deal = json_object_new_array();
    for (int x = 0; x < info->executors; x++)
        json_object_array_add(deal, json_object_new_int(info->deal ? info->deal[x] : x));
    add(j, "deal", deal);
    add(j, "options", options_json(info->o));
    const char *text = json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN);
    rp_atomic_file *af = NULL;
    rp_status s = rp_atomic_file_open(path, &af, err);
    if (s == RP_OK)
        s = rp_atomic_file_write(&af, text, strlen(text), err);
    if (s == RP_OK)
        s = rp_atomic_file_write(&af, "\n", 1, err);
    if (s == RP_OK)
        s = rp_atomic_file_commit(&af, err);
    else
        rp_atomic_file_abort(&af);
    json_object_put(j);
    return s;
}
