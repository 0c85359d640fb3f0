/* Token embedding (layer 0): a row gather forward, a row scatter-add
 * backward. */
#include <string.h>

#include "model/layers.h"

static rp_status check_tokens(const rp_model_config *cfg, const int32_t *tokens, int64_t T,
                              const char *what, rp_error *err)
{
    for (int64_t t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= cfg->vocab_size)
            return rp_error_set(err, RP_ERR_RANGE,
                                "%s: token %d at position %lld is outside the vocabulary [0, %lld)",
                                what, (int)tokens[t], (long long)t, (long long)cfg->vocab_size);
    return RP_OK;
}

rp_status rp_embed_forward(const rp_model_config *cfg, const float *W, const int32_t *tokens,
                           int64_t T, float *out, rp_error *err)
{
    RP_TRY(check_tokens(cfg, tokens, T, "embedding forward", err));
    const int64_t H = cfg->hidden_size;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T; t++)
        memcpy(out + t * H, W + (int64_t)tokens[t] * H, sizeof(float) * (size_t)H);
    return RP_OK;
}

rp_status rp_embed_backward(const rp_model_config *cfg, const int32_t *tokens, int64_t T,
                            const float *dout, float *dW, rp_error *err)
{
    RP_TRY(check_tokens(cfg, tokens, T, "embedding backward", err));
    const int64_t H = cfg->hidden_size, cw = 64, nchunks = (H + cw - 1) / cw;
    /* Each thread owns a slice of columns and adds the tokens in order, so a
     * token that occurs twice is summed in the same order on every run. */
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < nchunks; c++) {
        const int64_t j0 = c * cw, j1 = j0 + cw < H ? j0 + cw : H;
        for (int64_t t = 0; t < T; t++) {
            float *row = dW + (int64_t)tokens[t] * H;
            const float *d = dout + t * H;
            for (int64_t j = j0; j < j1; j++)
                row[j] += d[j];
        }
    }
    return RP_OK;
}
