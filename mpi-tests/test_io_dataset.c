/* Proves: the training contract's sample order (io/dataset.h).
 *   - Without shuffling, step k's j-th sample is ((k-1)*B + j) mod n, also
 *     for positions beyond 2^63 / B (the 128-bit product).
 *   - With rp_dataset_shuffle: each epoch's n positions take each sample
 *     exactly once; the epochs' orders differ from each other, from the
 *     file's order and across seeds; the order is the one the header
 *     documents (Fisher-Yates over Philox4x32-10 words, rebuilt here from
 *     the text with the generator's primitive); a lookup does not depend on
 *     which epochs were asked for before (the two-epoch cache) nor on the
 *     thread asking (four threads looking up interleaved epochs agree with
 *     a serial pass); the first sample of an epoch is spread over the
 *     samples (chi-square over 400 epochs of 10 samples, 9 degrees of
 *     freedom, under 27.9, the 0.1% tail). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "io/dataset.h"
#include "io/npy.h"
#include "rp_check.h"

/* A dataset of n samples of S = 4 (4n + 1 byte tokens). */
static rp_dataset *open_n(int64_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/tokens-%lld.npy", rp_test_tmpdir(), (long long)n);
    const int64_t len = 4 * n + 1;
    uint8_t *tok = malloc((size_t)len);
    for (int64_t i = 0; i < len; i++)
        tok[i] = (uint8_t)(i % 251);
    rp_error err = {0};
    ck_assert_int_eq(rp_npy_write_u8(path, tok, len, &err), RP_OK);
    free(tok);
    rp_dataset *ds = NULL;
    ck_assert_msg(rp_dataset_open(path, NULL, 4, 256, &ds, &err) == RP_OK, "%s", err.msg);
    ck_assert_int_eq(rp_dataset_samples(ds), n);
    return ds;
}

/* Sample at position p = epoch*n + i, through the step interface (B = 1). */
static int64_t at(const rp_dataset *ds, int64_t n, int64_t epoch, int64_t i)
{
    return rp_dataset_sample_of(ds, epoch * n + i + 1, 1, 0);
}

START_TEST(file_order_without_shuffle)
{
    rp_dataset *ds = open_n(7);
    for (int64_t k = 1; k <= 5; k++)
        for (int64_t j = 0; j < 3; j++)
            ck_assert_int_eq(rp_dataset_sample_of(ds, k, 3, j), ((k - 1) * 3 + j) % 7);
    /* (k-1)*B overflows 64 bits: (2^62 * 8 + 5) mod 7 = ((2^65 mod 7) + 5) mod 7 = (4 + 5) mod 7 */
    ck_assert_int_eq(rp_dataset_sample_of(ds, ((int64_t)1 << 62) + 1, 8, 5), 2);
    rp_dataset_close(&ds);
}
END_TEST

/* roundpipe(1)'s FNV-1a64 of a stream name: its bytes from the offset
 * basis 1469598103934665603, prime 1099511628211. */
static uint64_t documented_stream(const char *name)
{
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        h = (h ^ *c) * 1099511628211ull;
    return h;
}

