/* Proves: rp_adamw_step reproduces torch.optim.AdamW (foreach=False, CPU;
 * fixture from tools/gen_adamw_fixture.py) over several steps with weight
 * decay on and off, clip coefficients != 1, a changing lr and a late start
 * (step 1000, non-zero moments): exp_avg and exp_avg_sq bit for bit, p to
 * 1e-6 relative (last-bit differences only where torch's sqrt is not
 * correctly rounded), the bf16 copy equal to torch's wherever p is; agrees
 * with a double-precision reimplementation to 1e-6; gives bit-identical
 * results for 1, 2 and 3 threads; rp_adamw_ranges_split updates many short
 * ranges (an embedding's runs of rows, each below the parallel threshold)
 * from one region of all the threads, every element once, with the same
 * bits as one update per range on one thread, and a slowed thread takes
 * less than its equal share (chunks as threads come free); writing the bf16 copy does not change the
 * fp32 state; rp_adamw_step_backup gives p, m, v and the bf16 copy the bits
 * of rp_adamw_step and stores exactly the old p, m, v in its backup, and
 * rp_adamw_step_from_backup, reading that backup, gives the same bits again
 * (1, 2 and 3 threads, with and without the copy, from a late step with
 * non-zero moments); bad hyperparameters are refused. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/dtype.h"
#include "optim/adamw.h"
#include "optim_adamw_fixture.h"
#include "rp_check.h"

#define NCASES (sizeof adamw_fix_cases / sizeof adamw_fix_cases[0])

static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* Largest |a - b| / |b| (b = 0 counts only when a != 0). */
static double max_rel(const float *a, const float *b, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        double r = b[i] != 0 ? d / fabs((double)b[i]) : (d > 0 ? INFINITY : 0);
        if (r > worst)
            worst = r;
    }
    return worst;
}

static size_t count_bit_diffs(const float *a, const float *b, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += bits(a[i]) != bits(b[i]);
    return c;
}

START_TEST(matches_torch_fixture)
{
    enum { N = ADAMW_FIX_N };
    size_t ndiff_p = 0;
    double worst_p = 0;
    for (size_t c = 0; c < NCASES; c++) {
        const adamw_fix_case *fc = &adamw_fix_cases[c];
        float p[N], m[N], v[N];
        uint16_t bf[N];
        memcpy(p, fc->p0, sizeof p);
        memcpy(m, fc->m0, sizeof m);
        memcpy(v, fc->v0, sizeof v);
        for (int k = 0; k < ADAMW_FIX_STEPS; k++) {
            rp_adamw_params hp = {.lr = adamw_fix_lr[k], .beta1 = fc->beta1, .beta2 = fc->beta2,
                                  .eps = fc->eps, .weight_decay = fc->weight_decay};
            rp_adamw_step(p, fc->g + k * N, m, v, N, fc->first_step + k, &hp, fc->decay,
                          fc->scale[k], bf);
            const float *ep = fc->p + k * N, *em = fc->m + k * N, *ev = fc->v + k * N;
            float mine[N];
            memcpy(mine, p, sizeof mine);
            double rp = max_rel(p, ep, N), rm = max_rel(m, em, N), rv = max_rel(v, ev, N);
            ck_assert_msg(rp <= 1e-6 && rm <= 1e-6 && rv <= 1e-6,
                          "case %s step %d: max rel error p %g m %g v %g (limit 1e-6)",
                          fc->name, k + 1, rp, rm, rv);
            /* m and v: torch's order of operations and fused multiply-adds
             * are reproduced exactly, so the bits must agree. p goes through
             * sqrt, which torch's vectorised CPU kernel does not round
             * correctly (about 0.6% of results 1 ulp off on its AVX-512
             * build) while sqrtf does, so p is held to the bound above. */
            size_t dm = count_bit_diffs(m, em, N), dv = count_bit_diffs(v, ev, N);
            ck_assert_msg(dm + dv == 0,
                          "case %s step %d: %zu/%zu elements of m/v differ in bits from torch",
                          fc->name, k + 1, dm, dv);
            ndiff_p += count_bit_diffs(p, ep, N);
            if (rp > worst_p)
                worst_p = rp;
            /* continue from torch's p so that one last-bit difference is
             * not compounded over the following steps */
            memcpy(p, ep, sizeof p);
            for (int i = 0; i < N; i++)
                ck_assert_msg(bf[i] == rp_f32_to_bf16(mine[i]) &&
                                  (bits(mine[i]) != bits(ep[i]) || bf[i] == fc->bf16[k * N + i]),
                              "case %s step %d elem %d: bf16 copy %#06x, torch %#06x", fc->name,
                              k + 1, i, bf[i], fc->bf16[k * N + i]);
        }
    }
    /* a sanity bound on how often the sqrt rounding shows: a wrong formula
     * would differ almost everywhere */
    ck_assert_msg(ndiff_p <= NCASES * ADAMW_FIX_STEPS * N / 20,
                  "%zu p values differ in bits from torch", ndiff_p);
    printf("adamw vs torch: %zu of %zu p values differ in the last bits, max rel %.3g\n",
           ndiff_p, NCASES * ADAMW_FIX_STEPS * N, worst_p);
}
END_TEST

