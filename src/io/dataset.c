#include "io/dataset.h"

#include <stdlib.h>

#include "io/npy.h"

struct rp_dataset {
    rp_npy *tokens;
    rp_npy *mask; /* NULL: every target counts */
    int64_t len, seq_len, n;
};

rp_status rp_dataset_open(const char *tokens_path, const char *mask_path, int64_t seq_len,
                          int64_t vocab, rp_dataset **out, rp_error *err)
{
    *out = NULL;
    rp_dataset *ds = calloc(1, sizeof *ds);
    if (!ds)
        return rp_error_set(err, RP_ERR_NOMEM, "allocating the dataset");
    rp_status s = rp_npy_open(tokens_path, &ds->tokens, err);
    if (s == RP_OK)
        s = rp_npy_check_tokens(ds->tokens, vocab, err);
    if (s == RP_OK && mask_path)
        s = rp_npy_open_mask(mask_path, ds->tokens, &ds->mask, err);
    if (s == RP_OK) {
        ds->len = rp_npy_length(ds->tokens);
        ds->seq_len = seq_len;
        ds->n = ds->len > 0 ? (ds->len - 1) / seq_len : 0;
        if (ds->n < 1)
            s = rp_error_set(err, RP_ERR_RANGE,
                             "%s: %lld tokens hold no sample of --seq-len %lld (need at least "
                             "%lld)", tokens_path, (long long)ds->len, (long long)seq_len,
                             (long long)seq_len + 1);
    }
    if (s != RP_OK) {
        rp_dataset_close(&ds);
        return s;
    }
    *out = ds;
    return RP_OK;
}

void rp_dataset_close(rp_dataset **pds)
{
    rp_dataset *ds = pds ? *pds : NULL;
    if (!ds)
        return;
    rp_npy_close(&ds->tokens);
    rp_npy_close(&ds->mask);
    free(ds);
    *pds = NULL;
}

int64_t rp_dataset_samples(const rp_dataset *ds)
{
    return ds->n;
}

int64_t rp_dataset_tokens(const rp_dataset *ds)
{
    return ds->len;
}

int64_t rp_dataset_sample_of(const rp_dataset *ds, int64_t step, int64_t batch, int64_t j)
{
    /* ((k-1)*B + j) mod n, in 128 bits so long runs cannot overflow */
    unsigned __int128 idx = (unsigned __int128)(step - 1) * (uint64_t)batch + (uint64_t)j;
    return (int64_t)(idx % (uint64_t)ds->n);
}

int64_t rp_dataset_fill(const rp_dataset *ds, int64_t i, int32_t *inputs, int32_t *targets,
                        uint8_t *mask)
{
    int64_t S = ds->seq_len, first = i * S, counted = 0;
    /* Tokens were range-checked at open, so every value fits an int32. */
    for (int64_t t = 0; t < S; t++) {
        inputs[t] = (int32_t)rp_npy_get(ds->tokens, first + t);
        targets[t] = (int32_t)rp_npy_get(ds->tokens, first + t + 1);
        uint8_t c = ds->mask ? (rp_npy_get(ds->mask, first + t + 1) == 1) : 1;
        mask[t] = c;
        counted += c;
    }
    return counted;
}

int64_t rp_dataset_counted(const rp_dataset *ds, int64_t i)
{
    if (!ds->mask)
        return ds->seq_len;
    int64_t S = ds->seq_len, first = i * S, counted = 0;
    for (int64_t t = 0; t < S; t++)
        counted += rp_npy_get(ds->mask, first + t + 1) == 1;
    return counted;
}
