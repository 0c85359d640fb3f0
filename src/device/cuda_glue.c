/* The CUDA back end's calls into the attention and cross-entropy kernels
 * (src/kernels/cuda/attention.h, xent.h): the one place that knows their
 * signatures and their error convention (-1 / -2 with a static message). */
#include "config.h"

#include <math.h>

#include "device/cuda_impl.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/xent.h"

static rp_attn_shape shape_of(const rp_model_config *cfg, int64_t nseq, int64_t seqlen)
{
    rp_attn_shape s = {.nseq = nseq,
                       .seqlen = seqlen,
                       .nheads = cfg->num_attention_heads,
                       .nkv = cfg->num_key_value_heads,
                       .head_dim = cfg->head_dim,
                       .block = RP_ATTN_BLOCK, /* ignored by the GPU kernels */
                       .scale = 1.0f / sqrtf((float)cfg->head_dim)};
    return s;
}

static rp_status failed(const cuda_impl *c, const char *what, int rc, const char *why,
                        rp_error *err)
{
    cudaGetLastError();
    return rp_error_set(err, rc == -1 ? RP_ERR_INVALID_ARG : RP_ERR_CUDA, "cuda device %d: %s: %s",
                        c->ordinal, what, why ? why : "failed");
}

/* delta = rowsum(dout * o), [tokens, heads] floats */
size_t rp_cuda_be_attn_scratch_floats(const rp_model_config *cfg, int64_t nseq, int64_t seqlen)
{
    return (size_t)(nseq * seqlen * cfg->num_attention_heads);
}

rp_status rp_cuda_be_attn_forward(cuda_impl *c, const rp_model_config *cfg, int64_t nseq,
                                  int64_t seqlen, const uint16_t *q, const uint16_t *k,
                                  const uint16_t *v, uint16_t *o, float *lse, rp_error *err)
{
    rp_attn_shape s = shape_of(cfg, nseq, seqlen);
    const char *why = NULL;
    int rc = rp_cuda_attn_forward_bf16(&s, q, k, v, NULL, o, lse, c->compute, &why);
    return rc ? failed(c, "attention forward", rc, why, err) : RP_OK;
}

rp_status rp_cuda_be_attn_backward(cuda_impl *c, const rp_model_config *cfg, int64_t nseq,
                                   int64_t seqlen, const uint16_t *q, const uint16_t *k,
                                   const uint16_t *v, const uint16_t *o, const float *lse,
                                   const uint16_t *dout, float *dq, float *dk, float *dv,
                                   float *scratch, rp_error *err)
{
    rp_attn_shape s = shape_of(cfg, nseq, seqlen);
    const char *why = NULL;
    int rc = rp_cuda_attn_delta_bf16(&s, o, dout, scratch, c->compute, &why);
    if (rc)
        return failed(c, "attention backward (delta)", rc, why, err);
    rc = rp_cuda_attn_backward_bf16(&s, q, k, v, dout, lse, scratch, dq, dk, dv, c->compute, &why);
    return rc ? failed(c, "attention backward", rc, why, err) : RP_OK;
}

rp_status rp_cuda_be_xent(cuda_impl *c, float *logits, int64_t rows, int64_t vocab,
                          const int32_t *targets, const uint8_t *counted, float scale,
                          double *loss, int grad, rp_error *err)
{
    const char *why = NULL;
    int rc = rp_cuda_xent_chunk(logits, rows, vocab, targets, counted, scale, grad, loss, NULL,
                                c->compute, &why);
    return rc ? failed(c, "cross-entropy", rc, why, err) : RP_OK;
}
