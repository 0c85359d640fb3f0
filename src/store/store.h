/* The host store: node-local shared memory that holds all training state
 * (weights in the compute dtype, fp32 master weights, gradients, AdamW
 * moments, event counters, the activation arena). The node leader creates
 * it; every rank of the node maps the same pages. Regions are addressed by
 * offset (see layout.h): the mapping's address differs between processes. */
#ifndef RP_STORE_STORE_H
#define RP_STORE_STORE_H

#include <hwloc.h>
#include <mpi.h>
#include <stddef.h>

#include "core/error.h"
#include "core/slow_work.h"
#include "store/layout.h"
#include "store/numa.h"

typedef struct rp_store rp_store;

/* All-zero means the defaults. */
typedef struct rp_store_params {
    const char *dir;       /* NULL: POSIX shm (/dev/shm); else a directory, e.g. a hugetlbfs mount */
    rp_numa_policy numa;   /* default: interleave over all NUMA nodes */
    int lazy;              /* 1: do not allocate the pages at creation (a too-small /dev/shm
                              is then only caught by the free-space check) */
    int map_noreserve;     /* 1: map with MAP_NORESERVE */
    hwloc_topology_t topology; /* NULL: the store loads this machine's topology */
    const rp_numa_range *bind; /* ranges (offsets into the store) bound to one NUMA node each
                                  instead (rp_numa_bind_ranges: whole pages, at most half a
                                  node), nbind of them */
    int nbind;
    const rp_progress_hook *reserve_progress; /* told as the leader allocates the pages
                                                 (bytes; NULL: nothing) */
    double wait_s;         /* 0: split comm into nodes, and wait in each exchange as long as
                              the node's other ranks take; > 0 (a store made while a run goes
                              on): comm is one node's ranks already, and each exchange waits
                              at most wait_s seconds, then RP_ERR_PEER_LOST (no collective on
                              comm may follow) */
} rp_store_params;

/* Collective over comm. Splits comm into nodes (MPI_COMM_TYPE_SHARED); on
 * each node the leader (node-local rank 0) creates and places the memory,
 * all ranks map it, then the leader removes the name, so nothing is left
 * behind in /dev/shm whatever happens later. The memory starts zeroed. If
 * any rank of a node fails, every rank of that node returns an error (the
 * failing rank with the cause, the others naming the failing rank). */
rp_status rp_store_create(MPI_Comm comm, const rp_store_layout *layout,
                          const rp_store_params *params, rp_store **out, rp_error *err);

/* Collective over the comm given at creation (frees the node communicator). */
void rp_store_destroy(rp_store **store);

void *rp_store_base(const rp_store *store);
size_t rp_store_bytes(const rp_store *store);
MPI_Comm rp_store_node_comm(const rp_store *store);
int rp_store_node_rank(const rp_store *store);
int rp_store_node_size(const rp_store *store);
int rp_store_is_leader(const rp_store *store);
/* NUMA nodes the pages are interleaved over (0: placement left to the kernel). */
int rp_store_numa_nodes(const rp_store *store);
/* What the leader bound of params.bind (all zero on the other ranks). */
rp_numa_bound rp_store_numa_bound(const rp_store *store);

/* Bytes of memory the store's pages hold now (allocated ahead, or touched
 * since creation with `lazy`, less what was released). */
size_t rp_store_resident_bytes(const rp_store *store);

/* Give the whole pages inside [addr, addr + bytes) back to the system: they
 * read as zeros afterwards, and take memory again once written. Every rank
 * of the node sees it; the caller makes sure none of them uses the range. */
void rp_store_release(const rp_store *store, void *addr, size_t bytes);

/* base + offset; offset + bytes must lie inside the store (asserted). */
void *rp_store_at(const rp_store *store, size_t offset, size_t bytes);

#endif
