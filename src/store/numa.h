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

#endif
