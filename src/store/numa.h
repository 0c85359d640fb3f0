/* NUMA placement of host-store pages with hwloc. The store is read by the
 * optimizer threads of every rank and by every GPU's DMA engine, so by
 * default its pages are interleaved over all NUMA nodes: bandwidth adds up
 * instead of one node's memory controller serving everyone. */
#ifndef RP_STORE_NUMA_H
#define RP_STORE_NUMA_H

#include <hwloc.h>
#include <stddef.h>

#include "core/error.h"

typedef enum rp_numa_policy {
    RP_NUMA_INTERLEAVE = 0, /* default: round-robin pages over all NUMA nodes with memory */
    RP_NUMA_FIRST_TOUCH = 1 /* leave placement to the kernel (the leader touches first) */
} rp_numa_policy;

/* The NUMA nodes interleaving spreads over: every node of topo that has
 * memory (all nodes when the topology does not report memory sizes).
 * Returns the number of nodes put in `out`. */
int rp_numa_interleave_set(hwloc_topology_t topo, hwloc_bitmap_t out);

/* Apply policy to [addr, addr + bytes), which must be page aligned; call it
 * before the pages are first touched. Never fails for lack of support: with
 * one NUMA node, a topology that is not this machine's (synthetic, XML), or
 * a kernel without mbind, nothing is done. *nodes (may be NULL) receives the
 * number of nodes the pages are interleaved over, 0 when nothing was done. */
rp_status rp_numa_place(hwloc_topology_t topo, void *addr, size_t bytes, rp_numa_policy policy,
                        int *nodes, rp_error *err);

/* A range of a mapping to bind to one NUMA node (os index). */
typedef struct rp_numa_range {
    size_t offset, bytes;
    int node;
} rp_numa_range;

/* What rp_numa_bind_ranges did, in bytes of whole pages. */
typedef struct rp_numa_bound {
    size_t asked;     /* the whole pages inside the ranges */
    size_t bound;     /* bound to their node */
    size_t absent;    /* left as they were: a node this machine lacks, or a topology
                         that is not this machine's, or no membind support */
    size_t over_half; /* left: they would have taken more than half their node's memory */
    size_t refused;   /* left: the kernel refused (mbind under seccomp) */
} rp_numa_bound;

/* Bind the whole pages inside each range of the mapping at base (page
 * aligned) to the range's node, before the pages are first touched. A
 * node's ranges are bound in order until they would take more than half of
 * its memory (as hwloc reports it); the rest, and everything this machine
 * cannot bind, keep the mapping's policy. Fails only for bad arguments. */
rp_status rp_numa_bind_ranges(hwloc_topology_t topo, char *base, const rp_numa_range *ranges,
                              int n, rp_numa_bound *out, rp_error *err);

#endif
