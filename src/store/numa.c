#include "config.h"
#include "store/numa.h"

#include <stdint.h>

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
