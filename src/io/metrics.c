/* The metrics log's line (see metrics.h). */
#include "io/metrics.h"

#include <math.h>

void rp_metrics_write_line(FILE *f, const rp_step_metrics *m)
{
    char loss[32] = "null", norm[32] = "null";
    if (!isnan(m->loss))
        snprintf(loss, sizeof loss, "%.9g", m->loss);
    if (!isnan(m->grad_norm))
        snprintf(norm, sizeof norm, "%.9g", m->grad_norm);
    fprintf(f, "{\"step\":%lld,\"loss\":%s,\"lr\":%.9g,\"grad_norm\":%s,\"tokens\":%lld,"
               "\"counted_tokens\":%lld,\"tokens_per_s\":%.1f,\"time\":%.3f}\n",
            (long long)m->step, loss, m->lr, norm, (long long)m->tokens,
            (long long)m->counted_tokens, m->tokens_per_s, m->time);
}
