/* GPipe / 1F1B simulation: fixed per-GPU task orders, dependencies resolved
 * by repeatedly starting every GPU's next task whose inputs are known. */
#include "plan/baseline.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Greedy count of groups needed with cap; returns INT_MAX-ish if a single
 * element exceeds it. */
static int groups_needed(const double *c, int n, double cap, int *cut)
{
    int k = 0;
    double acc = 0;
    for (int i = 0; i < n; i++) {
        if (c[i] > cap)
            return n + 1;
        if (i == 0 || acc + c[i] > cap) {
            if (cut)
                cut[k] = i;
            k++;
            acc = 0;
        }
        acc += c[i];
    }
    return k;
}

int rp_split_minmax(const double *c, int n, int parts, int *cut)
{
    double lo = 0, hi = 0;
    for (int i = 0; i < n; i++) {
        hi += c[i];
        if (c[i] > lo)
            lo = c[i];
    }
    if (parts >= n) {
        for (int i = 0; i < n; i++)
            cut[i] = i;
        return n;
    }
    /* the optimum is the smallest cap with groups_needed <= parts */
    for (int it = 0; it < 100 && hi - lo > 1e-12 * (1 + hi); it++) {
        double mid = 0.5 * (lo + hi);
        if (groups_needed(c, n, mid, NULL) <= parts)
            hi = mid;
        else
            lo = mid;
    }
    return groups_needed(c, n, hi, cut);
}

typedef struct task {
    int fwd, mb;
} task;

static double dmax(double a, double b) { return a > b ? a : b; }

rp_status rp_simulate_baseline(const rp_cost_model *m, const rp_machine *mc, rp_baseline kind,
                               rp_sim_result *r, rp_error *err)
{
    memset(r, 0, sizeof *r);
    RP_TRY(rp_machine_check(mc, err));
    int L = m->num_layers, M = mc->microbatches;
    int S = mc->gpus < L ? mc->gpus : L;
    double *c = malloc(sizeof(double) * L);
    int *cut = malloc(sizeof(int) * (L + 1));
    double *ff = calloc((size_t)S, sizeof(double)), *bb = calloc((size_t)S, sizeof(double));
    double *fend = malloc(sizeof(double) * S * M), *bend = malloc(sizeof(double) * S * M);
    task *order = malloc(sizeof(task) * S * 2 * M);
    if (!c || !cut || !ff || !bb || !fend || !bend || !order) {
        free(c); free(cut); free(ff); free(bb); free(fend); free(bend); free(order);
        return rp_error_set(err, RP_ERR_NOMEM, "baseline: out of memory");
    }
    for (int l = 0; l < L; l++)
        c[l] = 2 * m->layers[l].fwd_ms + m->layers[l].bwd_ms;
    int ns = rp_split_minmax(c, L, S, cut);
    S = ns;
    cut[S] = L;
    for (int s = 0; s < S; s++) {
        ff[s] = rp_cost_fwd_ms(m, cut[s], cut[s + 1] - 1);
        bb[s] = rp_cost_bwd_ms(m, cut[s], cut[s + 1] - 1);
        if (s == S - 1) /* activations are fresh: no recompute */
            bb[s] -= ff[s];
    }
    /* per-GPU task orders */
    for (int s = 0; s < S; s++) {
        task *o = order + (size_t)s * 2 * M;
        int k = 0;
        if (kind == RP_BASELINE_GPIPE) {
            for (int i = 0; i < M; i++)
                o[k++] = (task){1, i};
            for (int i = 0; i < M; i++)
                o[k++] = (task){0, i};
        } else {
            int warm = S - s - 1 < M ? S - s - 1 : M, f = 0, b = 0;
            for (; f < warm; f++)
                o[k++] = (task){1, f};
            while (f < M) {
                o[k++] = (task){1, f++};
                o[k++] = (task){0, b++};
            }
            while (b < M)
                o[k++] = (task){0, b++};
        }
    }
    for (int i = 0; i < S * M; i++)
        fend[i] = bend[i] = -1;
    int *pos = calloc((size_t)S, sizeof(int));
    double *free_at = calloc((size_t)S, sizeof(double)), *busy = calloc((size_t)S, sizeof(double));
    int remaining = S * 2 * M;
    rp_status st = RP_OK;
    while (remaining > 0 && pos && free_at && busy) {
        int progress = 0;
        for (int s = 0; s < S; s++) {
            while (pos[s] < 2 * M) {
                task tk = order[(size_t)s * 2 * M + pos[s]];
                double in;
                if (tk.fwd) {
                    in = s == 0 ? 0.0 : fend[(s - 1) * M + tk.mb];
                    if (in < 0)
                        break;
                    if (s > 0)
                        in += mc->transfer_ms;
                } else {
                    double f = fend[s * M + tk.mb];
                    if (f < 0)
                        break;
                    in = f;
                    if (s < S - 1) {
                        double b = bend[(s + 1) * M + tk.mb];
                        if (b < 0)
                            break;
                        in = dmax(in, b + mc->transfer_ms);
                    }
                }
                double t0 = dmax(free_at[s], in), d = tk.fwd ? ff[s] : bb[s];
                free_at[s] = t0 + d;
                busy[s] += d;
                (tk.fwd ? fend : bend)[s * M + tk.mb] = t0 + d;
                pos[s]++;
                remaining--;
                progress = 1;
            }
        }
        if (!progress) {
            st = rp_error_set(err, RP_ERR_INTERNAL, "baseline: schedule deadlocked");
            break;
        }
    }
    if (!pos || !free_at || !busy)
        st = rp_error_set(err, RP_ERR_NOMEM, "baseline: out of memory");
    if (st == RP_OK) {
        double span = 0;
        for (int s = 0; s < S; s++)
            span = dmax(span, free_at[s]);
        r->iteration_ms = span;
        double tot = 0, mx = 0, work = 0;
        for (int e = 0; e < mc->gpus; e++) {
            r->bubble[e] = e < S ? 1.0 - busy[e] / span : 1.0;
            tot += r->bubble[e];
            mx = dmax(mx, r->bubble[e]);
            if (e < S)
                work += busy[e];
        }
        r->bubble_mean = tot / mc->gpus;
        r->bubble_max = mx;
        r->compute_ms = work / mc->gpus;
        if (mc->tokens_per_iteration > 0)
            r->tokens_per_s = (double)mc->tokens_per_iteration / (span / 1e3);
        r->width = S;
        r->groups = 1;
        r->group_microbatches = M;
    }
    free(pos); free(free_at); free(busy);
    free(c); free(cut); free(ff); free(bb); free(fend); free(bend); free(order);
    return st;
}
