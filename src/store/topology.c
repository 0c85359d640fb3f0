/* The PCIe topology of a node's GPUs (see topology.h). */
#include "store/topology.h"

#include <errno.h>
#include <hwloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* 3D controllers and VGA-compatible displays: what GPUs present as. */
static int is_gpu(hwloc_obj_t o)
{
    unsigned cls = o->attr->pcidev.class_id;
    return cls == 0x0302 || cls == 0x0300;
}

static int is_pci_bridge(hwloc_obj_t o)
{
    return o && o->type == HWLOC_OBJ_BRIDGE && o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI;
}

static void busid_of(const struct hwloc_pcidev_attr_s *a, char *out, size_t len)
{
    snprintf(out, len, "%04x:%02x:%02x.%01x", (unsigned)a->domain, a->bus, a->dev, a->func);
}

static void warn(rp_topology *t, const char *fmt, ...)
{
    size_t used = strlen(t->warnings);
    if (used + 2 >= sizeof t->warnings)
        return;
    if (used)
        t->warnings[used++] = ' ';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->warnings + used, sizeof t->warnings - used, fmt, ap);
    va_end(ap);
}

/* The GPU's root port (the PCI bridge right under a host bridge on its
 * path) and the port's child on that path; NULL when there is none. */
static hwloc_obj_t root_port(hwloc_obj_t gpu, hwloc_obj_t *child)
{
    hwloc_obj_t below = gpu;
    for (hwloc_obj_t p = gpu->parent; p; below = p, p = p->parent)
        if (is_pci_bridge(p) && !is_pci_bridge(p->parent)) {
            *child = below;
            return p->parent && p->parent->type == HWLOC_OBJ_BRIDGE ? p : NULL;
        }
    return NULL;
}

static int numa_of(hwloc_topology_t topo, hwloc_obj_t gpu)
{
    hwloc_obj_t a = hwloc_get_non_io_ancestor_obj(topo, gpu);
    return a && a->nodeset ? hwloc_bitmap_first(a->nodeset) : -1;
}

/* Group the GPUs, each GPU's root port in ports[] (NULL: none). */
static void group(rp_topology *t, hwloc_obj_t *ports, const double *uplink)
{
    for (int i = 0; i < t->ngpus; i++) {
        int g = -1;
        for (int j = 0; j < i && ports[i]; j++)
            if (ports[j] == ports[i])
                g = t->gpu[j].group;
        if (g < 0) {
            g = t->ngroups++;
            rp_topology_group *G = &t->group[g];
            memset(G, 0, sizeof *G);
            if (ports[i])
                busid_of(&ports[i]->attr->bridge.upstream.pci, G->port, sizeof G->port);
            G->uplink_gbs = uplink[i];
        }
        t->gpu[i].group = g;
        t->group[g].ngpus++;
    }
}

rp_status rp_topology_read(const char *xml_path, rp_topology *t, rp_error *err)
{
    memset(t, 0, sizeof *t);
    snprintf(t->source, sizeof t->source, "%s", xml_path ? xml_path : "this machine");
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0)
        return rp_error_set(err, RP_ERR_INTERNAL, "hwloc: cannot initialise a topology");
    rp_status s = RP_OK;
    if (xml_path && hwloc_topology_set_xml(topo, xml_path) != 0)
        s = rp_error_set(err, RP_ERR_FORMAT, "--topology %s: hwloc cannot read it as XML (%s)",
                         xml_path, strerror(errno));
    if (s == RP_OK) {
        hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_ALL);
        if (hwloc_topology_load(topo) != 0)
            s = rp_error_set(err, RP_ERR_FORMAT, "%s%s: hwloc cannot load the topology (%s)",
                             xml_path ? "--topology " : "", t->source, strerror(errno));
    }
    hwloc_obj_t ports[RP_TOPOLOGY_MAX_GPUS];
    double uplink[RP_TOPOLOGY_MAX_GPUS];
    for (hwloc_obj_t o = NULL; s == RP_OK && (o = hwloc_get_next_pcidev(topo, o));) {
        if (!is_gpu(o))
            continue;
        if (t->ngpus == RP_TOPOLOGY_MAX_GPUS) {
            warn(t, "more than %d GPUs: the rest are left out.", RP_TOPOLOGY_MAX_GPUS);
            break;
        }
        int i = t->ngpus++;
        rp_topology_gpu *g = &t->gpu[i];
        busid_of(&o->attr->pcidev, g->busid, sizeof g->busid);
        int no_busid = o->attr->pcidev.bus == 0 && o->attr->pcidev.dev == 0;
        if (no_busid) /* hwloc's value for a device without one: never a GPU's */
            snprintf(g->busid, sizeof g->busid, "no bus id");
        g->numa = numa_of(topo, o);
        g->link_gbs = o->attr->pcidev.linkspeed;
        hwloc_obj_t child = NULL;
        ports[i] = root_port(o, &child);
        uplink[i] = g->link_gbs;
        if (no_busid) {
            warn(t, "GPU %d has no PCI bus id: it gets a link of its own.", i);
            ports[i] = NULL;
        } else if (!ports[i]) {
            warn(t, "GPU %d (%s) has no PCIe root port above it (a missing bridge): it gets a "
                 "link of its own.", i, g->busid);
        } else if (is_pci_bridge(child)) { /* a switch: its upstream link is shared */
            uplink[i] = child->attr->bridge.upstream.pci.linkspeed;
        }
    }
    if (s == RP_OK)
        group(t, ports, uplink);
    hwloc_topology_destroy(topo);
    return s;
}

