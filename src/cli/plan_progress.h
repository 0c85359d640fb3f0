/* `roundpipe plan`'s report of a long search (plan/search.h) on standard
 * error, under --progress: auto redraws one line in place when standard
 * error is a terminal (from 2 s into the search, twice a second) and
 * otherwise prints a line every 15 s from 10 s in, as line does anywhere;
 * none prints nothing. A search shorter than the first delay prints nothing
 * in any mode. */
#ifndef RP_CLI_PLAN_PROGRESS_H
#define RP_CLI_PLAN_PROGRESS_H

#include <stdio.h>

#include "engine/train_options.h"
#include "plan/search.h"

typedef struct rp_plan_cli_progress {
    rp_plan_search *search; /* lent to each search of the command (the widths it searched
                               are not searched again); NULL: out of memory */
    FILE *out;              /* NULL: silent */
    int live;               /* redraw one line */
    int drawn;              /* the live line is on screen */
    const char *label;      /* "roundpipe plan" */
    char context[48];       /* what is being planned, e.g. "--seq-len 8192" ("": nothing) */
} rp_plan_cli_progress;

/* A search object reporting through pr; label names the command. */
void rp_plan_cli_progress_start(rp_plan_cli_progress *pr, const char *label, rp_progress_mode mode);
/* The report start installs (plan/search.h's rp_plan_search_report_fn; arg
 * is the rp_plan_cli_progress): "LABEL: planning[ CONTEXT]: " and the
 * search's state (rp_plan_search_describe), redrawn or as a line. */
void rp_plan_cli_progress_report(void *arg, const rp_plan_search_state *state);
/* Name what the next searches plan ("" for nothing). */
void rp_plan_cli_progress_context(rp_plan_cli_progress *pr, const char *context);
/* Clear the live line (before the result or an error is printed). */
void rp_plan_cli_progress_end(rp_plan_cli_progress *pr);
/* End, and free the search object. */
void rp_plan_cli_progress_stop(rp_plan_cli_progress *pr);

#endif
