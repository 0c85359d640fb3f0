/* AdamW, one fused pass per tensor.
 *
 * Why fmaf: torch's vectorised CPU kernels (AVX2/AVX-512 builds) compute
 * lerp_ and addcmul_ with fused multiply-adds. Using fmaf at the same two
 * places reproduces torch's exp_avg and exp_avg_sq bit for bit (checked
 * against a PyTorch fixture); p differs from torch's only in the last bit
 * of the rare elements where torch's vectorised sqrt is not correctly
 * rounded (sqrtf is). Since fmaf and sqrtf are exactly rounded everywhere,
 * the result is the same on every machine. On x86-64 the kernel is compiled twice
 * (target_clones): an x86-64-v3 clone where fmaf is one vector instruction,
 * and a baseline clone where it is a libm call (slower, same bits). The
 * speculative update's kinds (a backup written in the same pass, a redo
 * from it) are the same body with other loads and stores, through the same
 * cloned function. */
#include "optim/adamw.h"

#include <math.h>
#include <omp.h>

#include "core/cpu_clones.h"
#include "core/dtype.h"

/* Per-step scalars, rounded to fp32 once, as torch rounds Python scalars
 * when it applies them to a float tensor. */
typedef struct adamw_consts {
    float grad_scale;
    float decay_factor; /* f32(1 - lr*wd), or 1 when no decay (exact identity) */
    float one_minus_b1;
    float beta2;
    float one_minus_b2;
    float neg_step_size; /* f32(-(lr / bc1)) */
    float bc2_sqrt;      /* f32(sqrt(bc2)) */
    float eps;
} adamw_consts;


/* What the update does beside updating p, m and v in place: flags, each a
 * constant at every call site, so the compiler emits one loop per kind
 * without a per-element branch.
 *   KIND_BF16  also writes bf16(p_new), the compute copy;
 *   KIND_SAVE  also writes the old p, m, v it read into the side arrays
 *              (the speculative update's backup, in the same pass);
 *   KIND_FROM  reads the old p, m, v from the side arrays instead (a redo
 *              from that backup) and writes the new ones to p, m, v. */
enum { KIND_BF16 = 1, KIND_SAVE = 2, KIND_FROM = 4 };

/* The side arrays of KIND_SAVE and KIND_FROM: old p, m, v. */
typedef struct adamw_side {
    float *p, *m, *v;
} adamw_side;

/* The element update. The old p, m, v are read once into registers, so
 * the backup holds exactly what the update read, and the arithmetic is the
 * same expression in every kind (the same bits). */
static inline __attribute__((always_inline)) void
adamw_body(float *restrict p, const float *restrict g, float *restrict m, float *restrict v,
           void *restrict out, float *restrict side_p, float *restrict side_m,
           float *restrict side_v, size_t n, const adamw_consts *k, int kind)
{
    uint16_t *restrict bf = out;
    const float gs = k->grad_scale, df = k->decay_factor, w1 = k->one_minus_b1;
    const float b2 = k->beta2, w2 = k->one_minus_b2, ns = k->neg_step_size;
    const float bc2s = k->bc2_sqrt, eps = k->eps;
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float p0 = (kind & KIND_FROM) ? side_p[i] : p[i];
        float m0 = (kind & KIND_FROM) ? side_m[i] : m[i];
        float v0 = (kind & KIND_FROM) ? side_v[i] : v[i];
        if (kind & KIND_SAVE) {
            side_p[i] = p0;
            side_m[i] = m0;
            side_v[i] = v0;
        }
        float gi = g[i] * gs;
        float pi = p0 * df;
        float mi = fmaf(w1, gi - m0, m0);
        float vi = fmaf(w2 * gi, gi, v0 * b2);
        float denom = sqrtf(vi) / bc2s + eps;
        pi = pi + (ns * mi) / denom;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
        if (kind & KIND_BF16)
            bf[i] = rp_f32_to_bf16(pi);
    }
}

/* GCC's loop distribution would split a backup's stores (side_p[i] = p[i])
 * out of the loop into a memmove before it: a second pass over p, m, v,
 * the separate copy the backup kind is there to avoid. */
#if defined(__GNUC__) && !defined(__clang__)
#define ONE_PASS __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define ONE_PASS
#endif

