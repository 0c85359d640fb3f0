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

/* Tokens of a chunk unless the run sets cfg->chunk_tiles: a microbatch of
 * up to RP_CHUNK_WHOLE_TOKENS is one chunk, and a longer one walks the
 * whole tiles of up to RP_CHUNK_TOKENS_DEFAULT. A dense MLP that is one
 * chunk keeps g, u and m for its backward (model/block.c), as before tiles
 * existed; one of several chunks makes them again from h2 in the backward,
 * which costs the gate and up GEMMs once more but keeps nothing of tokens
 * x intermediate width. A mixture of experts keeps only its routing and
 * always makes its chunks' expert rows again (model/moe.h). A chunk of Qwen3-8B's width (14336) of 2048 tokens
 * takes about 0.5 GiB of scratch on a bf16 table, and a chunk longer than a
 * few tiles saves nothing but the launches of elementwise ops (every GEMM
 * is one tile's anyway). */
#define RP_CHUNK_WHOLE_TOKENS 8192
#define RP_CHUNK_TOKENS_DEFAULT 2048

/* Tokens of the chunk for a microbatch of T tokens: cfg->chunk_tiles
 * tiles, else the default above; never more than T (the whole microbatch
 * when it is that short), and always whole tiles (a multiple of
 * rp_token_tile's, or T). */
static inline int64_t rp_chunk_tokens(const rp_model_config *cfg, int64_t T)
{
    const int64_t tile = rp_token_tile(cfg, T);
    if (cfg->chunk_tiles <= 0 && T <= RP_CHUNK_WHOLE_TOKENS)
        return T;
    int64_t tiles = cfg->chunk_tiles > 0 ? cfg->chunk_tiles : RP_CHUNK_TOKENS_DEFAULT / tile;
    if (tiles < 1)
        tiles = 1;
    return tiles >= (T + tile - 1) / tile ? T : tiles * tile;
}

/* The run's settings into cfg: token_tile tokens per tile and chunk_tokens
 * tokens a chunk (rounded down to whole tiles, at least one); 0: the
 * defaults. */
static inline void rp_token_tiles_set(rp_model_config *cfg, int64_t token_tile,
                                      int64_t chunk_tokens)
{
    const int64_t tile = token_tile > 0 ? token_tile : RP_TOKEN_TILE_DEFAULT;
    cfg->token_tile = token_tile > 0 ? token_tile : 0;
    cfg->chunk_tiles = chunk_tokens <= 0 ? 0 : chunk_tokens < tile ? 1 : chunk_tokens / tile;
}

#endif