/* The same update written out in double from the same fp32 inputs. */
static void ref_step(double *p, const float *g, double *m, double *v, size_t n, int64_t t,
                     const rp_adamw_params *hp, int decay, double scale)
{
    double bc1 = 1 - pow(hp->beta1, (double)t), bc2 = 1 - pow(hp->beta2, (double)t);
    for (size_t i = 0; i < n; i++) {
        double gi = (double)g[i] * scale;
        if (decay)
            p[i] *= 1 - hp->lr * hp->weight_decay;
        m[i] = hp->beta1 * m[i] + (1 - hp->beta1) * gi;
        v[i] = hp->beta2 * v[i] + (1 - hp->beta2) * gi * gi;
        p[i] -= hp->lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + hp->eps);
    }
}

static float frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return ((float)((*s >> 8) & 0xffff) / 65536.0f) * 2.0f - 1.0f;
}

START_TEST(agrees_with_double_reference)
{
    enum { N = 1000, STEPS = 4 };
    float *p = malloc(N * sizeof *p), *m = calloc(N, sizeof *m), *v = calloc(N, sizeof *v);
    float *g = malloc(STEPS * N * sizeof *g);
    double *pd = malloc(N * sizeof *pd), *md = calloc(N, sizeof *md), *vd = calloc(N, sizeof *vd);
    ck_assert(p && m && v && g && pd && md && vd);
    unsigned s = 7;
    for (int i = 0; i < N; i++)
        pd[i] = p[i] = frand(&s);
    for (int i = 0; i < STEPS * N; i++)
        g[i] = frand(&s) * 0.1f;
    rp_adamw_params hp = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                          .weight_decay = 0.1};
    for (int k = 0; k < STEPS; k++) {
        float scale = k == 1 ? 0.3f : 1.0f;
        double mold[N], pold[N];
        for (int i = 0; i < N; i++) {
            mold[i] = md[i];
            pold[i] = pd[i];
        }
        rp_adamw_step(p, g + k * N, m, v, N, k + 1, &hp, k != 2, scale, NULL);
        ref_step(pd, g + k * N, md, vd, N, k + 1, &hp, k != 2, scale);
        for (int i = 0; i < N; i++) {
            /* relative to the size of the terms that were combined, so that
             * cancellation near zero does not inflate the measure */
            double gs = fabs((double)g[k * N + i] * scale);
            double sp = fabs(pold[i]) + hp.lr, sm = fabs(mold[i]) + gs;
            ck_assert_msg(fabs(p[i] - pd[i]) <= 1e-6 * sp, "step %d elem %d: p %.9g ref %.9g",
                          k + 1, i, p[i], pd[i]);
            ck_assert_msg(fabs(m[i] - md[i]) <= 1e-6 * sm, "step %d elem %d: m %.9g ref %.9g",
                          k + 1, i, m[i], md[i]);
            ck_assert_msg(fabs(v[i] - vd[i]) <= 1e-6 * vd[i], "step %d elem %d: v %.9g ref %.9g",
                          k + 1, i, v[i], vd[i]);
        }
    }
    free(p), free(m), free(v), free(g), free(pd), free(md), free(vd);
}
END_TEST

