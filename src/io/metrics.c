/* The metrics log's line (see metrics.h). */
#include "io/metrics.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/read_file.h"

void rp_metrics_write_line(FILE *f, const rp_step_metrics *m)
{
    char loss[32] = "null", norm[32] = "null";
    if (!isnan(m->loss))
        snprintf(loss, sizeof loss, "%.9g", m->loss);
    if (!isnan(m->grad_norm))
        snprintf(norm, sizeof norm, "%.9g", m->grad_norm);
    fprintf(f, "{\"step\":%lld,\"loss\":%s,\"lr\":%.9g,\"grad_norm\":%s,\"tokens\":%lld,"
               "\"counted_tokens\":%lld,\"tokens_per_s\":%.1f,\"time\":%.3f",
            (long long)m->step, loss, m->lr, norm, (long long)m->tokens,
            (long long)m->counted_tokens, m->tokens_per_s, m->time);
    if (!isnan(m->router_aux_loss))
        fprintf(f, ",\"router_aux_loss\":%.9g", m->router_aux_loss);
    fputs("}\n", f);
}

rp_status rp_metrics_keep_steps(const char *path, int64_t last_step, char **kept, int64_t *steps,
                                rp_error *err)
{
    *kept = NULL;
    *steps = 0;
    struct stat st;
    char *text = NULL;
    size_t len = 0;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
        *kept = calloc(1, 1);
        return *kept ? RP_OK : rp_error_set(err, RP_ERR_NOMEM, "--log %s", path);
    }
    RP_TRY(rp_read_file(path, (size_t)1 << 30, &text, &len, err));
    size_t end = 0; /* bytes of the kept lines */
    int64_t n = 0;
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        if (!nl)
            break; /* a line cut short by a crash */
        long long step = 0;
        if (sscanf(text + at, "{\"step\":%lld,", &step) != 1)
            break;
        /* a step's line, or the evaluation after the step just kept */
        int eval = n > 0 && step == n && !strncmp(text + at + strcspn(text + at, ","),
                                                   ",\"eval_loss\":", 13);
        if (!eval && (step != n + 1 || n >= last_step))
            break;
        n += !eval;
        at = (size_t)(nl - text) + 1;
        end = at;
    }
    text[end] = '\0';
    *kept = text;
    *steps = n;
    return RP_OK;
}
