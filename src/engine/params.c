#include "engine/params.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "io/config.h"
#include "io/file_set.h"
#include "io/safetensors.h"
#include "io/safetensors_set.h"
#include "io/safetensors_writer.h"
#include "optim/adamw.h"

/* Arrays per layer: master, grad, m, v, and a separate compute copy for bf16. */
static size_t arrays_per_layer(rp_dtype compute_dtype)
{
    return compute_dtype == RP_F32 ? 4 : 5;
}

/* Staggered so that the optimizer's streams over one layer (master, grad,
 * m, v, compute) do not share cache sets (see rp_adamw_array_bytes). */
static size_t layer_bytes(size_t numel) { return rp_adamw_array_bytes(numel); }

size_t rp_params_bytes(const rp_model_config *cfg, rp_dtype compute_dtype)
{
    rp_model_config c = *cfg;
    rp_layer_desc *layers = NULL;
    int n = 0;
    if (rp_model_layout(&c, &layers, &n, NULL) != RP_OK)
        return 0;
    size_t total = 0;
    for (int l = 0; l < n; l++)
        total += arrays_per_layer(compute_dtype) * layer_bytes(layers[l].numel);
    free(layers);
    return total;
}

rp_status rp_params_attach(const rp_model_config *cfg, rp_dtype compute_dtype, void *mem,
                           size_t bytes, rp_params **out, rp_error *err)
{
    *out = NULL;
    if (((uintptr_t)mem & 63) != 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "parameter memory must be 64-byte aligned");
    rp_params *p = calloc(1, sizeof *p);
    if (!p)
        return rp_error_set(err, RP_ERR_NOMEM, "allocating model state");
    p->cfg = *cfg;
    p->compute_dtype = compute_dtype;
    p->loaded_dtype = RP_F32;
    rp_status s = rp_model_layout(&p->cfg, &p->layers, &p->nlayers, err);
    if (s != RP_OK) {
        free(p);
        return s;
    }
    p->st = calloc((size_t)p->nlayers, sizeof *p->st);
    if (!p->st) {
        rp_params_destroy(&p);
        return rp_error_set(err, RP_ERR_NOMEM, "allocating model state");
    }
    char *cur = mem, *end = (char *)mem + bytes;
    for (int l = 0; l < p->nlayers; l++) {
        rp_layer_state *ls = &p->st[l];
        size_t n = p->layers[l].numel, lb = layer_bytes(n);
        if ((size_t)(end - cur) < arrays_per_layer(compute_dtype) * lb) {
            rp_params_destroy(&p);
            return rp_error_set(err, RP_ERR_INVALID_ARG,
                                "parameter memory of %zu bytes is too small", bytes);
        }
        ls->desc = &p->layers[l];
        ls->master = (float *)cur, cur += lb;
        ls->grad = (float *)cur, cur += lb;
        ls->m = (float *)cur, cur += lb;
        ls->v = (float *)cur, cur += lb;
        if (compute_dtype == RP_F32) {
            ls->compute = ls->master;
        } else {
            ls->compute = (float *)cur;
            cur += lb;
        }
        p->total_numel += n;
    }
    *out = p;
    return RP_OK;
}

rp_status rp_params_create(const rp_model_config *cfg, rp_dtype compute_dtype, rp_params **out,
                           rp_error *err)
{
    *out = NULL;
    size_t bytes = rp_params_bytes(cfg, compute_dtype);
    if (bytes == 0) {
        rp_model_config c = *cfg;
        rp_layer_desc *layers = NULL;
        int n = 0;
        return rp_model_layout(&c, &layers, &n, err); /* names the bad field */
    }
    void *mem = NULL;
    if (posix_memalign(&mem, 64, bytes) != 0)
        return rp_error_set(err, RP_ERR_NOMEM, "allocating %zu bytes of model state", bytes);
    memset(mem, 0, bytes);
    rp_status s = rp_params_attach(cfg, compute_dtype, mem, bytes, out, err);
    if (s != RP_OK) {
        free(mem);
        return s;
    }
    (*out)->owned = mem;
    return RP_OK;
}

void rp_params_destroy(rp_params **pp)
{
    rp_params *p = pp ? *pp : NULL;
    if (!p)
        return;
    free(p->owned);
    free(p->st);
    free(p->layers);
    free(p);
    *pp = NULL;
}

void rp_params_sync_compute(rp_params *p, int l)
{
    rp_params_sync_compute_range(p, l, 0, p->st[l].desc->numel);
}

void rp_params_sync_compute_range(rp_params *p, int l, size_t lo, size_t hi)
{
    rp_layer_state *ls = &p->st[l];
    if (ls->compute == ls->master || hi <= lo)
        return;
    memcpy(ls->compute + lo, ls->master + lo, (hi - lo) * sizeof(float));
    rp_f32_round_bf16(ls->compute + lo, hi - lo);
}

void rp_params_init_random(rp_params *p, uint64_t seed)
{
    for (int l = 0; l < p->nlayers; l++) {
        rp_layer_init(&p->cfg, &p->layers[l], seed, p->st[l].master);
        rp_params_sync_compute(p, l);
    }
}