START_TEST(thread_count_independent)
{
    /* large enough for the parallel path, not a multiple of any split */
    const size_t n = 200003;
    const int threads[] = {1, 2, 3};
    float *st[3][3];
    uint16_t *bf[3];
    float *g = malloc(n * sizeof *g), *p0 = malloc(n * sizeof *p0);
    ck_assert(g && p0);
    unsigned s = 99;
    for (size_t i = 0; i < n; i++) {
        g[i] = frand(&s);
        p0[i] = frand(&s);
    }
    rp_adamw_params hp = {.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                          .weight_decay = 0.1};
    for (int r = 0; r < 3; r++) {
        for (int j = 0; j < 3; j++)
            st[r][j] = calloc(n, sizeof(float));
        bf[r] = malloc(n * sizeof(uint16_t));
        ck_assert(st[r][0] && st[r][1] && st[r][2] && bf[r]);
        memcpy(st[r][0], p0, n * sizeof(float));
        omp_set_num_threads(threads[r]);
        for (int k = 1; k <= 3; k++)
            rp_adamw_step(st[r][0], g, st[r][1], st[r][2], n, k, &hp, 1, 0.5f, bf[r]);
    }
    for (int r = 1; r < 3; r++) {
        for (int j = 0; j < 3; j++)
            ck_assert_msg(memcmp(st[r][j], st[0][j], n * sizeof(float)) == 0,
                          "array %d differs between 1 and %d threads", j, threads[r]);
        ck_assert(memcmp(bf[r], bf[0], n * sizeof(uint16_t)) == 0);
    }
    /* the bf16 copy is the rounding of the fp32 result */
    for (size_t i = 0; i < n; i++)
        ck_assert_uint_eq(bf[0][i], rp_f32_to_bf16(st[0][0][i]));
    for (int r = 0; r < 3; r++) {
        for (int j = 0; j < 3; j++)
            free(st[r][j]);
        free(bf[r]);
    }
    free(g), free(p0);
}
END_TEST

/* rp_adamw_ranges_split over an embedding's pattern: runs of 1-3 rows of
 * 1024 elements (each far below RP_ADAMW_PARALLEL_MIN) with gaps between
 * them, and empty ranges among them. */
enum { SPLIT_ROW = 1024, SPLIT_RUNS = 400, SPLIT_MAX_THREADS = 4 };

typedef struct split_record {
    unsigned char *covered;                 /* times each element was given */
    size_t elements[SPLIT_MAX_THREADS];     /* per thread */
    size_t pieces[SPLIT_MAX_THREADS];       /* per thread */
    const rp_adamw_range *ranges;
    size_t count;
    int outside;                            /* a piece not inside one range */
    int team;                               /* largest team a piece came from */
} split_record;

static void record_piece(void *ctx, size_t lo, size_t hi)
{
    split_record *r = ctx;
    int tid = omp_get_thread_num(), team = omp_get_num_threads();
    int inside = 0;
    for (size_t i = 0; i < r->count; i++)
        inside |= lo >= r->ranges[i].lo && hi <= r->ranges[i].hi && lo < hi;
    if (!inside || tid >= SPLIT_MAX_THREADS) {
#pragma omp atomic write
        r->outside = 1;
        return;
    }
#pragma omp critical
    r->team = team > r->team ? team : r->team;
    for (size_t i = lo; i < hi; i++)
        r->covered[i]++; /* pieces are disjoint: no two threads write one element */
    r->elements[tid] += hi - lo;
    r->pieces[tid]++;
}

static size_t split_ranges(rp_adamw_range *r, size_t *extent)
{
    unsigned s = 5;
    size_t k = 0, at = 0;
    for (int i = 0; i < SPLIT_RUNS; i++) {
        at += (size_t)(frand(&s) > 0 ? 1 : 4) * SPLIT_ROW; /* a gap */
        size_t len = (size_t)(1 + (i % 3)) * SPLIT_ROW;
        r[k++] = (rp_adamw_range){at, at + len};
        if (i % 50 == 0)
            r[k++] = (rp_adamw_range){at + len, at + len}; /* empty */
        at += len;
    }
    *extent = at + SPLIT_ROW;
    return k;
}

typedef struct split_adamw {
    float *p, *g, *m, *v;
    uint16_t *bf;
    int64_t step;
} split_adamw;

static void adamw_piece(void *ctx, size_t lo, size_t hi)
{
    const split_adamw *a = ctx;
    rp_adamw_params hp = {.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                          .weight_decay = 0.1};
    rp_adamw_step(a->p + lo, a->g + lo, a->m + lo, a->v + lo, hi - lo, a->step, &hp, 1, 0.5f,
                  a->bf + lo);
}

