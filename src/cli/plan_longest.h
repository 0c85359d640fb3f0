/* `roundpipe plan --seq-len max`: the longest sequence the planner fits
 * under the device memory limit and, when --host-memory-limit-mib is given,
 * the host memory, and what bounds it there. */
#ifndef RP_CLI_PLAN_LONGEST_H
#define RP_CLI_PLAN_LONGEST_H

#include <stdint.h>

#include "cli/plan_progress.h"
#include "core/error.h"

/* Lengths tried are multiples of this many tokens. */
#define RP_LONGEST_GRANULE 1024
/* and at most --seq-len's largest value */
#define RP_LONGEST_CAP ((int64_t)1 << 24)

typedef enum rp_longest_bound {
    RP_BOUND_DEVICE = 0, /* no plan fits the device memory limit */
    RP_BOUND_HOST = 1,   /* a plan fits, its host memory is over --host-memory-limit-mib */
    RP_BOUND_CAP = 2     /* the largest length --seq-len takes fits */
} rp_longest_bound;

typedef struct rp_longest {
    int64_t longest;     /* tokens a sample; 0: not even one granule fits */
    int64_t first_over;  /* the next granule's length, which does not fit (0: RP_BOUND_CAP) */
    rp_longest_bound bound;
    const char *part;    /* the largest part at first_over: "workspace", "gradients",
                            "saved activations", "weights", "stage buffers", "shared
                            workspace", "kept blocks" (device), "activations", "model state and
                            gradients", "executor buffers" (host) */
    int64_t need, limit; /* at first_over: the bytes needed (device: the fallback plan's
                            peak; host: the node's) and the limit they are over */
    int nparts;          /* the need in parts, largest first */
    struct {
        const char *name;
        int64_t bytes;
    } parts[7];
    char why[2048];      /* the bound in words: the limit, the parts largest first, with
                            their jobs and layers */
    char host[512];      /* the host memory the longest length needs, in words */
} rp_longest;

/* argv's --seq-len max (or --seq-len=max): the index of the word to
 * replace by a length, *joined set when it is the --seq-len=max form; -1
 * when argv asks for no search. */
int rp_plan_longest_requested(int argc, char **argv, int *joined);

/* The search over lengths: argv as `roundpipe plan` takes it with the word
 * at `at` (rp_plan_longest_requested) standing for each length tried,
 * every option as for one length. On RP_OK *out says the longest and the
 * bound, and argv[at] is left naming the longest (or the first length when
 * none fits) in `word` (the caller's, 32 bytes), so a parse of argv
 * plans it. Each length's search reports through `progress` and shares
 * its search object (a length tried again is not searched again). An error that is not a memory bound (a bad option or file) is
 * returned as the plain parse's would be. */
rp_status rp_plan_longest_search(int argc, char **argv, int at, int joined, char *word,
                                 rp_plan_cli_progress *progress, rp_longest *out,
                                 rp_error *err);

#endif