/* The header's description, rebuilt independently of the library's loop. */
static void documented_order(int64_t n, uint64_t seed, int64_t epoch, int64_t *perm)
{
    for (int64_t k = 0; k < n; k++)
        perm[k] = k;
    for (int64_t i = n - 1; i >= 1; i--) {
        uint32_t w[4];
        rp_philox4x32(seed, documented_stream("shuffle") + (uint64_t)epoch, (uint64_t)i, w);
        unsigned __int128 r = ((unsigned __int128)w[0] << 32) | w[1];
        int64_t j = (int64_t)((r * (unsigned __int128)(i + 1)) >> 64);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

START_TEST(shuffled_epochs_are_documented_permutations)
{
    const int64_t n = 37;
    rp_dataset *ds = open_n(n), *other = open_n(n);
    rp_error err = {0};
    ck_assert_int_eq(rp_dataset_shuffle(ds, 11, &err), RP_OK);
    ck_assert_int_eq(rp_dataset_shuffle(other, 12, &err), RP_OK);
    int64_t order[4][37], want[37];
    for (int64_t e = 0; e < 4; e++) {
        int seen[37] = {0}, identity = 1, same_as_other_seed = 1;
        documented_order(n, 11, e, want);
        for (int64_t i = 0; i < n; i++) {
            order[e][i] = at(ds, n, e, i);
            ck_assert_int_eq(order[e][i], want[i]);
            ck_assert(order[e][i] >= 0 && order[e][i] < n);
            seen[order[e][i]]++;
            identity &= order[e][i] == i;
            same_as_other_seed &= order[e][i] == at(other, n, e, i);
        }
        for (int64_t s = 0; s < n; s++)
            ck_assert_int_eq(seen[s], 1);
        ck_assert(!identity);
        ck_assert(!same_as_other_seed);
        for (int64_t f = 0; f < e; f++)
            ck_assert(memcmp(order[e], order[f], sizeof order[e]) != 0);
    }
    /* asked again in another order (the cache keeps two epochs) */
    const int64_t again[] = {3, 0, 2, 0, 1, 3};
    for (size_t a = 0; a < sizeof again / sizeof *again; a++)
        for (int64_t i = 0; i < n; i++)
            ck_assert_int_eq(at(ds, n, again[a], i), order[again[a]][i]);
    /* through batches: step k's samples are the positions (k-1)*B + j
     * (steps 1-18 of 8 samples: positions 0-143, the four epochs above) */
    for (int64_t k = 1; k <= 18; k++)
        for (int64_t j = 0; j < 8; j++) {
            int64_t p = (k - 1) * 8 + j;
            ck_assert_int_eq(rp_dataset_sample_of(ds, k, 8, j), order[p / n][p % n]);
        }
    rp_dataset_close(&ds);
    rp_dataset_close(&other);
}
END_TEST

typedef struct lookups {
    const rp_dataset *ds;
    int64_t n, first_epoch, *out;
} lookups;

/* epochs first_epoch, first_epoch + 4, ... interleaved with other threads */
static void *look_up(void *arg)
{
    lookups *l = arg;
    for (int64_t e = l->first_epoch; e < 16; e += 4)
        for (int64_t i = 0; i < l->n; i++)
            l->out[e * l->n + i] = at(l->ds, l->n, e, i);
    return NULL;
}

START_TEST(threads_see_the_same_orders)
{
    const int64_t n = 101;
    rp_dataset *ds = open_n(n);
    rp_error err = {0};
    ck_assert_int_eq(rp_dataset_shuffle(ds, 5, &err), RP_OK);
    int64_t *par = calloc(16 * n, sizeof *par), *ser = calloc(16 * n, sizeof *ser);
    pthread_t th[4];
    lookups l[4];
    for (int k = 0; k < 4; k++) {
        l[k] = (lookups){ds, n, k, par};
        ck_assert_int_eq(pthread_create(&th[k], NULL, look_up, &l[k]), 0);
    }
    for (int k = 0; k < 4; k++)
        pthread_join(th[k], NULL);
    int64_t want[101];
    for (int64_t e = 0; e < 16; e++) {
        documented_order(n, 5, e, want);
        for (int64_t i = 0; i < n; i++)
            ser[e * n + i] = want[i];
    }
    ck_assert(memcmp(par, ser, 16 * (size_t)n * sizeof *par) == 0);
    free(par), free(ser);
    rp_dataset_close(&ds);
}
END_TEST

START_TEST(first_sample_is_spread)
{
    const int64_t n = 10, epochs = 400;
    rp_dataset *ds = open_n(n);
    rp_error err = {0};
    ck_assert_int_eq(rp_dataset_shuffle(ds, 2026, &err), RP_OK);
    int64_t count[10] = {0};
    for (int64_t e = 0; e < epochs; e++)
        count[at(ds, n, e, 0)]++;
    double chi2 = 0, expect = (double)epochs / (double)n;
    for (int s = 0; s < n; s++)
        chi2 += (count[s] - expect) * (count[s] - expect) / expect;
    ck_assert_msg(chi2 < 27.88, "chi-square %.2f over the first samples of %lld epochs", chi2,
                  (long long)epochs);
    rp_dataset_close(&ds);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("io_dataset");
    TCase *tc = tcase_create("all");
    tcase_add_test(tc, file_order_without_shuffle);
    tcase_add_test(tc, shuffled_epochs_are_documented_permutations);
    tcase_add_test(tc, threads_see_the_same_orders);
    tcase_add_test(tc, first_sample_is_spread);
    tcase_add_checked_fixture(tc, NULL, rp_test_tmpdir_clean);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(suite, "serial")
