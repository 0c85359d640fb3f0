#include "engine/params.h"

#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "io/config.h"
#include "io/model_dir.h"
#include "optim/adamw.h"

/* Arrays per layer: master, grad, m, v in fp32, and for bf16 a compute copy
 * of half their size. Staggered so that the optimizer's streams over one
 * layer do not share cache sets (see rp_adamw_array_bytes). */
static size_t layer_bytes(size_t numel) { return rp_adamw_array_bytes(numel); }

size_t rp_params_compute_array_bytes(size_t numel, rp_dtype compute_dtype)
{
    return compute_dtype == RP_F32 ? layer_bytes(numel) : layer_bytes((numel + 1) / 2);
}

static size_t state_bytes(size_t numel, rp_dtype compute_dtype)
{
    return 4 * layer_bytes(numel) +
           (compute_dtype == RP_F32 ? 0 : rp_params_compute_array_bytes(numel, compute_dtype));
}

size_t rp_params_compute_bytes(const rp_params *p, int l)
{
    return rp_params_compute_array_bytes(p->layers[l].numel, p->compute_dtype);
}

size_t rp_params_bytes(const rp_model_config *cfg, rp_dtype compute_dtype)
{
    rp_model_config c = *cfg;
    rp_layer_desc *layers = NULL;
    int n = 0;
    if (rp_model_layout(&c, &layers, &n, NULL) != RP_OK)
        return 0;
    size_t total = 0;
    for (int l = 0; l < n; l++)
        total += state_bytes(layers[l].numel, compute_dtype);
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
        if ((size_t)(end - cur) < state_bytes(n, compute_dtype)) {
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
            ls->compute = cur;
            cur += rp_params_compute_array_bytes(n, compute_dtype);
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
    rp_f32_to_bf16_array(ls->master + lo, (uint16_t *)ls->compute + lo, hi - lo);
}

void rp_params_init_random(rp_params *p, uint64_t seed)
{
    for (int l = 0; l < p->nlayers; l++)
        rp_params_init_random_part(p, l, seed, 0, 1);
}

void rp_params_init_random_part(rp_params *p, int l, uint64_t seed, int part, int parts)
{
    const size_t n = p->layers[l].numel;
    const size_t lo = n * (size_t)part / (size_t)parts, hi = n * (size_t)(part + 1) / (size_t)parts;
    rp_layer_init_range(&p->cfg, &p->layers[l], seed, p->st[l].master, lo, hi);
    rp_params_sync_compute_range(p, l, lo, hi);
}

void rp_params_zero_grad(rp_params *p)
{
    for (int l = 0; l < p->nlayers; l++)
        memset(p->st[l].grad, 0, p->layers[l].numel * sizeof(float));
}

#define NAME_MAX_LEN 128 /* a parameter's name and a suffix */

rp_tensor_ref *rp_params_tensors(const rp_params *p, int sets, const rp_params_array *which,
                                 const char *const *suffix, int *n)
{
    int count = 0;
    for (int l = 0; l < p->nlayers; l++)
        count += p->layers[l].nparams;
    size_t nn = (size_t)(count ? count : 1) * (size_t)sets;
    rp_tensor_ref *t = calloc(1, nn * (sizeof *t + NAME_MAX_LEN));
    if (!t)
        return NULL;
    char *names = (char *)(t + nn);
    int k = 0;
    for (int set = 0; set < sets; set++)
        for (int l = 0; l < p->nlayers; l++)
            for (int i = 0; i < p->layers[l].nparams; i++, k++) {
                const rp_param_desc *pd = &p->layers[l].params[i];
                const rp_layer_state *ls = &p->st[l];
                float *base = which[set] == RP_PARAMS_M      ? ls->m
                              : which[set] == RP_PARAMS_V    ? ls->v
                              : which[set] == RP_PARAMS_GRAD ? ls->grad
                                                             : ls->master;
                char *name = names + (size_t)k * NAME_MAX_LEN;
                snprintf(name, NAME_MAX_LEN, "%s%s", pd->name, suffix[set]);
                t[k] = (rp_tensor_ref){name, pd->ndim, {pd->shape[0], pd->shape[1]},
                                       base + pd->offset, NULL};
            }
    *n = k;
    return t;
}

rp_tensor_ref *rp_params_master_tensors(const rp_params *p, int *n)
{
    static const rp_params_array master = RP_PARAMS_MASTER;
    static const char *const none = "";
    return rp_params_tensors(p, 1, &master, &none, n);
}

int rp_params_tensors_keep_layers(const rp_params *p, rp_tensor_ref *t, int sets, int first,
                                  int end)
{
    int k = 0, kept = 0;
    for (int set = 0; set < sets; set++)
        for (int l = 0; l < p->nlayers; l++)
            for (int i = 0; i < p->layers[l].nparams; i++, k++)
                if (l >= first && l < end)
                    t[kept++] = t[k];
    return kept;
}

/* The masters of layers [first, end) from a directory (path names it) or
 * one file (dir NULL), then their compute copies. */
static rp_status load_masters(rp_params *p, const char *dir, const char *path, int first,
                              int end, rp_error *err)
{
    int n = 0;
    rp_tensor_ref *t = rp_params_master_tensors(p, &n);
    if (!t)
        return rp_error_set(err, RP_ERR_NOMEM, "%s: the tensor list", dir ? dir : path);
    n = rp_params_tensors_keep_layers(p, t, 1, first, end);
    rp_status s = dir ? rp_model_dir_load(dir, t, n, &p->loaded_dtype, err)
                      : rp_model_dir_load_file(path, t, n, err);
    free(t);
    if (s == RP_OK)
        for (int l = first; l < end; l++)
            rp_params_sync_compute(p, l);
    return s;
}

rp_status rp_params_load_dir(rp_params *p, const char *dir, rp_error *err)
{
    return load_masters(p, dir, NULL, 0, p->nlayers, err);
}

void rp_params_layer_part(const rp_params *p, int part, int parts, int *first, int *end)
{
    rp_layer_part(p->layers, p->nlayers, part, parts, first, end);
}

rp_status rp_params_load_dir_part(rp_params *p, const char *dir, int part, int parts,
                                  rp_error *err)
{
    int first, end;
    rp_params_layer_part(p, part, parts, &first, &end);
    return load_masters(p, dir, NULL, first, end, err);
}

rp_status rp_params_load_file(rp_params *p, const char *path, rp_error *err)
{
    return load_masters(p, NULL, path, 0, p->nlayers, err);
}

rp_status rp_params_save_dir(const rp_params *p, const char *dir, rp_dtype dtype,
                             const char *template_config, const rp_companions *companions,
                             const rp_progress_hook *progress, rp_error *err)
{
    int n = 0;
    rp_tensor_ref *t = rp_params_master_tensors(p, &n);
    if (!t)
        return rp_error_set(err, RP_ERR_NOMEM, "%s: the tensor list", dir);
    rp_status s = rp_model_dir_save(dir, t, n, dtype, &p->cfg, template_config, companions,
                                    progress, err);
    free(t);
    return s;
}
