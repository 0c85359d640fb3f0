/* Where a layer call finds its weights (see stage_weights.h). */
#include "engine/stage_weights.h"

#include "model/layout.h"

rp_dtype rp_stage_weights_dtype(const rp_engine *e, int l)
{
    int block = l > 0 && l < e->num_layers - 1;
    if (block || !e->base_in_place)
        return e->p->compute_dtype;
    return rp_frozen_base_dtype(e->base);
}

int rp_stage_base_copied(const rp_engine *e, int l)
{
    return e->lora && rp_frozen_base_copied(e->base_in_place, rp_frozen_base_fp8(e->base), l,
                                            e->num_layers);
}

int rp_stage_base_per_use(const rp_engine *e, int l)
{
    return e->lora && rp_frozen_base_per_use(rp_frozen_base_fp8(e->base), l, e->num_layers);
}

const void *rp_stage_weights_trainable(const rp_engine *e, const rp_stage_weights *w, int l,
                                       size_t at)
{
    return (const char *)w->buffer +
           (w->offsets[l - w->first] + at) * rp_dtype_size(e->p->compute_dtype);
}

/* LoRA: layer l's frozen base copied into the buffer, at element `at`. */
static const void *base_at(const rp_engine *e, const rp_stage_weights *w, int l, size_t at)
{
    return (const char *)w->buffer +
           (w->base_offsets[l - w->first] + at) * rp_dtype_size(e->p->compute_dtype);
}

const void *rp_stage_weights_layer(const rp_engine *e, const rp_stage_weights *w, int l)
{
    if (l == 0 && w->embedding)
        return w->embedding;
    if (rp_stage_base_per_use(e, l))
        return w->base_scratch;
    if (e->lora && !rp_stage_base_copied(e, l))
        return NULL;
    return e->lora ? base_at(e, w, l, 0) : rp_stage_weights_trainable(e, w, l, 0);
}

void rp_stage_weights_head(const rp_engine *e, const rp_stage_weights *w, int head,
                           rp_head_weights *out)
{
    *out = (rp_head_weights){0};
    if (e->lora && e->base_in_place) { /* frozen, where it lies */
        out->norm = rp_frozen_base_tensor(e->base, head, "model.norm.weight");
        out->lm = rp_frozen_base_tensor(e->base, head, "lm_head.weight");
    } else if (e->lora) { /* frozen: the head's base holds both (a tied matrix as its own) */
        const rp_layer_desc *hd = rp_frozen_base_layer(e->base, head);
        out->norm = base_at(e, w, head, rp_layer_find_param(hd, "model.norm.weight")->offset);
        out->lm = base_at(e, w, head, rp_layer_find_param(hd, "lm_head.weight")->offset);
    } else {
        const rp_layer_desc *hd = &e->p->layers[head];
        out->trainable = 1;
        out->norm_at = rp_layer_find_param(hd, "model.norm.weight")->offset;
        out->norm = rp_stage_weights_trainable(e, w, head, out->norm_at);
        out->lm_tied = e->tied;
        if (e->tied) {
            out->lm = w->tied_matrix;
        } else {
            out->lm_at = rp_layer_find_param(hd, "lm_head.weight")->offset;
            out->lm = rp_stage_weights_trainable(e, w, head, out->lm_at);
        }
    }
}