START_TEST(ranges_split_uses_every_thread)
{
    rp_adamw_range r[SPLIT_RUNS + SPLIT_RUNS / 50 + 1];
    size_t extent, count = split_ranges(r, &extent), total = 0;
    for (size_t i = 0; i < count; i++) {
        ck_assert(r[i].hi - r[i].lo < RP_ADAMW_PARALLEL_MIN);
        total += r[i].hi - r[i].lo;
    }
    ck_assert(total >= RP_ADAMW_PARALLEL_MIN);
    for (int nt = 1; nt <= 3; nt++) {
        split_record rec = {.covered = calloc(extent, 1), .ranges = r, .count = count};
        ck_assert(rec.covered);
        omp_set_num_threads(nt);
        rp_adamw_ranges_split(r, count, record_piece, &rec);
        ck_assert_msg(!rec.outside, "%d threads: a piece outside the ranges", nt);
        /* every element of the ranges once, nothing else (counted, not
         * asserted per element: each check's assertion is a write to its
         * parent process) */
        size_t next = 0, wrong = 0;
        for (size_t i = 0; i < count; i++) {
            for (size_t j = next; j < r[i].lo; j++)
                wrong += rec.covered[j] != 0;
            for (size_t j = r[i].lo; j < r[i].hi; j++)
                wrong += rec.covered[j] != 1;
            next = r[i].hi > next ? r[i].hi : next;
        }
        for (size_t j = next; j < extent; j++)
            wrong += rec.covered[j] != 0;
        ck_assert_msg(wrong == 0, "%d threads: %zu elements given other than once in a range, "
                      "never outside", nt, wrong);
        /* one region of nt threads over the ranges together, though each
         * range alone is below the threshold (which threads took which
         * chunks varies from run to run) */
        ck_assert_msg(rec.team == nt, "%d threads: the pieces came from a team of %d", nt,
                      rec.team);
        size_t given = 0;
        for (int tid = 0; tid < nt; tid++)
            given += rec.elements[tid];
        ck_assert_uint_eq(given, total);
        free(rec.covered);
    }
    /* below the threshold in all: the calling thread, one piece per range */
    rp_adamw_range few[3] = {{0, 1000}, {5000, 5000}, {8000, 9024}};
    split_record rec = {.covered = calloc(10000, 1), .ranges = few, .count = 3};
    ck_assert(rec.covered);
    omp_set_num_threads(3);
    rp_adamw_ranges_split(few, 3, record_piece, &rec);
    ck_assert(!rec.outside);
    ck_assert_int_eq(rec.team, 1);
    ck_assert_uint_eq(rec.elements[0], 2024);
    ck_assert_uint_eq(rec.pieces[0], 2);
    /* no elements at all (a rank whose share holds none of the rows) */
    rp_adamw_ranges_split(few + 1, 1, record_piece, &rec);
    rp_adamw_ranges_split(few, 0, record_piece, &rec);
    ck_assert_uint_eq(rec.pieces[0], 2);
    free(rec.covered);
}
END_TEST

/* A thread slowed by another on its core: thread 1 sleeping 50 ms at its
 * first piece stands for it. */
static void slow_second_thread(void *ctx, size_t lo, size_t hi)
{
    split_record *r = ctx;
    if (omp_get_thread_num() == 1 && r->pieces[1] == 0) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    record_piece(ctx, lo, hi);
}

START_TEST(ranges_split_slow_thread_takes_less)
{
    /* With an equal share each, a region lasts as long as its slowest
     * thread (one whose core another thread shares runs at half speed:
     * bench/README.md, bench_adamw); with chunks taken as threads come
     * free, the others take the slow thread's work. Thread 1
     * sleeps 50 ms at its first piece: it gets less than a quarter (thread 0
     * takes the rest within a few milliseconds). */
    rp_adamw_range r[SPLIT_RUNS + SPLIT_RUNS / 50 + 1];
    size_t extent, count = split_ranges(r, &extent), total = 0;
    for (size_t i = 0; i < count; i++)
        total += r[i].hi - r[i].lo;
    split_record rec = {.covered = calloc(extent, 1), .ranges = r, .count = count};
    ck_assert(rec.covered);
    omp_set_num_threads(2);
    rp_adamw_ranges_split(r, count, slow_second_thread, &rec);
    ck_assert(!rec.outside && rec.team == 2);
    ck_assert_uint_eq(rec.elements[0] + rec.elements[1], total);
    ck_assert_msg(rec.elements[1] < total / 4, "the slow thread updated %zu of %zu elements",
                  rec.elements[1], total);
    free(rec.covered);
}
END_TEST

