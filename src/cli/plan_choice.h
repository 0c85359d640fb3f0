/* `roundpipe plan`'s advice: which pipeline count it proposes (the fastest,
 * or fewer pipelines nearly as fast with much less host memory), the host
 * memory of a plan, and the verdict line (fits or not, on which memory). */
#ifndef RP_CLI_PLAN_CHOICE_H
#define RP_CLI_PLAN_CHOICE_H

#include "cli/plan_opts.h"
#include "engine/host_memory.h"

/* Fewer pipelines are proposed when they are at most RP_PLAN_SLOWER_MAX
 * slower than the fastest width (3%) and need at most RP_PLAN_HOST_MAX of
 * its host memory (90%). */
#define RP_PLAN_SLOWER_MAX 0.03
#define RP_PLAN_HOST_MAX 0.90

typedef struct rp_plan_choice {
    int have_host;         /* a config's model: the host figures are known */
    rp_host_memory host;   /* the chosen plan's */
    char host_note[1200];  /* LoRA: where the base's figure comes from ("" else) */
    /* the fastest width when another was chosen (fastest_width 0: the
     * chosen is the fastest, or the width was given) */
    int fastest_width;
    double fastest_ms, fastest_tokens_per_s;
    size_t fastest_host;
} rp_plan_choice;

/* The plan to propose for *mc (as rp_plan_cli_plan), with its host memory;
 * when the width is the planner's to choose and a config gives host
 * memory, fewer pipelines win within the margins above. */
rp_status rp_plan_cli_choose(const rp_plan_cli *o, rp_machine *mc, rp_plan *out, rp_sim_result *res,
                             rp_plan_choice *choice, rp_error *err);

/* Host bytes of a plan's store (model state, gradients, activations; the
 * mapped LoRA base is the page cache's, not counted). */
size_t rp_plan_choice_host_total(const rp_host_memory *hm);

/* The verdict: "verdict: fits|does NOT fit ..." (no newline): on a GPU of
 * known memory with the reserve counted, within --memory-limit-mib, the
 * GPU it needs when neither is known, or host memory for CPU executors;
 * and the host memory the run needs. *fits: 1 fits, 0 not, -1 unknown. */
void rp_plan_verdict(const rp_plan_cli *o, const rp_sim_result *r, const rp_plan_choice *c,
                     char *buf, size_t len, int *fits);

#endif
