#include "engine/step.h"

#include <stdlib.h>
#include <string.h>

#include "model/layers.h"

struct rp_step_buffers {
    int64_t nseq, seqlen, T;
    float **acts;  /* acts[i]: input of layer i+1 (acts[0] = embedding output) */
    float *grad;   /* gradient flowing down, [T, H] */
    float *ws;     /* workspace shared by blocks and head */
    int nacts;
};

static float *alloc_floats(size_t n)
{
    void *q = NULL;
    return posix_memalign(&q, 64, (n ? n : 1) * sizeof(float)) == 0 ? q : NULL;
}

rp_status rp_step_buffers_create(const rp_params *p, int64_t nseq, int64_t seqlen,
                                 rp_step_buffers **out, rp_error *err)
{
    *out = NULL;
    rp_step_buffers *b = calloc(1, sizeof *b);
    if (!b)
        return rp_error_set(err, RP_ERR_NOMEM, "allocating step buffers");
    const rp_model_config *cfg = &p->cfg;
    int64_t H = cfg->hidden_size;
    b->nseq = nseq;
    b->seqlen = seqlen;
    b->T = nseq * seqlen;
    b->nacts = (int)cfg->num_hidden_layers + 1;
    size_t wsb = rp_block_workspace_floats(cfg, nseq, seqlen);
    size_t wsh = rp_head_workspace_floats(cfg, b->T, RP_HEAD_CHUNK);
    b->acts = calloc((size_t)b->nacts, sizeof *b->acts);
    b->grad = alloc_floats((size_t)(b->T * H));
    b->ws = alloc_floats(wsb > wsh ? wsb : wsh);
    int ok = b->acts && b->grad && b->ws;
    for (int i = 0; ok && i < b->nacts; i++)
        ok = (b->acts[i] = alloc_floats((size_t)(b->T * H))) != NULL;
    if (!ok) {
        rp_step_buffers_destroy(&b);
        return rp_error_set(err, RP_ERR_NOMEM,
                            "allocating activations for %lld tokens x %d layers",
                            (long long)(nseq * seqlen), (int)cfg->num_hidden_layers);
    }
    *out = b;
    return RP_OK;
}

void rp_step_buffers_destroy(rp_step_buffers **pb)
{
    rp_step_buffers *b = pb ? *pb : NULL;
    if (!b)
        return;
    for (int i = 0; b->acts && i < b->nacts; i++)
        free(b->acts[i]);
    free(b->acts);
    free(b->grad);
    free(b->ws);
    free(b);
    *pb = NULL;
}

rp_status rp_step_microbatch(rp_params *p, rp_step_buffers *b, const int32_t *inputs,
                             const int32_t *targets, const uint8_t *mask, float scale,
                             double *loss_sum, rp_error *err)
{
    const rp_model_config *cfg = &p->cfg;
    int L = (int)cfg->num_hidden_layers, head = p->nlayers - 1;
    RP_TRY(rp_embed_forward(cfg, p->st[0].compute, inputs, b->T, b->acts[0], err));
    for (int l = 1; l <= L; l++)
        rp_block_forward(cfg, p->st[l].compute, b->acts[l - 1], b->acts[l], b->nseq, b->seqlen,
                         b->ws);

    const float *lm_w;
    float *lm_g;
    rp_params_lm_head(p, &lm_w, &lm_g);
    const rp_param_desc *nd = rp_layer_find_param(&p->layers[head], "model.norm.weight");
    RP_TRY(rp_head_forward_backward(cfg, p->st[head].compute + nd->offset, lm_w, b->acts[L],
                                    targets, mask, b->T, scale, b->grad,
                                    p->st[head].grad + nd->offset, lm_g, RP_HEAD_CHUNK, b->ws,
                                    loss_sum, NULL, err));
    for (int l = L; l >= 1; l--)
        rp_block_backward(cfg, p->st[l].compute, b->acts[l - 1], b->grad, b->grad,
                          p->st[l].grad, b->nseq, b->seqlen, b->ws);
    return rp_embed_backward(cfg, inputs, b->T, b->grad, p->st[0].grad, err);
}
