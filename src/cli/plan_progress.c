/* `roundpipe plan`'s progress on standard error (plan_progress.h). */
#include "cli/plan_progress.h"

#include <string.h>
#include <unistd.h>

#define LIVE_DELAY_S 2.0
#define LIVE_INTERVAL_S 0.5
#define LINE_DELAY_S 10.0
#define LINE_INTERVAL_S 15.0

void rp_plan_cli_progress_report(void *arg, const rp_plan_search_state *state)
{
    rp_plan_cli_progress *pr = arg;
    char text[200];
    rp_plan_search_describe(state, text, sizeof text);
    if (pr->live)
        fprintf(pr->out, "\r\033[K%s: planning%s%s: %s", pr->label, pr->context[0] ? " " : "",
                pr->context, text);
    else
        fprintf(pr->out, "%s: planning%s%s: %s\n", pr->label, pr->context[0] ? " " : "",
                pr->context, text);
    fflush(pr->out);
    pr->drawn = pr->live;
}

void rp_plan_cli_progress_start(rp_plan_cli_progress *pr, const char *label, rp_progress_mode mode)
{
    memset(pr, 0, sizeof *pr);
    pr->label = label;
    pr->search = rp_plan_search_create();
    if (mode == RP_PROGRESS_NONE || !pr->search)
        return;
    pr->out = stderr;
    pr->live = mode == RP_PROGRESS_AUTO && isatty(STDERR_FILENO);
    rp_plan_search_set_report(pr->search, rp_plan_cli_progress_report, pr,
                              pr->live ? LIVE_DELAY_S : LINE_DELAY_S,
                              pr->live ? LIVE_INTERVAL_S : LINE_INTERVAL_S);
}

void rp_plan_cli_progress_context(rp_plan_cli_progress *pr, const char *context)
{
    snprintf(pr->context, sizeof pr->context, "%s", context);
}

void rp_plan_cli_progress_end(rp_plan_cli_progress *pr)
{
    if (pr->drawn)
        fputs("\r\033[K", pr->out);
    if (pr->out)
        fflush(pr->out);
    pr->drawn = 0;
}

void rp_plan_cli_progress_stop(rp_plan_cli_progress *pr)
{
    rp_plan_cli_progress_end(pr);
    rp_plan_search_destroy(&pr->search);
}
