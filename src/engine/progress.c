#include "engine/progress.h"

#include <math.h>
#include <time.h>

double rp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void rp_progress_start(rp_progress *pr, FILE *out, int live, double interval, int64_t steps)
{
    pr->out = out;
    pr->live = live;
    pr->interval = interval;
    pr->t_start = pr->t_last = rp_now();
    pr->steps = steps;
    pr->drawn = 0;
}

static void format_eta(double s, char *buf, size_t n)
{
    if (!isfinite(s) || s < 0)
        s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
    else
        snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

void rp_progress_update(rp_progress *pr, int64_t step, double loss, double tokens_per_s)
{
    if (!pr->out)
        return;
    double now = rp_now();
    if (!pr->live && now - pr->t_last < pr->interval && step != 1)
        return;
    pr->t_last = now;
    double per_step = (now - pr->t_start) / (double)step;
    char eta[32];
    format_eta(per_step * (double)(pr->steps - step), eta, sizeof eta);
    if (pr->live) {
        fprintf(pr->out, "\rstep %lld/%lld | loss %.4f | %.0f tok/s | ETA %s\033[K",
                (long long)step, (long long)pr->steps, loss, tokens_per_s, eta);
        pr->drawn = 1;
    } else {
        fprintf(pr->out, "roundpipe: step %lld/%lld loss %.4f %.0f tok/s ETA %s\n",
                (long long)step, (long long)pr->steps, loss, tokens_per_s, eta);
    }
    fflush(pr->out);
}

void rp_progress_finish(rp_progress *pr, int64_t steps, double last_loss)
{
    if (!pr->out)
        return;
    if (pr->drawn)
        fputc('\n', pr->out);
    char took[32];
    format_eta(rp_now() - pr->t_start, took, sizeof took);
    fprintf(pr->out, "roundpipe: done: %lld steps in %s, final loss %.4f\n", (long long)steps,
            took, last_loss);
    fflush(pr->out);
}