START_TEST(ranges_split_same_bits)
{
    /* AdamW through the split on 1-3 threads against one rp_adamw_step per
     * range on one thread: the same bits, and the elements between the
     * ranges untouched */
    rp_adamw_range r[SPLIT_RUNS + SPLIT_RUNS / 50 + 1];
    size_t extent, count = split_ranges(r, &extent);
    float *g = malloc(extent * sizeof *g), *p0 = malloc(extent * sizeof *p0);
    ck_assert(g && p0);
    unsigned s = 17;
    for (size_t i = 0; i < extent; i++) {
        g[i] = frand(&s);
        p0[i] = frand(&s);
    }
    float *want[3], *got[3];
    uint16_t *want_bf = calloc(extent, sizeof *want_bf), *got_bf = calloc(extent, sizeof *got_bf);
    ck_assert(want_bf && got_bf);
    for (int j = 0; j < 3; j++) {
        want[j] = calloc(extent, sizeof(float));
        ck_assert(want[j]);
    }
    memcpy(want[0], p0, extent * sizeof(float));
    omp_set_num_threads(1);
    for (int64_t k = 1; k <= 2; k++) {
        split_adamw a = {want[0], g, want[1], want[2], want_bf, k};
        for (size_t i = 0; i < count; i++)
            adamw_piece(&a, r[i].lo, r[i].hi);
    }
    for (int nt = 1; nt <= 3; nt++) {
        for (int j = 0; j < 3; j++) {
            got[j] = calloc(extent, sizeof(float));
            ck_assert(got[j]);
        }
        memcpy(got[0], p0, extent * sizeof(float));
        memset(got_bf, 0, extent * sizeof *got_bf);
        omp_set_num_threads(nt);
        for (int64_t k = 1; k <= 2; k++) {
            split_adamw a = {got[0], g, got[1], got[2], got_bf, k};
            rp_adamw_ranges_split(r, count, adamw_piece, &a);
        }
        for (int j = 0; j < 3; j++) {
            ck_assert_msg(memcmp(got[j], want[j], extent * sizeof(float)) == 0,
                          "array %d differs on %d threads", j, nt);
            free(got[j]);
        }
        ck_assert(memcmp(got_bf, want_bf, extent * sizeof *got_bf) == 0);
    }
    ck_assert(memcmp(want[0], p0, r[0].lo * sizeof(float)) == 0); /* before the first range */
    for (int j = 0; j < 3; j++)
        free(want[j]);
    free(want_bf), free(got_bf), free(g), free(p0);
}
END_TEST

