/* A LoRA run's checkpoints (lora_checkpoint.h). */
#include "engine/lora_checkpoint.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/philox.h"
#include "engine/lora_run.h"
#include "io/checkpoint.h"
#include "io/peft.h"
#include "io/safetensors_set.h"

/* ---- the base's fingerprint ------------------------------------------------ */

/* Bytes of a tensor hashed whole; of a larger one, RP_SAMPLES windows of
 * RP_WINDOW bytes spread evenly over it, the first and the last included. */
#define RP_WHOLE_BYTES ((size_t)64 << 10)
#define RP_SAMPLES 16
#define RP_WINDOW ((size_t)64)

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = rp_fnv1a_byte(h, b[i]);
    return h;
}

static uint64_t hash_str(uint64_t h, const char *s)
{
    return hash_bytes(h, s, strlen(s) + 1); /* the NUL too: "ab"+"c" is not "a"+"bc" */
}

/* Why sampled: the base may be hundreds of GB, and a resume must not read
 * it all to start. The headers alone (names, dtypes, shapes, offsets) are
 * the same, byte for byte, for two checkpoints of one architecture (a base
 * and its instruct tune), so a few pages of each tensor's data are hashed
 * too: any other set of trained weights differs there. An edit of a few
 * elements of the base is not seen. FNV-1a 64, in the tensors' name order,
 * over each one's name, dtype, shape, byte count and bytes. */
rp_status rp_lora_base_hash(const char *model_dir, char hex[17], rp_error *err)
{
    rp_safetensors_set *set = NULL;
    RP_TRY(rp_safetensors_set_open_dir(model_dir, &set, err));
    uint64_t h = 14695981039346656037ull;
    rp_status s = RP_OK;
    for (size_t i = 0; s == RP_OK && i < rp_safetensors_set_count(set); i++) {
        rp_safetensors_tensor t;
        s = rp_safetensors_set_find(set, rp_safetensors_set_name(set, i), &t, NULL, err);
        if (s != RP_OK)
            break;
        h = hash_str(h, t.name);
        h = hash_str(h, t.dtype_name);
        for (int d = 0; d < t.ndim; d++)
            h = rp_fnv1a_u64le(h, (uint64_t)t.shape[d]);
        h = rp_fnv1a_u64le(h, (uint64_t)t.nbytes);
        if (t.nbytes <= RP_WHOLE_BYTES) {
            h = hash_bytes(h, t.data, t.nbytes);
            continue;
        }
        for (int k = 0; k < RP_SAMPLES; k++) {
            size_t at = (t.nbytes - RP_WINDOW) / (RP_SAMPLES - 1) * (size_t)k;
            if (k == RP_SAMPLES - 1)
                at = t.nbytes - RP_WINDOW;
            h = hash_bytes(h, (const char *)t.data + at, RP_WINDOW);
        }
    }
    rp_safetensors_set_close(&set);
    if (s == RP_OK)
        snprintf(hex, 17, "%016" PRIx64, h);
    return s;
}

/* ---- what the checkpoint records ------------------------------------------- */

/* The settings that change the adapters' training, as recorded and as
 * compared: one definition for both. */
static json_object *settings(const rp_model_config *cfg, uint64_t seed)
{
    const rp_lora_config *c = &cfg->lora;
    json_object *j = json_object_new_object();
    json_object_object_add(j, "r", json_object_new_int(c->rank));
    json_object_object_add(j, "lora_alpha", json_object_new_double(c->alpha));
    json_object *t = json_object_new_array();
    for (int p = 0; p < RP_LORA_NPROJ; p++)
        if (c->targets & (1u << p)) { /* gpt-oss's router and experts by PEFT's names */
            const char *param = rp_lora_param_name(cfg, (rp_lora_proj)p);
            json_object_array_add(t, json_object_new_string(
                                         param ? param : rp_lora_proj_name((rp_lora_proj)p)));
        }
    json_object_object_add(j, "target_modules", t);
    json_object_object_add(j, "lora_dropout", json_object_new_double(c->dropout));
    json_object_object_add(j, "use_rslora", json_object_new_boolean(c->use_rslora));
    if (c->dropout > 0) /* the seed keys the masks of the steps still to come */
        json_object_object_add(j, "dropout_seed", json_object_new_uint64(seed));
    return j;
}

