#include "engine/progress.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const rp_progress_hook *rp_work_lines_start(rp_work_lines *w, const rp_logger *lg, int say,
                                            const char *what)
{
    memset(w, 0, sizeof *w);
    if (!say)
        return NULL;
    w->lg = lg;
    snprintf(w->what, sizeof w->what, "%s", what);
    rp_slow_work_start(&w->slow);
    w->hook = (rp_progress_hook){rp_work_lines_told, w};
    return &w->hook;
}

void rp_work_lines_told(void *arg, uint64_t done, uint64_t total)
{
    rp_work_lines *w = arg;
    double t;
    if (w->lg && done < total && rp_slow_work_due(&w->slow, &t))
        rp_log(w->lg, RP_LOG_INFO, "%s: %.1f of %.1f MiB (%.0f%%) in %.0f s", w->what,
               (double)done / 1048576.0, (double)total / 1048576.0,
               100.0 * (double)done / (double)total, t);
}

double rp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double rp_wall_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Whether the standard output of process `pid` is a terminal, as far as
 * /proc tells: 1 yes, 0 no, -1 unknown. */
static int stdout_of_is_terminal(pid_t pid)
{
    char link[64], target[256];
    snprintf(link, sizeof link, "/proc/%d/fd/1", (int)pid);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0)
        return -1;
    target[n] = '\0';
    return strncmp(target, "/dev/pts/", 9) == 0 || strncmp(target, "/dev/tty", 8) == 0;
}

int rp_progress_live_default(void)
{
    if (!isatty(STDOUT_FILENO))
        return 0;
    /* Open MPI's mpirun hands its local ranks a pseudo-terminal as standard
     * output whatever its own standard output is, so under it (its
     * OMPI_COMM_WORLD_SIZE is set) follow mpirun's, the parent process. */
    if (getenv("OMPI_COMM_WORLD_SIZE") && stdout_of_is_terminal(getppid()) == 0)
        return 0;
    return 1;
}

void rp_progress_start(rp_progress *pr, FILE *out, int live, double interval, int64_t first,
                       int64_t steps)
{
    pr->out = out;
    pr->live = live;
    pr->interval = interval;
    pr->t_start = pr->t_last = rp_now();
    pr->first = first;
    pr->steps = steps;
    pr->eval_step = 0;
    pr->drawn = 0;
    pr->line[0] = '\0';
    pthread_mutex_init(&pr->lock, NULL);
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
    if (!pr->live && now - pr->t_last < pr->interval && step != pr->first + 1)
        return;
    pr->t_last = now;
    /* this run's steps took the time since it started: a resumed run's
     * earlier steps are not among them */
    double per_step = (now - pr->t_start) / (double)(step - pr->first);
    char eta[32];
    format_eta(per_step * (double)(pr->steps - step), eta, sizeof eta);
    pthread_mutex_lock(&pr->lock);
    char ev[48] = "";
    if (pr->eval_step > 0)
        snprintf(ev, sizeof ev, pr->live ? " | eval %.4f" : " eval %.4f", pr->eval_loss);
    if (pr->live) {
        snprintf(pr->line, sizeof pr->line, "step %lld/%lld | loss %.4f%s | %.0f tok/s | ETA %s",
                 (long long)step, (long long)pr->steps, loss, ev, tokens_per_s, eta);
        /* \033[K erases what a longer previous line left to the right */
        fprintf(pr->out, "\r%s\033[K", pr->line);
        pr->drawn = 1;
    } else {
        fprintf(pr->out, "roundpipe: step %lld/%lld loss %.4f%s %.0f tok/s ETA %s\n",
                (long long)step, (long long)pr->steps, loss, ev, tokens_per_s, eta);
    }
    fflush(pr->out);
    pthread_mutex_unlock(&pr->lock);
}

void rp_progress_log_sink(void *arg, const char *line)
{
    rp_progress *pr = arg;
    pthread_mutex_lock(&pr->lock);
    /* one write: clear the live line, the message, the line again */
    if (pr->drawn)
        fprintf(pr->out, "\r\033[K%s\r%s\033[K", line, pr->line);
    else
        fputs(line, pr->out);
    fflush(pr->out);
    pthread_mutex_unlock(&pr->lock);
}

void rp_progress_eval(rp_progress *pr, int64_t step, double loss)
{
    pthread_mutex_lock(&pr->lock);
    if (loss >= 0) {
        pr->eval_step = step;
        pr->eval_loss = loss;
    }
    pthread_mutex_unlock(&pr->lock);
}

static void end_line(rp_progress *pr)
{
    if (pr->drawn)
        fputc('\n', pr->out);
    pr->drawn = 0;
}

void rp_progress_finish(rp_progress *pr, int64_t last, double last_loss)
{
    if (!pr->out)
        return;
    char took[32];
    format_eta(rp_now() - pr->t_start, took, sizeof took);
    pthread_mutex_lock(&pr->lock);
    end_line(pr);
    char ev[64] = "";
    if (pr->eval_step > 0)
        snprintf(ev, sizeof ev, ", eval loss %.4f after step %lld", pr->eval_loss,
                 (long long)pr->eval_step);
    if (last <= pr->first) /* a resume of a finished run: no step, no loss */
        fprintf(pr->out, "roundpipe: done: nothing left to train (all %lld steps were done "
                "before this run)%s\n", (long long)pr->steps, ev);
    else if (last < pr->steps)
        fprintf(pr->out, "roundpipe: stopped at step %lld of %lld after %s, last loss %.4f%s\n",
                (long long)last, (long long)pr->steps, took, last_loss, ev);
    else if (pr->first > 0)
        fprintf(pr->out, "roundpipe: done: steps %lld-%lld of %lld in %s, final loss %.4f%s\n",
                (long long)pr->first + 1, (long long)last, (long long)pr->steps, took,
                last_loss, ev);
    else
        fprintf(pr->out, "roundpipe: done: %lld steps in %s, final loss %.4f%s\n",
                (long long)last, took, last_loss, ev);
    fflush(pr->out);
    pthread_mutex_unlock(&pr->lock);
}

void rp_progress_stop(rp_progress *pr)
{
    if (!pr->out)
        return;
    pthread_mutex_lock(&pr->lock);
    end_line(pr);
    fflush(pr->out);
    pr->out = NULL;
    pthread_mutex_unlock(&pr->lock);
    pthread_mutex_destroy(&pr->lock);
}
