/* Which ranks of a node share a PCIe link (see run_impl.h): from
 * --link-groups, or on GPUs from the hwloc topology of this machine (the
 * group of the rank's GPU, store/topology.h), or none. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/backend.h"
#include "engine/run_impl.h"
#include "store/topology.h"

/* Node rank r's group from --link-groups: the r-th comma-separated entry. */
static rp_status group_from_list(const char *list, int nranks, int r, int *group, rp_error *err)
{
    int n = 0;
    const char *p = list;
    for (;;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 1 << 20 || (*end != ',' && *end != '\0'))
            return rp_error_set(err, RP_ERR_INVALID_ARG, "--link-groups %s: entry %d is not a "
                                "group number (>= 0)", list, n + 1);
        if (n == r)
            *group = (int)v;
        n++;
        if (*end == '\0')
            break;
        p = end + 1;
    }
    if (n != nranks)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "--link-groups %s: %d entries, but the node "
                            "has %d ranks (one group per rank)", list, n, nranks);
    return RP_OK;
}

/* This rank's GPU's group in the topology of this machine (-1: unknown). */
static int group_from_topology(rp_engine *e)
{
    char busid[32];
    if (rp_device_busid(e->device, e->device_ordinal, busid, sizeof busid, NULL) != RP_OK)
        return -1;
    rp_topology *t = malloc(sizeof *t);
    int g = -1;
    rp_error err;
    if (t && rp_topology_read(NULL, t, &err) == RP_OK)
        for (int i = 0; i < t->ngpus; i++)
            if (strcasecmp(t->gpu[i].busid, busid) == 0 ||
                strcasecmp(t->gpu[i].busid + 5, busid) == 0) /* without the domain */
                g = t->gpu[i].group;
    free(t);
    return g;
}

rp_status rp_run_link_groups(rp_engine *e, MPI_Comm node, rp_error *err)
{
    int nr, r;
    MPI_Comm_size(node, &nr);
    MPI_Comm_rank(node, &r);
    int mine = -1;
    rp_status s = RP_OK;
    const char *list = e->o->link_groups;
    if (list && strcmp(list, "none") != 0)
        s = group_from_list(list, nr, r, &mine, err);
    else if (!list && e->device == RP_DEVICE_CUDA)
        mine = group_from_topology(e);
    int *all = calloc((size_t)nr, sizeof *all);
    if (!all)
        return rp_error_set(err, RP_ERR_NOMEM, "link groups");
    MPI_Allgather(&mine, 1, MPI_INT, all, 1, MPI_INT, node);
    /* numbered densely in rank order (a board per group: at most nr), the
     * same on every rank */
    int *dense = calloc((size_t)nr, sizeof *dense), next = 0;
    if (!dense) {
        free(all);
        return rp_error_set(err, RP_ERR_NOMEM, "link groups");
    }
    for (int i = 0; i < nr; i++) {
        dense[i] = -1;
        for (int j = 0; j < i && all[i] >= 0 && dense[i] < 0; j++)
            if (all[j] == all[i])
                dense[i] = dense[j];
        if (all[i] >= 0 && dense[i] < 0)
            dense[i] = next++;
    }
    free(all);
    e->link_group = dense[r];
    e->link_member = e->link_members = 0;
    for (int i = 0; i < nr && dense[r] >= 0; i++)
        if (dense[i] == dense[r]) {
            if (i < r)
                e->link_member++;
            e->link_members++;
        }
    if (s == RP_OK && e->link_members > RP_XFER_LINK_MAX)
        s = rp_error_set(err, RP_ERR_INVALID_ARG, "link group %d has %d ranks (at most %d)", mine,
                         e->link_members, RP_XFER_LINK_MAX);
    free(e->link_group_of);
    e->link_group_of = dense;
    return s;
}
