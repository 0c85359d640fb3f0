/* Token data as the training contract defines it: S = seq_len, n =
 * floor((len - 1) / S) samples; sample i is tokens[i*S .. i*S+S] (inputs the
 * first S, targets the last S); step k (1-based) uses position
 * p = (k-1)*B + j, j < B, which is sample p mod n, or with shuffling sample
 * perm_e(p mod n) of epoch e = floor(p / n); target position p counts iff
 * mask[p] == 1. */
#ifndef RP_IO_DATASET_H
#define RP_IO_DATASET_H

#include <stdint.h>

#include "core/error.h"

typedef struct rp_dataset rp_dataset;

/* Open tokens (and the optional mask, NULL for none), check every token is
 * in [0, vocab) and that there is at least one sample. */
rp_status rp_dataset_open(const char *tokens_path, const char *mask_path, int64_t seq_len,
                          int64_t vocab, rp_dataset **out, rp_error *err);
void rp_dataset_close(rp_dataset **ds);

int64_t rp_dataset_samples(const rp_dataset *ds);
int64_t rp_dataset_tokens(const rp_dataset *ds);

/* Visit the samples of epoch e (0-based) in a permutation drawn from the
 * counter-based generator keyed by (seed, e): Fisher-Yates over 0..n-1,
 * for i = n-1 down to 1 swapping i with floor(w * (i+1) / 2^64), where w
 * is the first two 32-bit words (high first) of Philox4x32-10(seed,
 * stream = rp_rng_stream_id("shuffle") + e, index = i). The permutations
 * of the two latest epochs asked for are kept (n int64 each); lookups are
 * thread-safe. */
rp_status rp_dataset_shuffle(rp_dataset *ds, uint64_t seed, rp_error *err);

/* Index of the j-th sample of step k (1-based) with batch size B. */
int64_t rp_dataset_sample_of(const rp_dataset *ds, int64_t step, int64_t batch, int64_t j);

/* Fill S inputs, S targets and S target-mask bytes of sample i; returns how
 * many of its targets count. */
int64_t rp_dataset_fill(const rp_dataset *ds, int64_t i, int32_t *inputs, int32_t *targets,
                        uint8_t *mask);

/* How many targets of sample i count (what rp_dataset_fill returns), without
 * copying anything. */
int64_t rp_dataset_counted(const rp_dataset *ds, int64_t i);

/* --documents: start offsets of documents in the tokens (any integer .npy;
 * first 0, strictly increasing, each below the token count; errors name the
 * file, the index and the value). Then inside a sample a token belongs to
 * the segment that starts at the latest document start at or before it, or
 * at the sample's first token; and a target that would predict a
 * document's first token from the previous document does not count
 * (rp_dataset_fill and rp_dataset_counted leave it out). */
rp_status rp_dataset_set_documents(rp_dataset *ds, const char *path, rp_error *err);
int rp_dataset_has_documents(const rp_dataset *ds);
/* For each of sample i's S tokens, the index in the sample of its
 * segment's first token (rp_attn_shape's seg_start). */
void rp_dataset_segments(const rp_dataset *ds, int64_t i, int32_t *seg_start);

#endif
