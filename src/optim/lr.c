/* Learning-rate schedules (formulas in lr.h). */
#include "optim/lr.h"

#include <math.h>
#include <string.h>

static const char *const kind_names[] = {"constant", "cosine", "linear"};
#define RP_LR_NKINDS (sizeof kind_names / sizeof kind_names[0])

rp_status rp_lr_kind_parse(const char *name, const char *what, rp_lr_kind *out, rp_error *err)
{
    const char *w = what ? what : "learning-rate schedule";
    if (name)
        for (size_t i = 0; i < RP_LR_NKINDS; i++)
            if (strcmp(name, kind_names[i]) == 0) {
                *out = (rp_lr_kind)i;
                return RP_OK;
            }
    return rp_error_set(err, RP_ERR_INVALID_ARG,
                        "%s: unknown schedule '%s' (expected constant, cosine or linear)", w,
                        name ? name : "(null)");
}

const char *rp_lr_kind_name(rp_lr_kind kind)
{
    return (unsigned)kind < RP_LR_NKINDS ? kind_names[kind] : "?";
}

rp_status rp_lr_schedule_check(const rp_lr_schedule *s, rp_error *err)
{
    if ((unsigned)s->kind >= RP_LR_NKINDS)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "lr schedule: unknown kind %d",
                            (int)s->kind);
    if (!isfinite(s->lr) || s->lr < 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "lr schedule: lr must be finite and >= 0, got %g", s->lr);
    if (s->kind != RP_LR_CONSTANT && !(s->min_lr >= 0 && s->min_lr <= s->lr))
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "lr schedule: min_lr must be in [0, lr = %g] for %s, got %g", s->lr,
                            kind_names[s->kind], s->min_lr);
    if (s->warmup < 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "lr schedule: warmup must be >= 0, got %lld", (long long)s->warmup);
    if (s->steps < 1)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "lr schedule: steps must be >= 1, got %lld",
                            (long long)s->steps);
    return RP_OK;
}

double rp_lr_at(const rp_lr_schedule *s, int64_t k)
{
    const int64_t W = s->warmup, N = s->steps;
    if (k < 1)
        k = 1;
    if (k > N)
        k = N;
    if (k <= W)
        return s->lr * (double)k / (double)W;
    if (s->kind == RP_LR_CONSTANT)
        return s->lr;
    /* here W < k <= N, so N - W >= 1 */
    double f = (double)(k - W) / (double)(N - W);
    if (s->kind == RP_LR_COSINE)
        return s->min_lr + (s->lr - s->min_lr) * 0.5 * (1.0 + cos(M_PI * f));
    return s->min_lr + (s->lr - s->min_lr) * (1.0 - f);
}
