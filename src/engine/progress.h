/* Progress display of rank 0: a live line (step, loss, tokens/s, ETA)
 * redrawn in place on a terminal, otherwise one line every few seconds.
 * Thread-safe: the logger thread updates it while other threads log
 * messages through rp_progress_log_sink, which clears the live line, prints
 * the message and redraws the line, so the two never share a line. */
#ifndef RP_ENGINE_PROGRESS_H
#define RP_ENGINE_PROGRESS_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "core/log.h"
#include "core/slow_work.h"

typedef struct rp_progress {
    FILE *out;        /* NULL: silent */
    int live;         /* redraw one line with \r */
    double interval;  /* seconds between lines when not live */
    double t_start, t_last;
    int64_t first;    /* the steps done before this run (a resumed run's checkpoint step) */
    int64_t steps;
    int64_t eval_step; /* the latest evaluation's step (0: none yet) */
    double eval_loss;
    int drawn;        /* the live line is on screen (no newline after it yet) */
    char line[160];   /* the live line's text, to redraw after a message */
    pthread_mutex_t lock;
} rp_progress;

/* A run of steps first+1 .. steps (first: the steps a resumed run's
 * checkpoint holds, 0 for a fresh one): the ETA counts the time per step
 * from this run's steps only. */
void rp_progress_start(rp_progress *pr, FILE *out, int live, double interval, int64_t first,
                       int64_t steps);
void rp_progress_update(rp_progress *pr, int64_t step, double loss, double tokens_per_s);
/* The latest validation loss (rp_eval_run), shown from the next line on
 * ("eval 1.2345"); loss < 0: nothing was counted, nothing shown. */
void rp_progress_eval(rp_progress *pr, int64_t step, double loss);
/* The closing line after step `last` (ends the live line first): "done: N
 * steps in T, final loss X" (a resumed run: "done: steps K-N of N ..."),
 * "stopped at step K of N after T, last loss X" when last < N, or "done:
 * nothing left to train" when this run trained no step. */
void rp_progress_finish(rp_progress *pr, int64_t last, double last_loss);
/* Ends the live line (a newline after it) without a closing line, e.g. before
 * an error is printed; then frees the lock. Call once, after finish or not. */
void rp_progress_stop(rp_progress *pr);

/* An rp_logger sink (core/log.h) for a live display: clears the line, prints
 * `line` on the display's stream, redraws. `arg` is the rp_progress. */
void rp_progress_log_sink(void *arg, const char *line);

/* Whether `roundpipe train --progress auto` shows a live line: standard
 * output is a terminal (and under Open MPI's mpirun, mpirun's is one too).
 * mpirun gives its ranks' standard error a pipe but their standard output a
 * pseudo-terminal, so the live line goes to standard output. */
int rp_progress_live_default(void);

/* Long work before or after the steps, in bytes (the host store's
 * allocation, a checkpoint training waits for, a saved model): rank 0
 * logs "WHAT: X of Y MiB (P%) in T s" when it takes long (core/slow_work.h's
 * rule). rp_work_lines_start returns the hook to hand to the module doing
 * the work (NULL when !say: other ranks, --progress none); the engine's own
 * loops call rp_work_lines_told instead. */
typedef struct rp_work_lines {
    const rp_logger *lg;
    char what[4400];
    rp_slow_work slow;
    rp_progress_hook hook;
} rp_work_lines;
const rp_progress_hook *rp_work_lines_start(rp_work_lines *w, const rp_logger *lg, int say,
                                            const char *what);
void rp_work_lines_told(void *w, uint64_t done, uint64_t total);

/* Monotonic seconds. */
double rp_now(void);

/* Wall-clock seconds since the Unix epoch (for the metrics' "time"). */
double rp_wall_clock(void);

#endif
