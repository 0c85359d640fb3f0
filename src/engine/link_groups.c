/* Which ranks of a node share a PCIe link (see run_impl.h). The node
 * leader decides, once, and broadcasts the result, so every rank holds the
 * same model and hwloc's I/O topology is read on one rank only:
 *   --link-groups LIST   the groups as given (a test, or a machine hwloc
 *                        does not see);
 *   --topology FILE.xml  the groups of that hwloc topology: GPU ranks by
 *                        their GPU's bus id, CPU executors as the file's
 *                        GPU (node rank mod its GPUs), which rehearses a
 *                        server's groups and deal on any machine;
 *   on GPUs, otherwise   the groups of this machine's topology;
 *   else                 none.
 * A rank whose GPU the topology does not hold gets a link of its own and a
 * warning: never a sharing that cannot be seen. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/backend.h"
#include "engine/run_impl.h"
#include "store/topology.h"

#define BUSID_LEN 32

/* The groups from --link-groups: one comma-separated entry per node rank. */
static rp_status groups_from_list(const char *list, int nranks, rp_rank_link *of, rp_error *err)
{
    int n = 0;
    const char *p = list;
    for (;;) {
        char *end;
        long v = strtol(p, &end, 10); /* digits only: no sign, no blanks */
        if (!isdigit((unsigned char)*p) || v > 1 << 20 || (*end != ',' && *end != '\0'))
            return rp_error_set(err, RP_ERR_INVALID_ARG, "--link-groups %s: entry %d is not a "
                                "group number (>= 0)", list, n + 1);
        if (n < nranks)
            of[n].group = (int)v;
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

/* The groups, NUMA nodes and uplinks of a topology: rank r's GPU is the
 * one with its bus id, or (a CPU executor, busids[r] empty) GPU r mod the
 * topology's count. *warned gets the topology's warnings and the ranks it
 * could not place. */
static rp_status groups_from_topology(const char *xml, const char *busids, int nranks,
                                      rp_rank_link *of, char *source, size_t source_len,
                                      char *warned, size_t warned_len, rp_error *err)
{
    rp_topology *t = malloc(sizeof *t);
    if (!t)
        return rp_error_set(err, RP_ERR_NOMEM, "the PCIe topology: out of memory");
    rp_status s = rp_topology_read(xml, t, err);
    if (s == RP_OK && xml && t->ngpus == 0)
        s = rp_error_set(err, RP_ERR_INVALID_ARG, "--topology %s: no GPU in it", xml);
    size_t at = (size_t)snprintf(warned, warned_len, "%.900s", t->warnings);
    for (int r = 0; r < nranks && s == RP_OK; r++) {
        const char *bus = busids + (size_t)r * BUSID_LEN;
        int g = bus[0] ? rp_topology_find(t, bus) : t->ngpus > 0 ? r % t->ngpus : -1;
        if (g < 0) {
            if (at < warned_len)
                at += (size_t)snprintf(warned + at, warned_len - at, "%sRank %d's GPU (%s) is not "
                                       "in it: it gets a link of its own.", at ? " " : "", r,
                                       strcmp(bus, "?") ? bus : "no bus id");
            continue;
        }
        of[r].group = t->gpu[g].group;
        of[r].numa = t->gpu[g].numa;
        of[r].uplink = rp_topology_uplink_ratio(t, t->gpu[g].group);
    }
    snprintf(source, source_len, "%s%s", xml ? "--topology " : "", t->source);
    free(t);
    return s;
}

/* Groups renumbered densely 0.. in rank order (a board per group: at most
 * one per rank); -1 stays none. */
static void number_densely(rp_rank_link *of, int nranks)
{
    int *label = malloc(sizeof(int) * (size_t)nranks), next = 0;
    if (!label)
        return; /* the caller checked nranks >= 1; labels stay as given */
    for (int i = 0; i < nranks; i++) {
        label[i] = of[i].group;
        of[i].group = -1;
        for (int j = 0; j < i && label[i] >= 0 && of[i].group < 0; j++)
            if (label[j] == label[i])
                of[i].group = of[j].group;
        if (label[i] >= 0 && of[i].group < 0)
            of[i].group = next++;
    }
    free(label);
}

/* "0 0 1 1; shared links 1 1 x a GPU's own" ("-" for a rank in none) */
static void format_groups(const rp_rank_link *of, int nranks, char *buf, size_t len)
{
    size_t at = 0;
    int groups = 0;
    buf[0] = '\0';
    for (int r = 0; r < nranks && at < len; r++) {
        at += of[r].group >= 0 ? (size_t)snprintf(buf + at, len - at, "%s%d", r ? " " : "",
                                                  of[r].group)
                               : (size_t)snprintf(buf + at, len - at, "%s-", r ? " " : "");
        groups = of[r].group + 1 > groups ? of[r].group + 1 : groups;
    }
    if (at < len && groups > 0)
        at += (size_t)snprintf(buf + at, len - at, "; shared links");
    for (int k = 0; k < groups && at < len; k++)
        for (int r = 0; r < nranks; r++)
            if (of[r].group == k) {
                at += (size_t)snprintf(buf + at, len - at, " %.3g", of[r].uplink);
                break;
            }
    if (at < len && groups > 0)
        snprintf(buf + at, len - at, " x a GPU's own");
}

rp_status rp_run_link_groups(rp_engine *e, MPI_Comm node, rp_error *err)
{
    int nr, r;
    MPI_Comm_size(node, &nr);
    MPI_Comm_rank(node, &r);
    const rp_train_options *o = e->o;
    const char *list = o->link_groups && strcmp(o->link_groups, "none") ? o->link_groups : NULL;
    int from_topology = !o->link_groups && (o->topology || e->device == RP_DEVICE_CUDA);
    /* every rank's GPU bus id, to the leader */
    char mine[BUSID_LEN] = "";
    if (from_topology && e->device == RP_DEVICE_CUDA &&
        rp_device_busid(e->device, e->device_ordinal, mine, sizeof mine, NULL) != RP_OK)
        snprintf(mine, sizeof mine, "?"); /* a GPU, but which one is not known */
    char *busids = r == 0 ? calloc((size_t)nr, BUSID_LEN) : NULL;
    rp_rank_link *of = malloc(sizeof *of * (size_t)nr);
    rp_status s = (r != 0 || busids) && of ? RP_OK : rp_error_set(err, RP_ERR_NOMEM, "link groups");
    MPI_Gather(mine, BUSID_LEN, MPI_CHAR, busids, BUSID_LEN, MPI_CHAR, 0, node);
    char source[300] = "", warned[1024] = "";
    if (s == RP_OK && r == 0) {
        for (int i = 0; i < nr; i++)
            of[i] = (rp_rank_link){-1, -1, 1.0};
        if (list) { /* not with --topology (rp_train_options_check) */
            s = groups_from_list(list, nr, of, err);
            snprintf(source, sizeof source, "--link-groups");
        } else if (from_topology) {
            s = groups_from_topology(o->topology, busids, nr, of, source, sizeof source, warned,
                                     sizeof warned, err);
            if (s != RP_OK && !o->topology) { /* this machine's topology is a hint only */
                snprintf(warned, sizeof warned, "%s", err->msg);
                s = RP_OK;
            }
        }
        number_densely(of, nr);
    }
    free(busids);
    /* the leader's model is everyone's (its status first: a failed leader
     * broadcasts nothing else) */
    int ok = s == RP_OK;
    MPI_Bcast(&ok, 1, MPI_INT, 0, node);
    if (!ok) {
        free(of);
        return s != RP_OK ? s : rp_error_set(err, RP_ERR_INVALID_ARG, "PCIe link groups: "
                                             "refused by the node leader (its message says why)");
    }
    MPI_Bcast(of, (int)(sizeof *of * (size_t)nr), MPI_BYTE, 0, node);
    e->link_group = of[r].group;
    e->link_member = e->link_members = 0;
    for (int i = 0; i < nr && of[r].group >= 0; i++)
        if (of[i].group == of[r].group) {
            if (i < r)
                e->link_member++;
            e->link_members++;
        }
    free(e->link_of);
    e->link_of = of;
    if (r == 0 && (source[0] || warned[0])) {
        char groups[1024];
        format_groups(of, nr, groups, sizeof groups);
        rp_log(e->lg, RP_LOG_INFO, "PCIe link groups (%s): node rank -> group %s", source,
               groups);
        if (warned[0])
            rp_log(e->lg, RP_LOG_WARN, "PCIe topology (%s): %s", source[0] ? source
                                                                   : "this machine", warned);
    }
    if (e->link_members > RP_XFER_LINK_MAX)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "link group %d has %d ranks (at most %d)",
                            of[r].group, e->link_members, RP_XFER_LINK_MAX);
    return RP_OK;
}