START_TEST(backup_kernels_same_bits)
{
    /* large enough for the parallel path, not a multiple of any split; a
     * late step (non-zero m and v), weight decay, a clip coefficient */
    const size_t n = 200003;
    float *g = malloc(n * sizeof *g), *st0[3], *want[3], *got[3], *old[3], *redo[3];
    uint16_t *want_bf = malloc(n * sizeof *want_bf), *got_bf = malloc(n * sizeof *got_bf),
             *redo_bf = malloc(n * sizeof *redo_bf);
    ck_assert(g && want_bf && got_bf && redo_bf);
    unsigned s = 5;
    for (int j = 0; j < 3; j++) {
        st0[j] = malloc(n * sizeof(float)), want[j] = malloc(n * sizeof(float));
        got[j] = malloc(n * sizeof(float)), old[j] = malloc(n * sizeof(float));
        redo[j] = malloc(n * sizeof(float));
        ck_assert(st0[j] && want[j] && got[j] && old[j] && redo[j]);
    }
    for (size_t i = 0; i < n; i++) {
        g[i] = frand(&s);
        st0[0][i] = frand(&s);
        st0[1][i] = 0.1f * frand(&s);
        st0[2][i] = 0.01f * fabsf(frand(&s));
    }
    rp_adamw_params hp = {.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                          .weight_decay = 0.1};
    for (int copy = 0; copy <= 1; copy++) {
        for (int j = 0; j < 3; j++)
            memcpy(want[j], st0[j], n * sizeof(float));
        omp_set_num_threads(1);
        rp_adamw_step(want[0], g, want[1], want[2], n, 1000, &hp, 1, 0.5f,
                      copy ? want_bf : NULL);
        for (int nt = 1; nt <= 3; nt++) {
            omp_set_num_threads(nt);
            for (int j = 0; j < 3; j++) {
                memcpy(got[j], st0[j], n * sizeof(float));
                memset(old[j], 0xff, n * sizeof(float));
                memset(redo[j], 0xff, n * sizeof(float)); /* not read: NaNs */
            }
            rp_adamw_step_backup(got[0], g, got[1], got[2], n, 1000, &hp, 1, 0.5f,
                                 copy ? got_bf : NULL, old[0], old[1], old[2]);
            rp_adamw_step_from_backup(redo[0], g, redo[1], redo[2], n, 1000, &hp, 1, 0.5f,
                                      copy ? redo_bf : NULL, old[0], old[1], old[2]);
            for (int j = 0; j < 3; j++) {
                ck_assert_msg(memcmp(got[j], want[j], n * sizeof(float)) == 0,
                              "backup kernel: array %d differs from rp_adamw_step (%d threads, "
                              "copy %d)", j, nt, copy);
                ck_assert_msg(memcmp(old[j], st0[j], n * sizeof(float)) == 0,
                              "backup kernel: backup %d is not the old values (%d threads)", j,
                              nt);
                ck_assert_msg(memcmp(redo[j], want[j], n * sizeof(float)) == 0,
                              "redo from the backup: array %d differs (%d threads, copy %d)", j,
                              nt, copy);
            }
            if (copy) {
                ck_assert(memcmp(got_bf, want_bf, n * sizeof *got_bf) == 0);
                ck_assert(memcmp(redo_bf, want_bf, n * sizeof *redo_bf) == 0);
            }
        }
    }
    /* n == 0 touches nothing */
    rp_adamw_step_backup(NULL, NULL, NULL, NULL, 0, 1, &hp, 1, 1.0f, NULL, NULL, NULL, NULL);
    rp_adamw_step_from_backup(NULL, NULL, NULL, NULL, 0, 1, &hp, 1, 1.0f, NULL, NULL, NULL,
                              NULL);
    for (int j = 0; j < 3; j++)
        free(st0[j]), free(want[j]), free(got[j]), free(old[j]), free(redo[j]);
    free(g), free(want_bf), free(got_bf), free(redo_bf);
}
END_TEST

START_TEST(copy_does_not_change_state)
{
    enum { N = ADAMW_FIX_N };
    const adamw_fix_case *fc = &adamw_fix_cases[0];
    float p1[N], m1[N], v1[N], p2[N], m2[N], v2[N];
    uint16_t bf[N];
    memcpy(p1, fc->p0, sizeof p1), memcpy(p2, fc->p0, sizeof p2);
    memset(m1, 0, sizeof m1), memset(m2, 0, sizeof m2);
    memset(v1, 0, sizeof v1), memset(v2, 0, sizeof v2);
    rp_adamw_params hp = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                          .weight_decay = 0.1};
    rp_adamw_step(p1, fc->g, m1, v1, N, 1, &hp, 1, 1.0f, NULL);
    rp_adamw_step(p2, fc->g, m2, v2, N, 1, &hp, 1, 1.0f, bf);
    ck_assert(memcmp(p1, p2, sizeof p1) == 0);
    ck_assert(memcmp(m1, m2, sizeof m1) == 0);
    ck_assert(memcmp(v1, v2, sizeof v1) == 0);
    /* the bf16 compute copy written in the same pass: the new weights
     * rounded to nearest even, as the scalar conversion gives */
    for (int i = 0; i < N; i++)
        ck_assert_uint_eq(bf[i], rp_f32_to_bf16(p1[i]));
    /* n == 0 touches nothing */
    rp_adamw_step(NULL, NULL, NULL, NULL, 0, 1, &hp, 1, 1.0f, NULL);
}
END_TEST

/* The array stride: at least the array, an odd multiple of 16 KiB, so two
 * arrays laid back to back never start at the same offset modulo 32 KiB or
 * any larger power of two; checked by brute force over sizes around powers
 * of two (the case that needs it) and others. */
