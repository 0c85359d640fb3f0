#include "io/dataset.h"

#include <pthread.h>
#include <stdlib.h>

#include "core/rng.h"
#include "io/npy.h"

/* One epoch's permutation. */
typedef struct epoch_order {
    int64_t epoch; /* -1: empty */
    int64_t *perm;
} epoch_order;

struct rp_dataset {
    rp_npy *tokens;
    rp_npy *mask; /* NULL: every target counts */
    int64_t len, seq_len, n;
    int64_t *doc; /* --documents: the start offsets, sorted, doc[0] = 0 (NULL: none) */
    int64_t ndoc;
    /* --shuffle: the two latest epochs' orders, the older replaced first */
    int shuffle;
    uint64_t seed;
    pthread_mutex_t lock;
    epoch_order order[2];
    int older;
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
    free(ds->doc);
    if (ds->shuffle)
        pthread_mutex_destroy(&ds->lock);
    free(ds->order[0].perm);
    free(ds->order[1].perm);
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

rp_status rp_dataset_shuffle(rp_dataset *ds, uint64_t seed, rp_error *err)
{
    for (int k = 0; k < 2; k++) {
        ds->order[k].epoch = -1;
        ds->order[k].perm = malloc((size_t)ds->n * sizeof(int64_t));
        if (!ds->order[k].perm)
            return rp_error_set(err, RP_ERR_NOMEM,
                                "--shuffle: the order of %lld samples (%lld bytes)",
                                (long long)ds->n, (long long)ds->n * 8);
    }
    if (pthread_mutex_init(&ds->lock, NULL) != 0)
        return rp_error_set(err, RP_ERR_NOMEM, "--shuffle: a mutex");
    ds->seed = seed;
    ds->shuffle = 1;
    return RP_OK;
}

/* Fisher-Yates, as rp_dataset_shuffle describes. */
static void draw_order(int64_t *perm, int64_t n, uint64_t seed, int64_t epoch)
{
    const uint64_t stream = rp_rng_stream_id("shuffle") + (uint64_t)epoch;
    for (int64_t k = 0; k < n; k++)
        perm[k] = k;
    for (int64_t i = n - 1; i > 0; i--) {
        uint32_t w[4];
        rp_philox4x32(seed, stream, (uint64_t)i, w);
        uint64_t r = (uint64_t)w[0] << 32 | w[1];
        int64_t j = (int64_t)(((unsigned __int128)r * (uint64_t)(i + 1)) >> 64);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static int64_t shuffled(rp_dataset *ds, int64_t epoch, int64_t i)
{
    pthread_mutex_lock(&ds->lock);
    int k = ds->order[0].epoch == epoch ? 0 : ds->order[1].epoch == epoch ? 1 : -1;
    if (k < 0) { /* a new epoch: replace the older order */
        k = ds->older;
        draw_order(ds->order[k].perm, ds->n, ds->seed, epoch);
        ds->order[k].epoch = epoch;
        ds->older = 1 - k;
    }
    int64_t sample = ds->order[k].perm[i];
    pthread_mutex_unlock(&ds->lock);
    return sample;
}

int64_t rp_dataset_sample_of(const rp_dataset *ds, int64_t step, int64_t batch, int64_t j)
{
    /* (k-1)*B + j, in 128 bits so long runs cannot overflow */
    unsigned __int128 p = (unsigned __int128)(step - 1) * (uint64_t)batch + (uint64_t)j;
    int64_t i = (int64_t)(p % (uint64_t)ds->n);
    if (!ds->shuffle)
        return i;
    /* the orders are a cache: looking a sample up changes no result */
    return shuffled((rp_dataset *)ds, (int64_t)(p / (uint64_t)ds->n), i);
}

/* The index of the first document start above token position x. */
static int64_t starts_above(const rp_dataset *ds, int64_t x)
{
    int64_t lo = 0, hi = ds->ndoc;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (ds->doc[mid] <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The document starts doc[*lo .. *hi) among the targets of the sample that
 * starts at token `first`: target doc[k] - first - 1 would predict a
 * document's first token from the previous document, and does not count. */
static void starts_in_targets(const rp_dataset *ds, int64_t first, int64_t *lo, int64_t *hi)
{
    *lo = starts_above(ds, first);
    *hi = starts_above(ds, first + ds->seq_len);
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
    int64_t lo, hi;
    starts_in_targets(ds, first, &lo, &hi);
    for (int64_t k = lo; k < hi; k++) {
        counted -= mask[ds->doc[k] - first - 1];
        mask[ds->doc[k] - first - 1] = 0;
    }
    return counted;
}

int64_t rp_dataset_counted(const rp_dataset *ds, int64_t i)
{
    int64_t S = ds->seq_len, first = i * S, counted = S;
    if (ds->mask) {
        counted = 0;
        for (int64_t t = 0; t < S; t++)
            counted += rp_npy_get(ds->mask, first + t + 1) == 1;
    }
    int64_t lo, hi;
    starts_in_targets(ds, first, &lo, &hi);
    for (int64_t k = lo; k < hi; k++) /* target position doc[k] */
        counted -= ds->mask ? rp_npy_get(ds->mask, ds->doc[k]) == 1 : 1;
    return counted;
}

int rp_dataset_has_documents(const rp_dataset *ds) { return ds->doc != NULL; }

void rp_dataset_segments(const rp_dataset *ds, int64_t i, int32_t *seg_start)
{
    int64_t S = ds->seq_len, first = i * S, k = starts_above(ds, first), cur = 0;
    for (int64_t t = 0; t < S; t++) {
        for (; k < ds->ndoc && ds->doc[k] <= first + t; k++)
            cur = ds->doc[k] - first;
        seg_start[t] = (int32_t)cur;
    }
}

rp_status rp_dataset_set_documents(rp_dataset *ds, const char *path, rp_error *err)
{
    rp_npy *np = NULL;
    RP_TRY(rp_npy_open(path, &np, err));
    int64_t n = rp_npy_length(np);
    rp_status s = RP_OK;
    if (n < 1)
        s = rp_error_set(err, RP_ERR_FORMAT, "--documents %s: no document starts", path);
    int64_t *doc = s == RP_OK ? malloc((size_t)n * sizeof *doc) : NULL;
    if (s == RP_OK && !doc)
        s = rp_error_set(err, RP_ERR_NOMEM, "--documents %s: %lld starts", path, (long long)n);
    if (s == RP_OK)
        s = rp_npy_read_i64(np, 0, n, doc, err);
    for (int64_t k = 0; s == RP_OK && k < n; k++) {
        if (doc[k] < 0)
            s = rp_error_set(err, RP_ERR_RANGE, "--documents %s: index %lld: start %lld is "
                             "negative", path, (long long)k, (long long)doc[k]);
        else if (k == 0 && doc[0] != 0)
            s = rp_error_set(err, RP_ERR_RANGE, "--documents %s: index 0: the first document "
                             "starts at %lld, not 0", path, (long long)doc[0]);
        else if (k > 0 && doc[k] <= doc[k - 1])
            s = rp_error_set(err, RP_ERR_RANGE, "--documents %s: index %lld: start %lld is not "
                             "above the previous start %lld (starts must be sorted and "
                             "distinct)", path, (long long)k, (long long)doc[k],
                             (long long)doc[k - 1]);
        else if (doc[k] >= ds->len)
            s = rp_error_set(err, RP_ERR_RANGE, "--documents %s: index %lld: start %lld is past "
                             "the %lld tokens of %s (a documents file of other data?)", path,
                             (long long)k, (long long)doc[k], (long long)ds->len,
                             rp_npy_path(ds->tokens));
    }
    rp_npy_close(&np);
    if (s != RP_OK) {
        free(doc);
        return s;
    }
    free(ds->doc);
    ds->doc = doc;
    ds->ndoc = n;
    return RP_OK;
}
