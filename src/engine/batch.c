/* The batch of an iteration as the training contract deals it
 * (io's dataset): the tokens of a microbatch, the counted targets of an
 * iteration, the embedding rows a pipeline's tokens read. */
#include <stdlib.h>

#include "engine/engine_impl.h"

/* Microbatch m of this node is microbatch micro_base + m of the iteration,
 * whose B samples every node deals the same way. */
int64_t rp_engine_counted(const rp_engine *e, int64_t t)
{
    int64_t B = e->batch_micro * e->samples_per_micro, n = 0; /* every node's */
    for (int64_t j = 0; j < B; j++)
        n += rp_dataset_counted(e->ds, rp_dataset_sample_of(e->ds, t, B, j));
    return n;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int64_t rp_engine_rows(const rp_engine *e, int64_t t, int g, int32_t *ids)
{
    int32_t *bt = malloc((size_t)e->tokens_per_micro * sizeof(int32_t));
    uint8_t *bm = malloc((size_t)e->tokens_per_micro);
    if (!bt || !bm) {
        free(bt);
        free(bm);
        return -1;
    }
    /* the inputs of the pipeline's microbatches */
    for (int64_t i = 0; i < e->micro_per_pipeline; i++)
        rp_engine_tokens(e, t, g * e->micro_per_pipeline + i, ids + i * e->tokens_per_micro, bt,
                         bm);
    free(bt);
    free(bm);
    return rp_engine_sort_unique(ids, e->micro_per_pipeline * e->tokens_per_micro);
}

int64_t rp_engine_sort_unique(int32_t *ids, int64_t n)
{
    qsort(ids, (size_t)n, sizeof *ids, cmp_i32);
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (k == 0 || ids[i] != ids[k - 1])
            ids[k++] = ids[i];
    return k;
}

/* The dataset's sample j of this node's microbatch m in iteration t. */
static int64_t sample_of(const rp_engine *e, int64_t t, int64_t m, int64_t j)
{
    int64_t B = e->batch_micro * e->samples_per_micro;
    return rp_dataset_sample_of(e->ds, t, B, (e->micro_base + m) * e->samples_per_micro + j);
}

void rp_engine_segments(const rp_engine *e, int64_t t, int64_t m, int32_t *seg_start)
{
    for (int64_t j = 0; j < e->samples_per_micro; j++)
        rp_dataset_segments(e->ds, sample_of(e, t, m, j), seg_start + j * e->seq_len);
}

void rp_engine_tokens(const rp_engine *e, int64_t t, int64_t m, int32_t *inputs, int32_t *targets,
                      uint8_t *mask)
{
    for (int64_t j = 0; j < e->samples_per_micro; j++) {
        int64_t sample = sample_of(e, t, m, j);
        rp_dataset_fill(e->ds, sample, inputs + j * e->seq_len, targets + j * e->seq_len,
                        mask + j * e->seq_len);
    }
}
