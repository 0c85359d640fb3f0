#include "config.h"
#include "store/bind.h"

#include <stdlib.h>
#include <string.h>

rp_status rp_bind_locality(hwloc_topology_t topo, const char *busid, hwloc_bitmap_t out,
                           int *found, rp_error *err)
{
    *found = 0;
    hwloc_bitmap_copy(out, hwloc_topology_get_topology_cpuset(topo));
    if (!busid || !*busid)
        return RP_OK;
    if (strlen(busid) >= RP_BUSID_MAX)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "PCI bus id '%.40s...' is too long", busid);
    hwloc_obj_t dev = hwloc_get_pcidev_by_busidstring(topo, busid);
    if (!dev)
        return RP_OK;
    hwloc_obj_t near = hwloc_get_non_io_ancestor_obj(topo, dev);
    if (near && near->cpuset && !hwloc_bitmap_iszero(near->cpuset)) {
        hwloc_bitmap_copy(out, near->cpuset);
        *found = 1;
    }
    return RP_OK;
}

/* A group of ranks with the same locality; they split its free cores. */
typedef struct group {
    hwloc_const_bitmap_t where;
    int first;  /* lowest rank, for a deterministic order */
    int weight; /* cores in `where`: smaller (more specific) localities go first */
} group;

static int group_cmp(const void *a, const void *b)
{
    const group *x = a, *y = b;
    if (x->weight != y->weight)
        return x->weight < y->weight ? -1 : 1;
    return (x->first > y->first) - (x->first < y->first);
}

rp_status rp_bind_plan(hwloc_topology_t topo, int n_ranks, const hwloc_const_bitmap_t *locality,
                       int rank, hwloc_bitmap_t out, int *n_cores, rp_error *err)
{
    if (n_ranks < 1 || rank < 0 || rank >= n_ranks)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "core binding: rank %d of %d", rank, n_ranks);
    hwloc_bitmap_zero(out);
    *n_cores = 0;
    int C = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    if (C <= 0)
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "core binding: topology reports no cores");
    if (C < n_ranks) {
        hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)(rank % C));
        hwloc_bitmap_copy(out, core->cpuset);
        *n_cores = 1;
        return RP_OK;
    }
    hwloc_const_bitmap_t all = hwloc_topology_get_topology_cpuset(topo);
    int *owner = malloc((size_t)C * sizeof *owner);  /* rank owning core i, or -1 */
    int *quota = malloc((size_t)n_ranks * sizeof *quota), *have = calloc((size_t)n_ranks, sizeof *have);
    group *groups = malloc((size_t)n_ranks * sizeof *groups);
    int *members = malloc((size_t)n_ranks * sizeof *members);
    rp_status st = RP_OK;
    if (!owner || !quota || !have || !groups || !members) {
        st = rp_error_set(err, RP_ERR_NOMEM, "core binding: out of memory");
        goto done;
    }
    for (int i = 0; i < C; i++)
        owner[i] = -1;
    for (int r = 0; r < n_ranks; r++)
        quota[r] = C / n_ranks + (r < C % n_ranks);

    /* Group ranks by identical locality. */
    int n_groups = 0;
    for (int r = 0; r < n_ranks; r++) {
        hwloc_const_bitmap_t w = (locality && locality[r]) ? locality[r] : all;
        int g = 0;
        while (g < n_groups && !hwloc_bitmap_isequal(groups[g].where, w))
            g++;
        if (g == n_groups) {
            int weight = 0;
            for (int i = 0; i < C; i++)
                weight += hwloc_bitmap_isincluded(hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)i)->cpuset, w);
            groups[n_groups++] = (group){w, r, weight};
        }
    }
    qsort(groups, (size_t)n_groups, sizeof *groups, group_cmp);

    /* Pass 1: each group's free local cores, in topology order, split into
     * contiguous blocks, evenly among its members up to their quotas. */
    for (int g = 0; g < n_groups; g++) {
        int nm = 0, want = 0, free_local = 0;
        for (int r = 0; r < n_ranks; r++) {
            hwloc_const_bitmap_t w = (locality && locality[r]) ? locality[r] : all;
            if (hwloc_bitmap_isequal(w, groups[g].where)) {
                members[nm++] = r;
                want += quota[r];
            }
        }
        for (int i = 0; i < C; i++)
            free_local += owner[i] < 0 &&
                hwloc_bitmap_isincluded(hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)i)->cpuset,
                                        groups[g].where);
        /* Even split (round robin, capped by quota): ranks sharing a GPU
         * get the same number of cores near it. */
        int avail = free_local < want ? free_local : want, given = 0;
        int take[n_ranks > 0 ? n_ranks : 1];
        for (int k = 0; k < nm; k++)
            take[k] = 0;
        for (int k = 0; given < avail; k = (k + 1) % nm)
            if (take[k] < quota[members[k]]) {
                take[k]++;
                given++;
            }
        int k = 0;
        for (int i = 0; i < C && k < nm; i++) {
            if (owner[i] >= 0 ||
                !hwloc_bitmap_isincluded(hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)i)->cpuset,
                                         groups[g].where))
                continue;
            while (k < nm && have[members[k]] >= take[k])
                k++;
            if (k == nm)
                break;
            owner[i] = members[k];
            have[members[k]]++;
        }
    }
    /* Pass 2: ranks short of their quota take the remaining cores in order. */
    int r = 0;
    for (int i = 0; i < C; i++) {
        if (owner[i] >= 0)
            continue;
        while (r < n_ranks && have[r] >= quota[r])
            r++;
        if (r == n_ranks)
            break;
        owner[i] = r;
        have[r]++;
    }
    for (int i = 0; i < C; i++)
        if (owner[i] == rank)
            hwloc_bitmap_or(out, out, hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)i)->cpuset);
    *n_cores = have[rank];