RP_CPU_CLONES ONE_PASS
static void adamw_range(float *restrict p, const float *restrict g, float *restrict m,
                        float *restrict v, void *restrict out, const adamw_side *side, size_t n,
                        const adamw_consts *k, int kind)
{
    float *sp = side ? side->p : NULL, *sm = side ? side->m : NULL, *sv = side ? side->v : NULL;
    switch (kind) {
    case KIND_BF16:
        adamw_body(p, g, m, v, out, sp, sm, sv, n, k, KIND_BF16);
        break;
    case KIND_SAVE:
        adamw_body(p, g, m, v, out, sp, sm, sv, n, k, KIND_SAVE);
        break;
    case KIND_SAVE | KIND_BF16:
        adamw_body(p, g, m, v, out, sp, sm, sv, n, k, KIND_SAVE | KIND_BF16);
        break;
    case KIND_FROM:
        adamw_body(p, g, m, v, out, sp, sm, sv, n, k, KIND_FROM);
        break;
    case KIND_FROM | KIND_BF16:
        adamw_body(p, g, m, v, out, sp, sm, sv, n, k, KIND_FROM | KIND_BF16);
        break;
    default:
        adamw_body(p, g, m, v, out, sp, sm, sv, n, k, 0);
        break;
    }
}

size_t rp_adamw_array_bytes(size_t n)
{
    const size_t unit = (size_t)16 << 10;
    if (n == 0)
        return 0;
    if (n > (SIZE_MAX - 2 * unit) / sizeof(float))
        return SIZE_MAX;
    size_t units = (n * sizeof(float) + unit - 1) / unit;
    return (units | 1) * unit;
}

rp_status rp_adamw_params_check(const rp_adamw_params *hp, const char *what, rp_error *err)
{
    const char *w = what ? what : "AdamW";
    if (!hp)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: no hyperparameters given", w);
    if (!isfinite(hp->lr) || hp->lr < 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: lr must be finite and >= 0, got %g",
                            w, hp->lr);
    if (!(hp->beta1 >= 0 && hp->beta1 < 1))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: beta1 must be in [0, 1), got %g", w,
                            hp->beta1);
    if (!(hp->beta2 >= 0 && hp->beta2 < 1))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: beta2 must be in [0, 1), got %g", w,
                            hp->beta2);
    if (!isfinite(hp->eps) || hp->eps < 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: eps must be finite and >= 0, got %g",
                            w, hp->eps);
    if (!isfinite(hp->weight_decay) || hp->weight_decay < 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "%s: weight_decay must be finite and >= 0, got %g", w,
                            hp->weight_decay);
    return RP_OK;
}

/* Chunks start on 64-byte boundaries so no two threads write one line. */
#define RP_ADAMW_ALIGN 16
/* The threads take chunks of at most this many elements (256 KiB of each
 * fp32 array) as they come free, not one equal share each: a static split
 * lasts as long as its slowest thread, and a thread that shares its core
 * (with an executor thread spinning on its GPU, a BLAS worker, another
 * process) is slowed by half, and the others wait for it at the region's
 * end (measured in bench/README.md, bench_adamw). */
#define RP_ADAMW_CHUNK 65536

/* The chunk for n elements on nt threads: at most RP_ADAMW_CHUNK and at
 * most an equal share (so a tensor just above the parallel threshold is
 * still split over every thread), a multiple of RP_ADAMW_ALIGN. */
static size_t chunk_of(size_t n, size_t nt)
{
    size_t chunk = (n + nt - 1) / nt;
    chunk = (chunk + RP_ADAMW_ALIGN - 1) / RP_ADAMW_ALIGN * RP_ADAMW_ALIGN;
    return chunk < RP_ADAMW_CHUNK ? chunk : RP_ADAMW_CHUNK;
}

static void adamw_step(float *restrict p, const float *restrict g, float *restrict m,
                       float *restrict v, size_t n, int64_t step, const rp_adamw_params *hp,
                       int decay, float grad_scale, void *restrict out, size_t out_size,
                       const adamw_side *side, int kind)
{
    if (n == 0)
        return;
    /* Scalars exactly as torch's _single_tensor_adam computes them in
     * Python (double), then rounded to fp32 where they meet the tensors. */
    double t = (double)step;
    double bc1 = 1.0 - pow(hp->beta1, t);
    double bc2 = 1.0 - pow(hp->beta2, t);
    adamw_consts k = {
        .grad_scale = grad_scale,
        .decay_factor = (decay && hp->weight_decay != 0) ? (float)(1.0 - hp->lr * hp->weight_decay)
                                                        : 1.0f,
        .one_minus_b1 = (float)(1.0 - hp->beta1),
        .beta2 = (float)hp->beta2,
        .one_minus_b2 = (float)(1.0 - hp->beta2),
        .neg_step_size = (float)(-(hp->lr / bc1)),
        .bc2_sqrt = (float)pow(bc2, 0.5),
        .eps = (float)hp->eps,
    };

    if (n < RP_ADAMW_PARALLEL_MIN || omp_in_parallel()) {
        /* a piece of rp_adamw_ranges_split's (or another caller's) region:
         * no nested region, whose team of one costs microseconds a call */
        adamw_range(p, g, m, v, out, side, n, &k, kind);
        return;
    }
#pragma omp parallel
    {
        size_t chunk = chunk_of(n, (size_t)omp_get_num_threads());
        size_t chunks = (n + chunk - 1) / chunk;
#pragma omp for schedule(dynamic, 1)
        for (size_t c = 0; c < chunks; c++) {
            size_t lo = c * chunk, hi = lo + chunk < n ? lo + chunk : n;
            adamw_side at = side ? (adamw_side){side->p + lo, side->m + lo, side->v + lo}
                                 : (adamw_side){NULL, NULL, NULL};
            adamw_range(p + lo, g + lo, m + lo, v + lo, out ? (char *)out + lo * out_size : NULL,
                        side ? &at : NULL, hi - lo, &k, kind);
        }
    }
}

