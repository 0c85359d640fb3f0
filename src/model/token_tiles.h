/* How a block's MLP (dense or mixture of experts, LoRA included) walks
 * the tokens of a microbatch, so that its scratch is bounded per token and
 * not per token x intermediate width (the longest sequences: issue 34).
 * The rule, in one place:
 *   tile:  every GEMM of the MLP (forward, input gradient, weight
 *          gradient) reads whole tiles of `tile` tokens in token order (the
 *          last tile of a microbatch holds what is left); a weight gradient
 *          is the sum of its tiles' GEMMs, added in token order. The tile is
 *          part of the numerics: the bits depend on it.
 *   chunk: the tiles whose intermediates are alive at once, a whole number
 *          of tiles, chosen from the memory an executor has. The bits never
 *          depend on it.
 * A microbatch shorter than one tile is one tile: one GEMM over all its
 * tokens, as before tiles existed. */
#ifndef RP_MODEL_TOKEN_TILES_H
#define RP_MODEL_TOKEN_TILES_H

#include <stdint.h>

#include "io/config.h"

/* Tokens per tile unless the run sets cfg->token_tile. */
#define RP_TOKEN_TILE_DEFAULT 1024

/* Tokens of a tile for a microbatch of T tokens (at least 1). */
static inline int64_t rp_token_tile(const rp_model_config *cfg, int64_t T)
{
    int64_t tile = cfg->token_tile > 0 ? cfg->token_tile : RP_TOKEN_TILE_DEFAULT;
    if (tile > T)
        tile = T;
    return tile > 0 ? tile : 1;
}

#endif
