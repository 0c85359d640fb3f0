/* --activation-numa reader: which NUMA node each activation buffer of the
 * segment's arena goes to (arena_numa.c says why). */
#ifndef RP_ENGINE_ARENA_NUMA_H
#define RP_ENGINE_ARENA_NUMA_H

#include "engine/engine_impl.h"
#include "store/numa.h"

/* The arena's buffers whose readers (every executor that reads one back
 * under the round-robin deal, e->link_of's NUMA node of its rank) share
 * one NUMA node, as ranges of the store (the arena at act_offset), runs of
 * adjacent buffers merged; *shared_bytes counts the buffers read from
 * several nodes, or from an unknown one. *out is malloc'd. */
rp_status rp_arena_numa_ranges(const rp_engine *e, size_t act_offset, rp_numa_range **out,
                               int *n, size_t *shared_bytes, rp_error *err);

#endif