/* A directory's absolute path into out (the path as given when it cannot
 * be resolved: its check fails later with a message naming it). */
static void absolute(const char *path, char *out, size_t len)
{
    char buf[PATH_MAX];
    snprintf(out, len, "%s", realpath(path, buf) ? buf : path);
}

rp_status rp_lora_checkpoint_state(json_object *st, const rp_model_config *cfg,
                                   const rp_train_options *o, char *hash_cache, rp_error *err)
{
    json_object *base = json_object_new_object();
    if (o->model_dir) {
        if (!hash_cache[0]) {
            rp_status s = rp_lora_base_hash(o->model_dir, hash_cache, err);
            if (s != RP_OK) {
                json_object_put(base);
                return s;
            }
        }
        char path[PATH_MAX];
        absolute(o->model_dir, path, sizeof path);
        json_object_object_add(base, "model", json_object_new_string(path));
        json_object_object_add(base, "hash", json_object_new_string(hash_cache));
        json_object_object_add(base, "hash_method",
                               json_object_new_string(RP_LORA_BASE_HASH_METHOD));
    } else { /* random: the checkpoint's config.json and the seed draw it again */
        json_object_object_add(base, "model", NULL);
        json_object_object_add(base, "seed", json_object_new_uint64(o->seed));
    }
    json_object_object_add(st, "lora", settings(cfg, o->seed));
    json_object_object_add(st, "base", base);
    return RP_OK;
}

/* ---- resuming --------------------------------------------------------------- */

/* This run's LoRA settings, resolved from its options over the
 * checkpoint's config (the base's), as the run will resolve them. */
static rp_status settings_of_run(const char *dir, const rp_train_options *o,
                                 rp_model_config *cfg, rp_error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    RP_TRY(rp_config_load(path, cfg, err));
    return rp_lora_resolve(o, cfg, err);
}

static rp_status check_settings(const char *file, json_object *have_all,
                                const rp_model_config *mine_cfg, uint64_t seed, rp_error *err)
{
    if (!json_object_is_type(have_all, json_type_object))
        return rp_error_set(err, RP_ERR_FORMAT, "%s: \"lora\" is not an object", file);
    json_object *mine = settings(mine_cfg, seed);
    rp_status s = RP_OK;
    json_object_object_foreach(mine, key, want)
    {
        json_object *have = NULL;
        if (!json_object_object_get_ex(have_all, key, &have))
            s = rp_error_set(err, RP_ERR_INVALID_ARG, "%s: lora.%s is missing, this run has %s: "
                             "the LoRA settings must match the checkpoint's", file, key,
                             json_object_to_json_string(want));
        else if (!json_object_equal(have, want))
            s = rp_error_set(err, RP_ERR_INVALID_ARG, "%s: lora.%s is %s, this run has %s: the "
                             "LoRA settings must match the checkpoint's", file, key,
                             json_object_to_json_string(have), json_object_to_json_string(want));
        if (s != RP_OK)
            break;
    }
    /* a key only the checkpoint has (dropout_seed of a run with dropout) */
    json_object_object_foreach(have_all, hkey, hval)
    {
        if (s != RP_OK)
            break;
        if (!json_object_object_get_ex(mine, hkey, NULL))
            s = rp_error_set(err, RP_ERR_INVALID_ARG, "%s: lora.%s is %s, this run has none: the "
                             "LoRA settings must match the checkpoint's", file, hkey,
                             json_object_to_json_string(hval));
    }
    json_object_put(mine);
    return s;
}

