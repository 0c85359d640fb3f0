/* Which physical cores each rank of a node runs its threads on. Ranks of a
 * node share the machine: together they use no more threads than there are
 * physical cores, their core sets are disjoint, and each rank's set lies
 * near its device (the cores local to the GPU's PCI bus, from hwloc; never
 * guessed from the device index). The computation is a pure function of the
 * topology and every rank's locality, so every rank can compute all sets and
 * they agree; tests run it on synthetic and XML topologies. */
#ifndef RP_STORE_BIND_H
#define RP_STORE_BIND_H

#include <hwloc.h>
#include <mpi.h>

#include "core/error.h"

#define RP_BUSID_MAX 32 /* "dddd:bb:dd.f" plus room */

/* The cpuset of the non-I/O object nearest the PCI device `busid`
 * ("0000:3b:00.0" or "3b:00.0"). *found = 0 and the whole machine when
 * busid is NULL/empty or the device is absent from topo (a topology loaded
 * without I/O discovery, a CPU executor). */
rp_status rp_bind_locality(hwloc_topology_t topo, const char *busid, hwloc_bitmap_t out,
                           int *found, rp_error *err);

/* The physical cores of node-local `rank` among n_ranks, as a cpuset holding
 * all PUs of those cores, and their count (the number of threads the rank
 * may run). locality[r] is rank r's preferred cpuset (NULL array or NULL
 * entry: anywhere). Each rank gets floor(C/n) or floor(C/n)+1 of the C
 * cores (the first C mod n ranks get one more), first from its locality
 * (ranks sharing a locality split it evenly, in contiguous blocks), then
 * from what is left. With fewer cores than ranks each rank gets one core,
 * rank r core r mod C: sharing is unavoidable then and *n_cores is 1. */
rp_status rp_bind_plan(hwloc_topology_t topo, int n_ranks, const hwloc_const_bitmap_t *locality,
                       int rank, hwloc_bitmap_t out, int *n_cores, rp_error *err);

/* Collective over the node communicator: gathers every rank's busid (NULL:
 * none), computes this rank's cores with rp_bind_plan, and binds the calling
 * process to them when `apply` is set (quietly skipped where binding is not
 * supported; *bound tells). */
rp_status rp_bind_node(MPI_Comm node, hwloc_topology_t topo, const char *busid, int apply,
                       hwloc_bitmap_t out, int *n_cores, int *bound, rp_error *err);

#endif
