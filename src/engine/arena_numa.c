/* --activation-numa reader: the activation buffers a GPU reads back placed
 * on its NUMA node. The rest of the host store stays interleaved over the
 * nodes (store/numa.h says why); an activation buffer, though, is written
 * by one GPU's download and read by one GPU's upload per iteration, so
 * when every GPU that reads it under the round-robin deal sits on one
 * node, the read never crosses the socket link. Buffers whose readers sit
 * on several nodes (the deal moves a job across executors from one
 * iteration to the next unless the job count is a multiple of the width)
 * stay interleaved. The binding itself, and its bound of half a node's
 * memory, is store/numa.c's. */
#include <stdlib.h>

#include "engine/engine_impl.h"
#include "engine/arena_numa.h"

/* The NUMA node of every executor that reads buffer b; -1 when they
 * differ or one is unknown. The deal of a job repeats within W iterations
 * (its executor is (t n + j) mod W of its pipeline's). */
static int reader_node(const rp_engine *e, const rp_arena_buffer *b)
{
    if (b->reader_job < 0 || !e->link_of)
        return -1;
    int g = (int)(b->microbatch / e->micro_per_pipeline);
    int W = rp_schedule_width(&e->plan, e->virtual_executors), node = -1;
    for (int64_t t = 1; t <= W; t++) {
        int k = e->link_of[rp_engine_executor(e, t, b->reader_job, g)].numa;
        if (k < 0 || (t > 1 && k != node))
            return -1;
        node = k;
    }
    return node;
}

rp_status rp_arena_numa_ranges(const rp_engine *e, size_t act_offset, rp_numa_range **out,
                               int *n, size_t *shared_bytes, rp_error *err)
{
    *out = NULL;
    *n = 0;
    *shared_bytes = 0;
    int nb = rp_arena_buffers(&e->arena, &e->plan, NULL);
    rp_arena_buffer *b = malloc(sizeof *b * (size_t)(nb > 0 ? nb : 1));
    rp_numa_range *r = malloc(sizeof *r * (size_t)(nb > 0 ? nb : 1));
    if (!b || !r) {
        free(b);
        free(r);
        return rp_error_set(err, RP_ERR_NOMEM, "--activation-numa: out of memory");
    }
    rp_arena_buffers(&e->arena, &e->plan, b);
    int k = 0;
    for (int i = 0; i < nb; i++) {
        int node = reader_node(e, &b[i]);
        size_t at = act_offset + b[i].offset * sizeof(float);
        size_t stride = b[i].floats * sizeof(float);
        if (node < 0)
            *shared_bytes += stride;
        else if (k > 0 && r[k - 1].node == node && r[k - 1].offset + r[k - 1].bytes == at)
            r[k - 1].bytes += stride; /* the next buffer of a run on one node */
        else
            r[k++] = (rp_numa_range){at, stride, node};
    }
    free(b);
    *out = r;
    *n = k;
    return RP_OK;
}