void rp_adamw_step(float *restrict p, const float *restrict g, float *restrict m,
                   float *restrict v, size_t n, int64_t step, const rp_adamw_params *hp,
                   int decay, float grad_scale, uint16_t *restrict bf16_copy)
{
    adamw_step(p, g, m, v, n, step, hp, decay, grad_scale, bf16_copy, sizeof *bf16_copy, NULL,
               bf16_copy ? KIND_BF16 : 0);
}

void rp_adamw_step_backup(float *restrict p, const float *restrict g, float *restrict m,
                          float *restrict v, size_t n, int64_t step, const rp_adamw_params *hp,
                          int decay, float grad_scale, uint16_t *restrict bf16_copy,
                          float *restrict old_p, float *restrict old_m, float *restrict old_v)
{
    adamw_side side = {old_p, old_m, old_v};
    adamw_step(p, g, m, v, n, step, hp, decay, grad_scale, bf16_copy, sizeof *bf16_copy, &side,
               KIND_SAVE | (bf16_copy ? KIND_BF16 : 0));
}

void rp_adamw_step_from_backup(float *restrict p, const float *restrict g, float *restrict m,
                               float *restrict v, size_t n, int64_t step,
                               const rp_adamw_params *hp, int decay, float grad_scale,
                               uint16_t *restrict bf16_copy, const float *restrict old_p,
                               const float *restrict old_m, const float *restrict old_v)
{
    /* read only (KIND_FROM): the casts drop a const the kernel keeps */
    adamw_side side = {(float *)old_p, (float *)old_m, (float *)old_v};
    adamw_step(p, g, m, v, n, step, hp, decay, grad_scale, bf16_copy, sizeof *bf16_copy, &side,
               KIND_FROM | (bf16_copy ? KIND_BF16 : 0));
}


void rp_adamw_ranges_split(const rp_adamw_range *ranges, size_t count,
                           void (*update)(void *ctx, size_t lo, size_t hi), void *ctx)
{
    size_t total = 0;
    for (size_t i = 0; i < count; i++)
        total += ranges[i].hi - ranges[i].lo;
    if (total == 0) /* no ranges, or empty ones: nothing to call */
        return;
    /* one region over the ranges together: each of them may be far below
     * the threshold (an embedding's runs of rows are) while their sum is not */
#pragma omp parallel if (total >= RP_ADAMW_PARALLEL_MIN)
    {
        size_t chunk = chunk_of(total, (size_t)omp_get_num_threads());
        size_t chunks = (total + chunk - 1) / chunk;
        size_t first = 0, before = 0; /* this thread's cursor: ranges[first] starts at
                                       * element `before` of the ranges taken together */
#pragma omp for schedule(monotonic : dynamic, 1)
        for (size_t c = 0; c < chunks; c++) {
            size_t lo = c * chunk, hi = lo + chunk < total ? lo + chunk : total;
            if (lo < before) /* a thread's chunks come in order (monotonic): never */
                first = before = 0;
            while (first < count && before + (ranges[first].hi - ranges[first].lo) <= lo)
                before += ranges[first].hi - ranges[first].lo, first++;
            for (size_t i = first, at = before; i < count && at < hi; i++) {
                size_t len = ranges[i].hi - ranges[i].lo;
                size_t a = lo > at ? lo : at, b = hi < at + len ? hi : at + len;
                if (a < b)
                    update(ctx, ranges[i].lo + (a - at), ranges[i].lo + (b - at));
                at += len;
            }
        }
    }
}
