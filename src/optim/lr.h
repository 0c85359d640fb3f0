/* Learning-rate schedules, evaluated at step k = 1..N (1-based).
 *
 * With warmup W > 0, every schedule is linear warmup first:
 *   lr(k) = lr * k / W                            for k <= W
 * so the peak lr is reached at k = W. After the warmup (or from k = 1
 * when W = 0), with f = (k - W) / (N - W):
 *   constant: lr
 *   cosine:   min_lr + (lr - min_lr) * 0.5 * (1 + cos(pi * f))
 *   linear:   min_lr + (lr - min_lr) * (1 - f)
 * so cosine and linear reach min_lr exactly at k = N. When W >= N every
 * step is a warmup step (the peak is reached only if W == N); min_lr is not
 * used by constant. These are the formulas of tools/make_golden.py, in
 * the same floating-point order. */
#ifndef RP_OPTIM_LR_H
#define RP_OPTIM_LR_H

#include <stdint.h>

#include "core/error.h"

typedef enum rp_lr_kind { RP_LR_CONSTANT = 0, RP_LR_COSINE = 1, RP_LR_LINEAR = 2 } rp_lr_kind;

typedef struct rp_lr_schedule {
    rp_lr_kind kind;
    double lr;      /* peak learning rate, finite, >= 0 */
    double min_lr;  /* final value of cosine/linear, in [0, lr] */
    int64_t warmup; /* W >= 0 */
    int64_t steps;  /* N >= 1 */
} rp_lr_schedule;

/* "constant", "cosine" or "linear"; anything else is RP_ERR_INVALID_ARG
 * with a message that lists the valid names. `what` names the option in
 * the message (e.g. "--lr-schedule"); may be NULL. */
rp_status rp_lr_kind_parse(const char *name, const char *what, rp_lr_kind *out, rp_error *err);

/* The name rp_lr_kind_parse accepts for kind ("?" if out of range). */
const char *rp_lr_kind_name(rp_lr_kind kind);

/* Reject schedules rp_lr_at cannot evaluate meaningfully (messages name
 * the field: lr, min_lr, warmup, steps). */
rp_status rp_lr_schedule_check(const rp_lr_schedule *s, rp_error *err);

/* Learning rate of step k of a checked schedule. k is clamped to [1, N],
 * so steps past the end keep the last value. */
double rp_lr_at(const rp_lr_schedule *s, int64_t k);

#endif
