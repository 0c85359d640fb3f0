/* Token embedding (layer 0): a row gather forward, a row scatter-add
 * backward, each after the token check. */
#include "model/layers.h"

rp_status rp_embed_forward(const rp_kernels *k, const rp_model_config *cfg, const void *W,
                           rp_dtype W_dtype, const int32_t *tokens, int64_t T, float *out,
                           rp_error *err)
{
    RP_TRY(k->ops->check_ids(k->state, tokens, NULL, T, cfg->vocab_size, "embedding forward",
                             "token", err));
    if (T <= 0)
        return RP_OK;
    return k->ops->embed_forward(k->state, W, W_dtype, tokens, T, cfg->hidden_size, out, err);
}

rp_status rp_embed_backward(const rp_kernels *k, const rp_model_config *cfg,
                            const int32_t *tokens, int64_t T, const float *dout, float *dW,
                            rp_error *err)
{
    RP_TRY(k->ops->check_ids(k->state, tokens, NULL, T, cfg->vocab_size, "embedding backward",
                             "token", err));
    if (T <= 0)
        return RP_OK;
    return k->ops->embed_backward(k->state, tokens, T, cfg->hidden_size, cfg->vocab_size, dout,
                                  dW, err);
}
