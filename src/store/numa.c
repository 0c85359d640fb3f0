#include "config.h"
#include "store/numa.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int rp_numa_interleave_set(hwloc_topology_t topo, hwloc_bitmap_t out)
{
    hwloc_bitmap_zero(out);
    int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE), with_memory = 0;
    for (int i = 0; i < n; i++) {
        hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, (unsigned)i);
        if (node->attr && node->attr->numanode.local_memory > 0) {
            hwloc_bitmap_set(out, node->os_index);
            with_memory++;
        }
    }
    /* Some platforms (containers, old kernels) report no memory sizes at
     * all: then every node counts rather than none. */
    if (with_memory == 0)
        for (int i = 0; i < n; i++)
            hwloc_bitmap_set(out, hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, (unsigned)i)->os_index);
    return hwloc_bitmap_weight(out);
}

rp_status rp_numa_place(hwloc_topology_t topo, void *addr, size_t bytes, rp_numa_policy policy,
                        int *nodes, rp_error *err)
{
    if (nodes)
        *nodes = 0;
    if (!topo || (bytes > 0 && !addr) || ((uintptr_t)addr & 4095u) != 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "NUMA placement: address %p is NULL or not page aligned", addr);
    if (policy == RP_NUMA_FIRST_TOUCH || bytes == 0)
        return RP_OK;
    if (policy != RP_NUMA_INTERLEAVE)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "NUMA placement: unknown policy %d", (int)policy);
    if (!hwloc_topology_is_thissystem(topo))
        return RP_OK;
    const struct hwloc_topology_support *sup = hwloc_topology_get_support(topo);
    if (!sup->membind->set_area_membind || !sup->membind->interleave_membind)
        return RP_OK;
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (!set)
        return rp_error_set(err, RP_ERR_NOMEM, "NUMA placement: out of memory");
    int n = rp_numa_interleave_set(topo, set);
    /* One node: interleaving is the default placement already. A failing
     * mbind (seccomp in containers) is no reason to refuse to train. */
    if (n > 1 && hwloc_set_area_membind(topo, addr, bytes, set, HWLOC_MEMBIND_INTERLEAVE,
                                        HWLOC_MEMBIND_BYNODESET) == 0 && nodes)
        *nodes = n;
    hwloc_bitmap_free(set);
    return RP_OK;
}

/* Bytes of NUMA node os index `node` (0 when hwloc does not say). */
static uint64_t node_memory(hwloc_topology_t topo, int node)
{
    hwloc_obj_t o = hwloc_get_numanode_obj_by_os_index(topo, (unsigned)node);
    return o && o->attr ? o->attr->numanode.local_memory : 0;
}

rp_status rp_numa_bind_ranges(hwloc_topology_t topo, char *base, const rp_numa_range *ranges,
                              int n, rp_numa_bound *out, rp_error *err)
{
    memset(out, 0, sizeof *out);
    if (!topo || !base || ((uintptr_t)base & 4095u) != 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "NUMA binding: base %p is NULL or not page aligned", (void *)base);
    const struct hwloc_topology_support *sup = hwloc_topology_get_support(topo);
    int can = hwloc_topology_is_thissystem(topo) && sup->membind->set_area_membind &&
              sup->membind->bind_membind;
    int last = hwloc_bitmap_last(hwloc_topology_get_topology_nodeset(topo));
    uint64_t *taken = calloc((size_t)(last >= 0 ? last + 1 : 1), sizeof *taken); /* per node */
    if (!taken)
        return rp_error_set(err, RP_ERR_NOMEM, "NUMA binding: out of memory");
    for (int i = 0; i < n; i++) {
        const rp_numa_range *r = &ranges[i];
        /* the whole pages inside the range */
        size_t lo = (r->offset + 4095) & ~(size_t)4095, hi = (r->offset + r->bytes) & ~(size_t)4095;
        if (hi <= lo)
            continue;
        size_t bytes = hi - lo;
        out->asked += bytes;
        hwloc_obj_t node = r->node >= 0 && r->node <= last
                               ? hwloc_get_numanode_obj_by_os_index(topo, (unsigned)r->node) : NULL;
        if (!can || !node) {
            out->absent += bytes; /* a node this machine lacks, or no binding here */
            continue;
        }
        /* not more than half a node's memory for its readers' buffers: the
         * rest of the store, and whatever else runs, keep their share */
        uint64_t cap = node_memory(topo, r->node) / 2;
        if (cap > 0 && taken[r->node] + bytes > cap) {
            out->over_half += bytes;
            continue;
        }
        if (hwloc_set_area_membind(topo, base + lo, bytes, node->nodeset, HWLOC_MEMBIND_BIND,
                                   HWLOC_MEMBIND_BYNODESET) == 0) {
            out->bound += bytes;
            taken[r->node] += bytes;
        } else {
            out->refused += bytes; /* mbind refused (seccomp in containers): interleaved */
        }
    }
    free(taken);
    return RP_OK;
}