START_TEST(array_stride_is_staggered)
{
    const size_t unit = (size_t)16 << 10;
    ck_assert_uint_eq(rp_adamw_array_bytes(0), 0);
    ck_assert_uint_eq(rp_adamw_array_bytes(1), unit);
    ck_assert_uint_eq(rp_adamw_array_bytes(4096), unit);       /* exactly 16 KiB */
    ck_assert_uint_eq(rp_adamw_array_bytes(4097), 3 * unit);   /* 2 units, made odd */
    ck_assert_uint_eq(rp_adamw_array_bytes((size_t)64 << 20), (size_t)256 * 1024 * 1024 + unit);
    ck_assert_uint_eq(rp_adamw_array_bytes(SIZE_MAX / 2), SIZE_MAX);
    for (int k = 0; k < 31; k++)
        for (long d = -3; d <= 3; d++) {
            long long n = (1LL << k) + d;
            if (n < 1)
                continue;
            size_t b = rp_adamw_array_bytes((size_t)n);
            ck_assert_msg(b >= (size_t)n * sizeof(float), "n=%lld: %zu bytes", n, b);
            ck_assert_msg(b % unit == 0 && (b / unit) % 2 == 1, "n=%lld: stride %zu", n, b);
            ck_assert_msg(b - (size_t)n * sizeof(float) < 2 * unit, "n=%lld: %zu bytes", n, b);
            /* the offsets of four arrays modulo 32 KiB alternate: never all equal */
            ck_assert_uint_ne((1 * b) % (2 * unit), (2 * b) % (2 * unit));
        }
}
END_TEST

START_TEST(rejects_bad_hyperparameters)
{
    const rp_adamw_params good = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                  .weight_decay = 0.0};
    rp_error err = {0};
    ck_assert_int_eq(rp_adamw_params_check(&good, "--opt", &err), RP_OK);
    struct { rp_adamw_params hp; const char *field; } bad[] = {
        {{-1e-3, 0.9, 0.999, 1e-8, 0}, "lr"},
        {{NAN, 0.9, 0.999, 1e-8, 0}, "lr"},
        {{1e-3, 1.0, 0.999, 1e-8, 0}, "beta1"},
        {{1e-3, -0.1, 0.999, 1e-8, 0}, "beta1"},
        {{1e-3, 0.9, 1.5, 1e-8, 0}, "beta2"},
        {{1e-3, 0.9, NAN, 1e-8, 0}, "beta2"},
        {{1e-3, 0.9, 0.999, -1e-8, 0}, "eps"},
        {{1e-3, 0.9, 0.999, 1e-8, -0.1}, "weight_decay"},
        {{1e-3, 0.9, 0.999, 1e-8, INFINITY}, "weight_decay"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rp_error_clear(&err);
        ck_assert_int_eq(rp_adamw_params_check(&bad[i].hp, "--opt", &err), RP_ERR_INVALID_ARG);
        ck_assert_msg(strstr(err.msg, "--opt") && strstr(err.msg, bad[i].field),
                      "case %zu: message '%s' should name --opt and %s", i, err.msg,
                      bad[i].field);
    }
    ck_assert_int_eq(rp_adamw_params_check(NULL, NULL, &err), RP_ERR_INVALID_ARG);
}
END_TEST

static Suite *optim_adamw_suite(void)
{
    Suite *s = suite_create("optim_adamw");
    TCase *tc = tcase_create("adamw");
    /* thread_count_independent runs 3 OpenMP threads: on a loaded 2-core
     * machine (make -j2 check beside MPI tests) it once overran check's
     * default 4 s though it takes under 1 s alone */
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, matches_torch_fixture);
    tcase_add_test(tc, agrees_with_double_reference);
    tcase_add_test(tc, thread_count_independent);
    tcase_add_test(tc, ranges_split_uses_every_thread);
    tcase_add_test(tc, ranges_split_slow_thread_takes_less);
    tcase_add_test(tc, ranges_split_same_bits);
    tcase_add_test(tc, copy_does_not_change_state);
    tcase_add_test(tc, backup_kernels_same_bits);
    tcase_add_test(tc, rejects_bad_hyperparameters);
    tcase_add_test(tc, array_stride_is_staggered);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(optim_adamw_suite, "serial")
