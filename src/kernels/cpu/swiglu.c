#include <math.h>

#include "core/cpu_clones.h"
#include "kernels/cpu/expf_vector.h"
#include "kernels/cpu/swiglu.h"

/* Elements per task: a task's exps are computed together (through the
 * vector exp where rp_expf_vector_usable() said yes, which is where the
 * x86-64-v3 clone runs), then the elementwise formulas as before. */
#define SWIGLU_TASK 512

static int64_t task_count(int64_t n) { return (n + SWIGLU_TASK - 1) / SWIGLU_TASK; }

static int64_t task_length(int64_t n, int64_t task)
{
    const int64_t rest = n - task * SWIGLU_TASK;
    return rest < SWIGLU_TASK ? rest : SWIGLU_TASK;
}

RP_CPU_CLONES
static void forward_task(const float *g, const float *u, float *m, int64_t n, int vector)
{
    float e[SWIGLU_TASK]; /* exp(-g) */
    for (int64_t i = 0; i < n; i++)
        e[i] = -g[i];
    rp_expf_array(e, n, vector);
    for (int64_t i = 0; i < n; i++)
        m[i] = g[i] / (1.0f + e[i]) * u[i];
}

/* The tasks over `rows` rows of `cols` values at a row stride ld: rows of
 * their own when ld > cols (a task never spans a gap), else one row of
 * rows * cols values, the split of contiguous values the op always made.
 * Each element goes through the same operations whichever task holds it
 * (the vector exp has expf's bits; ISO C contracts nothing), so the split
 * changes no bits; the single row keeps the tasks' sizes as they were. */
typedef struct swiglu_split {
    int64_t rows, cols, ld, per_row;
} swiglu_split;

static swiglu_split split_of(int64_t rows, int64_t cols, int64_t ld)
{
    swiglu_split s = {rows, cols, ld, 0};
    if (ld == cols) {
        s.cols = s.ld = rows * cols;
        s.rows = 1;
    }
    s.per_row = task_count(s.cols);
    return s;
}

/* Task t's row, its first column and its length. */
static void task_at(const swiglu_split *s, int64_t t, int64_t *row, int64_t *col, int64_t *len)
{
    *row = t / s->per_row;
    *col = t % s->per_row * SWIGLU_TASK;
    *len = task_length(s->cols, t % s->per_row);
}

void rp_swiglu_forward(const float *g, const float *u, int64_t ld, float *m, int64_t rows,
                       int64_t cols)
{
    const int vector = rp_expf_vector_usable();
    const swiglu_split s = split_of(rows, cols, ld);
#pragma omp parallel for schedule(static)
    for (int64_t task = 0; task < s.rows * s.per_row; task++) {
        int64_t r, c, len;
        task_at(&s, task, &r, &c, &len);
        const int64_t at = r * s.ld + c;
        forward_task(g + at, u + at, m + r * s.cols + c, len, vector);
    }
}

RP_CPU_CLONES
static void backward_task(const float *g, const float *u, const float *dm, float *dg, float *du,
                          int64_t n, int vector)
{
    float e[SWIGLU_TASK]; /* exp(-g) */
    for (int64_t i = 0; i < n; i++)
        e[i] = -g[i];
    rp_expf_array(e, n, vector);
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i], ui = u[i], sg = 1.0f / (1.0f + e[i]);
        float silu = gi / (1.0f + e[i]);
        dg[i] = dm[i] * ui * (sg * (1.0f + gi * (1.0f - sg)));
        du[i] = dm[i] * silu;
    }
}

void rp_swiglu_backward(const float *g, const float *u, int64_t ld, const float *dm, float *dg,
                        float *du, int64_t rows, int64_t cols)
{
    const int vector = rp_expf_vector_usable();
    const swiglu_split s = split_of(rows, cols, ld);
#pragma omp parallel for schedule(static)
    for (int64_t task = 0; task < s.rows * s.per_row; task++) {
        int64_t r, c, len;
        task_at(&s, task, &r, &c, &len);
        const int64_t at = r * s.ld + c;
        backward_task(g + at, u + at, dm + r * s.cols + c, dg + at, du + at, len, vector);
    }
}

void rp_swiglu_clamped_forward(const float *g, const float *u, float limit, float alpha, float *m,
                               int64_t n)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float gate = g[i] > limit ? limit : g[i];
        const float up = u[i] > limit ? limit : u[i] < -limit ? -limit : u[i];
        const float sig = 1.0f / (1.0f + expf(-(gate * alpha)));
        const float glu = gate * sig;
        m[i] = (up + 1.0f) * glu;
    }
}

void rp_swiglu_clamped_backward(const float *g, const float *u, float limit, float alpha,
                                const float *dm, float *dg, float *du, int64_t n)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float gi = g[i], ui = u[i];
        const float gate = gi > limit ? limit : gi;
        const float up = ui > limit ? limit : ui < -limit ? -limit : ui;
        const float sig = 1.0f / (1.0f + expf(-(gate * alpha)));
        const float dglu = sig * (1.0f + alpha * gate * (1.0f - sig)); /* d(gate sig)/d gate */
        dg[i] = gi > limit ? 0.0f : dm[i] * (up + 1.0f) * dglu;
        du[i] = ui > limit || ui < -limit ? 0.0f : dm[i] * (gate * sig);
    }
}