double rp_topology_uplink_ratio(const rp_topology *t, int k)
{
    double own = 0;
    for (int g = 0; g < t->ngpus; g++)
        if (t->gpu[g].group == k && t->gpu[g].link_gbs > own)
            own = t->gpu[g].link_gbs;
    return own > 0 && t->group[k].uplink_gbs > 0 ? t->group[k].uplink_gbs / own : 1.0;
}

/* "dddd:bb:dd.f" (any domain width, as CUDA and nvidia-smi write it) or
 * "bb:dd.f" (domain -1: any); 0 when it is neither. */
static int parse_busid(const char *s, long *domain, unsigned *bus, unsigned *dev, unsigned *fn)
{
    char tail;
    if (sscanf(s, "%lx:%x:%x.%x%c", domain, bus, dev, fn, &tail) == 4)
        return 1;
    *domain = -1;
    return sscanf(s, "%x:%x.%x%c", bus, dev, fn, &tail) == 3;
}

int rp_topology_find(const rp_topology *t, const char *busid)
{
    long d;
    unsigned b, v, f;
    if (!parse_busid(busid, &d, &b, &v, &f))
        return -1;
    for (int g = 0; g < t->ngpus; g++) {
        long gd;
        unsigned gb, gv, gf;
        if (parse_busid(t->gpu[g].busid, &gd, &gb, &gv, &gf) && gb == b && gv == v &&
            gf == f && (d < 0 || gd < 0 || gd == d))
            return g;
    }
    return -1;
}

void rp_topology_format(const rp_topology *t, double link_gbs, char *buf, size_t len)
{
    size_t at = 0;
#define PUT(...)                                                                                  \
    do {                                                                                          \
        if (at < len)                                                                             \
            at += (size_t)snprintf(buf + at, len - at, __VA_ARGS__);                              \
    } while (0)
    buf[0] = '\0';
    PUT("%s: %d GPU(s) in %d link group(s) (GPUs below one PCIe root port share its link)%s\n", t->source, t->ngpus, t->ngroups,
        link_gbs > 0 ? " (speeds from --link-gbs)" : "");
    for (int k = 0; k < t->ngroups; k++) {
        const rp_topology_group *G = &t->group[k];
        double up = link_gbs > 0 ? link_gbs : G->uplink_gbs;
        char speed[32] = "of unknown speed";
        if (up > 0)
            snprintf(speed, sizeof speed, "of %.1f GB/s", up);
        if (G->ngpus == 1)
            PUT("group %d: 1 GPU on a link of its own %s", k, speed);
        else
            PUT("group %d: %d GPUs share a link %s", k, G->ngpus, speed);
        PUT(G->port[0] ? " below root port %s:" : " (no root port known):", G->port);
        for (int i = 0; i < t->ngpus; i++)
            if (t->gpu[i].group == k) {
                PUT(" GPU %d (%s", i, t->gpu[i].busid);
                if (t->gpu[i].numa >= 0)
                    PUT(", NUMA node %d", t->gpu[i].numa);
                if (t->gpu[i].link_gbs > 0 && link_gbs <= 0)
                    PUT(", own link %.1f GB/s", t->gpu[i].link_gbs);
                PUT(")");
            }
        PUT("\n");
    }
    if (t->warnings[0])
        PUT("warning: %s\n", t->warnings);
#undef PUT
}
