/* The PCIe topology of a node's GPUs, from hwloc (this machine's, or an
 * hwloc XML file so any server can be planned for from a laptop), as link
 * groups: the GPUs whose host-device traffic shares one link.
 *
 * The rule: GPUs below one PCIe root port share that port's link to the
 * host (on the servers roundpipe is for, a PCIe switch on the port fans one
 * x16 uplink out to 2 or 4 GPUs); a group's uplink speed is the link above
 * the port's child on the GPUs' path (the switch's upstream port), or the
 * GPU's own link when it sits straight on the port. A GPU without a root
 * port above it (a partial topology: a missing bridge) or without a bus id
 * gets a group of its own, and a warning says so: "every GPU on its own
 * link" is the fallback that never claims sharing it cannot see.
 * GPUs are listed in bus-id order (CUDA's order with
 * CUDA_DEVICE_ORDER=PCI_BUS_ID); speeds are hwloc's, GB/s in one
 * direction, 0 when unknown. */
#ifndef RP_STORE_TOPOLOGY_H
#define RP_STORE_TOPOLOGY_H

#include <stddef.h>

#include "core/error.h"

#define RP_TOPOLOGY_MAX_GPUS 256

typedef struct rp_topology_gpu {
    char busid[16];  /* "0000:03:00.0" */
    int numa;        /* os index of its NUMA node, -1 unknown */
    int group;       /* its link group */
    double link_gbs; /* its own link */
} rp_topology_gpu;

typedef struct rp_topology_group {
    char port[16];     /* the root port's bus id ("" for a GPU without one) */
    double uplink_gbs; /* the link the group's GPUs share */
    int ngpus;
} rp_topology_group;

typedef struct rp_topology {
    int ngpus, ngroups;
    rp_topology_gpu gpu[RP_TOPOLOGY_MAX_GPUS];
    rp_topology_group group[RP_TOPOLOGY_MAX_GPUS];
    char source[256];    /* "this machine" or the XML file */
    char warnings[1024]; /* what the fallback covered, "" when nothing */
} rp_topology;

/* Read the topology: xml_path NULL for this machine. Errors name the file
 * (not XML, not loadable by hwloc). A topology without GPUs is not an
 * error (ngpus 0). */
rp_status rp_topology_read(const char *xml_path, rp_topology *out, rp_error *err);

/* Group k's shared link over its GPUs' own (the fastest of them): 2 for an
 * x16 switch uplink over x8 GPUs; 1 when hwloc knows either speed not. */
double rp_topology_uplink_ratio(const rp_topology *t, int k);

/* The GPU whose bus id is busid ("0000:03:00.0", or without the domain, any
 * case), -1 when none. */
int rp_topology_find(const rp_topology *t, const char *busid);

/* The groups for a person to read, one line per group after a summary
 * line; link_gbs > 0 overrides every speed (--link-gbs). */
void rp_topology_format(const rp_topology *t, double link_gbs, char *buf, size_t len);

#endif