done:
    free(owner);
    free(quota);
    free(have);
    free(groups);
    free(members);
    return st;
}

rp_status rp_bind_node(MPI_Comm node, hwloc_topology_t topo, const char *busid, int apply,
                       hwloc_bitmap_t out, int *n_cores, int *bound, rp_error *err)
{
    *bound = 0;
    int rank, size;
    if (MPI_Comm_rank(node, &rank) != MPI_SUCCESS || MPI_Comm_size(node, &size) != MPI_SUCCESS)
        return rp_error_set(err, RP_ERR_MPI, "core binding: bad node communicator");
    char mine[RP_BUSID_MAX] = {0};
    if (busid) {
        if (strlen(busid) >= RP_BUSID_MAX)
            return rp_error_set(err, RP_ERR_INVALID_ARG, "core binding: PCI bus id '%.40s...' is too long", busid);
        strcpy(mine, busid);
    }
    char *ids = calloc((size_t)size, RP_BUSID_MAX);
    hwloc_bitmap_t *loc = calloc((size_t)size, sizeof *loc);
    rp_status st = RP_OK;
    if (!ids || !loc) {
        st = rp_error_set(err, RP_ERR_NOMEM, "core binding: out of memory");
        goto done;
    }
    if (MPI_Allgather(mine, RP_BUSID_MAX, MPI_CHAR, ids, RP_BUSID_MAX, MPI_CHAR, node) != MPI_SUCCESS) {
        st = rp_error_set(err, RP_ERR_MPI, "core binding: MPI_Allgather of PCI bus ids failed");
        goto done;
    }
    for (int r = 0; r < size && st == RP_OK; r++) {
        int found;
        loc[r] = hwloc_bitmap_alloc();
        if (!loc[r])
            st = rp_error_set(err, RP_ERR_NOMEM, "core binding: out of memory");
        else
            st = rp_bind_locality(topo, ids + (size_t)r * RP_BUSID_MAX, loc[r], &found, err);
    }
    if (st == RP_OK)
        st = rp_bind_plan(topo, size, (const hwloc_const_bitmap_t *)loc, rank, out, n_cores, err);
    if (st == RP_OK && apply && hwloc_topology_is_thissystem(topo) &&
        hwloc_set_cpubind(topo, out, HWLOC_CPUBIND_PROCESS) == 0)
        *bound = 1;
done:
    if (loc)
        for (int r = 0; r < size; r++)
            if (loc[r])
                hwloc_bitmap_free(loc[r]);
    free(loc);
    free(ids);
    return st;
}
