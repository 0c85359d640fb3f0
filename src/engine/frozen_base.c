/* LoRA's frozen base: mapped in place or converted once (frozen_base.h). */
#include "engine/frozen_base.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors_set.h"

struct rp_frozen_base {
    rp_layer_desc *layers;
    int nlayers;
    rp_dtype dtype;
    int mapped;
    rp_safetensors_set *set; /* open while mapped */
    rp_base_piece *pieces;   /* layer l's: pieces[first[l] .. first[l + 1]) */
    int *first;
};

/* The full model's layout, untied (frozen_base.h). */
static rp_status base_layout(const rp_model_config *cfg, rp_layer_desc **layers, int *n,
                             rp_error *err)
{
    rp_model_config c = *cfg;
    c.tie_word_embeddings = 0;
    return rp_model_base_layout(&c, layers, n, err);
}

/* The name the bytes of tensor `name` are stored under: a tied head's
 * matrix is the embedding's. */
static const char *source_name(const rp_model_config *cfg, const char *name)
{
    if (cfg->tie_word_embeddings && strcmp(name, "lm_head.weight") == 0)
        return "model.embed_tokens.weight";
    return name;
}

/* Tensor `name` of the model directory's set, usable in place as dtype:
 * present with the layout's shape (an error naming it otherwise), and
 * *usable = 1 when its dtype is `dtype` and its data is aligned to it. */
static rp_status find_tensor(rp_safetensors_set *set, const char *dir, const rp_param_desc *p,
                             const char *name, rp_dtype dtype, rp_safetensors_tensor *t,
                             int *usable, rp_error *err)
{
    const char *file = NULL;
    RP_TRY(rp_safetensors_set_find(set, name, t, &file, err));
    int64_t want[2] = {p->shape[0], p->shape[1]};
    int same = t->ndim == p->ndim && t->shape[0] == want[0] && (p->ndim == 1 || t->shape[1] == want[1]);
    if (!same) {
        char a[64], b[64];
        return rp_error_set(err, RP_ERR_FORMAT, "%s: tensor '%s' has shape %s, the model needs %s",
                            file ? file : dir, name, rp_safetensors_shape_str(t->ndim, t->shape, a, sizeof a),
                            rp_safetensors_shape_str(p->ndim, want, b, sizeof b));
    }
    const size_t es = rp_dtype_size(dtype);
    *usable = t->dtype_supported && t->dtype == dtype && ((uintptr_t)t->data % es) == 0;
    return RP_OK;
}

/* Store bytes of one tensor (a tied head's matrix takes none). */
static size_t tensor_store_bytes(const rp_model_config *cfg, const rp_param_desc *p, rp_dtype dtype)
{
    if (source_name(cfg, p->name) != p->name)
        return 0;
    return (p->numel * rp_dtype_size(dtype) + 63) & ~(size_t)63;
}

rp_status rp_frozen_base_plan(const rp_model_config *cfg, const char *model_dir, rp_dtype dtype,
                              int *mapped, size_t *store_bytes, rp_error *err)
{
    *mapped = 0;
    *store_bytes = 0;
    rp_layer_desc *L = NULL;
    int n = 0;
    RP_TRY(base_layout(cfg, &L, &n, err));
    rp_safetensors_set *set = NULL;
    rp_status s = model_dir ? rp_safetensors_set_open_dir(model_dir, &set, err) : RP_OK;
    int all = set != NULL;
    size_t bytes = 0;
    for (int l = 0; s == RP_OK && l < n; l++)
        for (int i = 0; s == RP_OK && i < L[l].nparams; i++) {
            const rp_param_desc *p = &L[l].params[i];
            bytes += tensor_store_bytes(cfg, p, dtype);
            if (set) {
                rp_safetensors_tensor t;
                int usable = 0;
                s = find_tensor(set, model_dir, p, source_name(cfg, p->name), dtype, &t, &usable,
                                err);
                all &= usable;
            }
        }
    rp_safetensors_set_close(&set);
    free(L);
    if (s == RP_OK) {
        *mapped = all;
        *store_bytes = all ? 0 : bytes;
    }
    return s;
}

/* Fill the store's copy of every tensor: converted from the model
 * directory, or initialised randomly as the full model would be. */