/* A base from --model: the same directory, with the same fingerprint. */
static rp_status check_model_base(const char *file, json_object *b, rp_train_options *o,
                                  char *base, size_t len, rp_error *err)
{
    json_object *m = NULL, *h = NULL, *how = NULL;
    json_object_object_get_ex(b, "model", &m);
    if (!json_object_object_get_ex(b, "hash", &h) || !json_object_is_type(h, json_type_string) ||
        !json_object_object_get_ex(b, "hash_method", &how) ||
        !json_object_is_type(how, json_type_string))
        return rp_error_set(err, RP_ERR_FORMAT, "%s: base.hash or base.hash_method is missing",
                            file);
    if (strcmp(json_object_get_string(how), RP_LORA_BASE_HASH_METHOD) != 0)
        return rp_error_set(err, RP_ERR_FORMAT, "%s: base.hash_method is \"%s\", not \"%s\"",
                            file, json_object_get_string(how), RP_LORA_BASE_HASH_METHOD);
    const char *recorded = json_object_get_string(m);
    if (o->init_config)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: base.model is %s, this run has "
                            "--init-config %s (a random base): resume with --model %s", file,
                            recorded, o->init_config, recorded);
    if (o->model_dir) {
        char given[PATH_MAX];
        absolute(o->model_dir, given, sizeof given);
        if (strcmp(given, recorded) != 0)
            return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: base.model is %s, this run has "
                                "--model %s: the adapters must resume on the base they were "
                                "trained on", file, recorded, given);
    } else { /* the recorded base */
        snprintf(base, len, "%s", recorded);
        o->model_dir = base;
    }
    char hex[17];
    RP_TRY(rp_lora_base_hash(o->model_dir, hex, err));
    if (strcmp(hex, json_object_get_string(h)) != 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: base.hash is %s, but the weights in %s "
                            "hash to %s: the base changed since the adapters were trained on it",
                            file, json_object_get_string(h), o->model_dir, hex);
    return RP_OK;
}

/* A random base: drawn again from the checkpoint's config and the seed. */
static rp_status check_random_base(const char *dir, const char *file, json_object *b,
                                   rp_train_options *o, char *base, size_t len, rp_error *err)
{
    json_object *seed = NULL;
    if (!json_object_object_get_ex(b, "seed", &seed) || !json_object_is_type(seed, json_type_int))
        return rp_error_set(err, RP_ERR_FORMAT, "%s: base.seed is missing", file);
    if (o->model_dir)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: base.model is null (a random base "
                            "from --init-config), this run has --model %s", file, o->model_dir);
    if (json_object_get_uint64(seed) != o->seed)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: base.seed is %" PRIu64 ", this run has "
                            "--seed %" PRIu64 ": the random base is drawn from it", file,
                            json_object_get_uint64(seed), o->seed);
    if (!o->init_config) { /* the checkpoint's config.json is the base's */
        snprintf(base, len, "%s/config.json", dir);
        o->init_config = base;
    }
    return RP_OK;
}

rp_status rp_lora_checkpoint_check(const char *dir, json_object *st, rp_train_options *o,
                                   char *base, size_t len, rp_error *err)
{
    char file[4200];
    snprintf(file, sizeof file, "%s/%s", dir, RP_CHECKPOINT_STATE);
    json_object *lora = NULL, *b = NULL;
    int is_lora = json_object_object_get_ex(st, "lora", &lora);
    if (!is_lora && o->lora_rank < 1)
        return RP_OK;
    if (!is_lora)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: no \"lora\": a checkpoint of full "
                            "fine-tuning, which --lora-rank %lld cannot resume", file,
                            (long long)o->lora_rank);
    if (o->lora_rank < 1)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: \"lora\": a checkpoint of LoRA "
                            "adapters: resume it with the run's --lora-rank and other --lora-* "
                            "options", file);
    if (!json_object_object_get_ex(st, "base", &b) || !json_object_is_type(b, json_type_object))
        return rp_error_set(err, RP_ERR_FORMAT, "%s: no \"base\" object", file);
    json_object *m = NULL;
    json_object_object_get_ex(b, "model", &m);
    if (m && !json_object_is_type(m, json_type_string))
        return rp_error_set(err, RP_ERR_FORMAT, "%s: base.model is not a string or null", file);
    if (m)
        RP_TRY(check_model_base(file, b, o, base, len, err));
    else
        RP_TRY(check_random_base(dir, file, b, o, base, len, err));
    rp_model_config c;
    RP_TRY(settings_of_run(dir, o, &c, err));
    return check_settings(file, lora, &c, o->seed, err);
}