void rp_params_zero_grad(rp_params *p)
{
    for (int l = 0; l < p->nlayers; l++)
        memset(p->st[l].grad, 0, p->layers[l].numel * sizeof(float));
}

void rp_params_lm_head(const rp_params *p, const float **w, float **grad)
{
    int head = p->nlayers - 1;
    if (p->cfg.tie_word_embeddings) {
        *w = p->st[0].compute;
        *grad = p->st[0].grad;
        return;
    }
    const rp_param_desc *d = rp_layer_find_param(&p->layers[head], "lm_head.weight");
    *w = p->st[head].compute + d->offset;
    *grad = p->st[head].grad + d->offset;
}

/* A NaN or infinity in the input model would only surface as a diverged
 * step later, without a name: report it at load with the file and tensor. */
static rp_status check_finite(rp_safetensors_set *set, const rp_param_desc *pd,
                              const float *x, rp_error *err)
{
    for (size_t i = 0; i < pd->numel; i++)
        if (!isfinite(x[i])) {
            rp_safetensors_tensor t;
            const char *file = NULL;
            rp_safetensors_set_find(set, pd->name, &t, &file, NULL);
            return rp_error_set(err, RP_ERR_NUMERIC, "%s: tensor '%s': element %zu is %g "
                                "(the model holds a non-finite weight)", file ? file : "model",
                                pd->name, i, (double)x[i]);
        }
    return RP_OK;
}

rp_status rp_params_load_dir(rp_params *p, const char *dir, rp_error *err)
{
    rp_safetensors_set *set = NULL;
    RP_TRY(rp_safetensors_set_open_dir(dir, &set, err));
    rp_status s = RP_OK;
    int dtype_known = 0;
    for (int l = 0; l < p->nlayers && s == RP_OK; l++) {
        const rp_layer_desc *ld = &p->layers[l];
        for (int i = 0; i < ld->nparams && s == RP_OK; i++) {
            const rp_param_desc *pd = &ld->params[i];
            if (!dtype_known) {
                rp_safetensors_tensor t;
                const char *file = NULL;
                if (rp_safetensors_set_find(set, pd->name, &t, &file, NULL) == RP_OK &&
                    t.dtype_supported) {
                    p->loaded_dtype = t.dtype;
                    dtype_known = 1;
                }
            }
            int64_t shape[2] = {pd->shape[0], pd->shape[1]};
            float *dst = p->st[l].master + pd->offset;
            s = rp_safetensors_set_read_f32(set, pd->name, pd->ndim, shape, dst, err);
            if (s == RP_OK)
                s = check_finite(set, pd, dst, err);
        }
        if (s == RP_OK)
            rp_params_sync_compute(p, l);
    }
    rp_safetensors_set_close(&set);
    return s;
}

/* Shards and the index of a sharded checkpoint: the files a save replaces
 * besides its own (otherwise the index, which loaders prefer, would still
 * point at the old weights). */
static int is_shard_file(const char *name)
{
    return strcmp(name, "model.safetensors.index.json") == 0 ||
           fnmatch("model-*-of-*.safetensors", name, 0) == 0;
}

static rp_status mark_old_shards(rp_file_set *fs, rp_error *err)
{
    DIR *d = opendir(rp_file_set_dir(fs));
    if (!d)
        return RP_OK; /* a new directory has none */
    rp_status s = RP_OK;
    struct dirent *de;
    while (s == RP_OK && (de = readdir(d)))
        if (is_shard_file(de->d_name))
            s = rp_file_set_remove_after(fs, de->d_name, err);
    closedir(d);
    return s;
}

rp_status rp_params_save_dir(const rp_params *p, const char *dir, rp_dtype dtype,
                             const char *template_config, rp_error *err)
{
    rp_safetensors_writer *w = NULL;
    RP_TRY(rp_safetensors_writer_create(&w, err));
    rp_status s = RP_OK;
    for (int l = 0; l < p->nlayers && s == RP_OK; l++) {
        const rp_layer_desc *ld = &p->layers[l];
        for (int i = 0; i < ld->nparams && s == RP_OK; i++) {
            const rp_param_desc *pd = &ld->params[i];
            s = rp_safetensors_writer_add(w, pd->name, dtype, RP_F32, pd->ndim, pd->shape,
                                          p->st[l].master + pd->offset, err);
        }
    }
    rp_file_set *fs = NULL;
    rp_atomic_file **af = NULL;
    char path[4096];
    if (s == RP_OK)
        s = rp_file_set_begin(dir, &fs, err);
    if (s == RP_OK)
        s = mark_old_shards(fs, err);
    if (s == RP_OK) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        s = rp_file_set_add(fs, "model.safetensors", &af, err);
    }
    if (s == RP_OK)
        s = rp_safetensors_writer_write_to(w, af, path, err);
    if (s == RP_OK) {
        snprintf(path, sizeof path, "%s/config.json", dir);
        s = rp_file_set_add(fs, "config.json", &af, err);
    }
    if (s == RP_OK)
        s = rp_config_write_to(af, path, &p->cfg, dtype, template_config, err);
    if (s == RP_OK)
        s = rp_file_set_commit(&fs, err);
    rp_file_set_abort(&fs); /* no-op after a commit */
    rp_safetensors_writer_destroy(&w);
    return s;
}