static rp_status fill_store(rp_frozen_base *b, const rp_model_config *cfg, const char *model_dir,
                            uint64_t seed, rp_error *err)
{
    rp_safetensors_set *set = NULL;
    if (model_dir)
        RP_TRY(rp_safetensors_set_open_dir(model_dir, &set, err));
    rp_status s = RP_OK;
    for (int l = 0; s == RP_OK && l < b->nlayers; l++) {
        const rp_layer_desc *L = &b->layers[l];
        float *tmp = malloc((L->numel ? L->numel : 1) * sizeof(float));
        if (!tmp) {
            s = rp_error_set(err, RP_ERR_NOMEM, "frozen base: layer %d (%zu MiB)", l,
                             L->numel * sizeof(float) >> 20);
            break;
        }
        if (!set)
            rp_layer_init(cfg, L, seed, tmp);
        for (int i = 0; s == RP_OK && i < L->nparams; i++) {
            const rp_param_desc *p = &L->params[i];
            if (source_name(cfg, p->name) != p->name)
                continue; /* the embedding's bytes */
            if (set)
                s = rp_safetensors_set_read_f32(set, p->name, p->ndim, p->shape, tmp + p->offset,
                                                err);
            void *dst = (void *)b->pieces[b->first[l] + i].src;
            if (s == RP_OK && b->dtype == RP_F32)
                memcpy(dst, tmp + p->offset, p->numel * sizeof(float));
            else if (s == RP_OK)
                rp_f32_to_bf16_array(tmp + p->offset, dst, p->numel);
        }
        free(tmp);
    }
    rp_safetensors_set_close(&set);
    return s;
}

rp_status rp_frozen_base_open(const rp_model_config *cfg, const char *model_dir, rp_dtype dtype,
                              void *store, int fill, uint64_t seed, rp_frozen_base **out,
                              rp_error *err)
{
    *out = NULL;
    if (dtype != RP_F32 && dtype != RP_BF16)
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "frozen base: dtype %s",
                            rp_dtype_name(dtype));
    rp_frozen_base *b = calloc(1, sizeof *b);
    if (!b)
        return rp_error_set(err, RP_ERR_NOMEM, "frozen base");
    b->dtype = dtype;
    b->mapped = store == NULL;
    rp_status s = base_layout(cfg, &b->layers, &b->nlayers, err);
    int total = 0;
    for (int l = 0; s == RP_OK && l < b->nlayers; l++)
        total += b->layers[l].nparams;
    if (s == RP_OK) {
        b->pieces = calloc((size_t)(total ? total : 1), sizeof *b->pieces);
        b->first = calloc((size_t)b->nlayers + 1, sizeof *b->first);
        if (!b->pieces || !b->first)
            s = rp_error_set(err, RP_ERR_NOMEM, "frozen base: %d tensors", total);
    }
    if (s == RP_OK && b->mapped)
        s = model_dir ? rp_safetensors_set_open_dir(model_dir, &b->set, err)
                      : rp_error_set(err, RP_ERR_INVALID_ARG, "frozen base: nothing to map");
    /* the pieces: into the mapping, or into the store tensor after tensor */
    size_t at = 0;
    int k = 0;
    for (int l = 0; s == RP_OK && l < b->nlayers; l++) {
        b->first[l] = k;
        for (int i = 0; s == RP_OK && i < b->layers[l].nparams; i++, k++) {
            const rp_param_desc *p = &b->layers[l].params[i];
            rp_base_piece *pc = &b->pieces[k];
            pc->at = p->offset;
            pc->numel = p->numel;
            if (b->mapped) {
                rp_safetensors_tensor t;
                int usable = 0;
                s = find_tensor(b->set, model_dir, p, source_name(cfg, p->name), dtype, &t,
                                &usable, err);
                if (s == RP_OK && !usable)
                    s = rp_error_set(err, RP_ERR_FORMAT, "%s: tensor '%s' cannot be read in "
                                     "place as %s", model_dir, p->name, rp_dtype_name(dtype));
                pc->src = t.data;
            } else if (source_name(cfg, p->name) != p->name) {
                pc->src = b->pieces[b->first[0]].src; /* the embedding, laid out first */
            } else {
                pc->src = (char *)store + at;
                at += tensor_store_bytes(cfg, p, dtype);
            }
        }
    }
    if (s == RP_OK)
        b->first[b->nlayers] = k;
    if (s == RP_OK && !b->mapped && fill)
        s = fill_store(b, cfg, model_dir, seed, err);
    if (s != RP_OK) {
        rp_frozen_base_close(&b);
        return s;
    }
    *out = b;
    return RP_OK;
}

void rp_frozen_base_close(rp_frozen_base **bp)
{
    rp_frozen_base *b = bp ? *bp : NULL;
    if (!b)
        return;
    rp_safetensors_set_close(&b->set);
    free(b->layers);
    free(b->pieces);
    free(b->first);
    free(b);
    *bp = NULL;
}

size_t rp_frozen_base_numel(const rp_frozen_base *b, int l)
{
    return b->layers[l].numel;
}

int rp_frozen_base_pieces(const rp_frozen_base *b, int l, const rp_base_piece **pieces)
{
    *pieces = b->pieces + b->first[l];
    return b->first[l + 1] - b->first[l];
}

const rp_layer_desc *rp_frozen_base_layer(const rp_frozen_base *b, int l)
{
    return &b->layers[l];
}

int rp_frozen_base_mapped(const rp_frozen_base *b)
{
    return b->mapped;
}

const void *rp_frozen_base_tensor(const rp_frozen_base *b, int l, const char *name)
{
    const rp_layer_desc *L = &b->layers[l];
    for (int i = 0; i < L->nparams; i++)
        if (strcmp(L->params[i].name, name) == 0)
            return b->pieces[b->first[l] + i].src;
    return NULL;
}
