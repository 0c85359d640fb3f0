/* Softmax cross-entropy over rows of logits, numerically stable
 * (log-sum-exp taken about the row maximum, sums in double). */
#ifndef RP_KERNELS_CPU_XENT_H
#define RP_KERNELS_CPU_XENT_H

#include <stdint.h>

/* For each row r with counted == NULL or counted[r] != 0: loss[r] = logsumexp(z_r) - z_r[t_r];
 * other rows get loss[r] = 0. When grad is non-zero row r of dlogits (NULL:
 * the logits themselves, overwritten in place; else the logits are only
 * read) gets d(scale * loss_r)/dz_r = scale * (softmax(z_r) - onehot(t_r)),
 * or zeros for rows that do not count: the same bits either way. targets
 * must be in [0, vocab) for counted rows (callers check). */
void rp_xent_rows(float *logits, int64_t rows, int64_t vocab, const int32_t *targets,
                  const uint8_t *counted, float scale, double *loss, int grad, float *dlogits);

#endif
