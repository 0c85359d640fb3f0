/* `roundpipe topology`: the link groups of this machine's GPUs, or of an
 * hwloc XML file, for a person to read (store/topology.h has the rule). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/commands.h"
#include "core/args.h"
#include "store/topology.h"

static const char topo_usage[] =
    "usage: roundpipe topology [--topology FILE.xml] [--link-gbs X]\n"
    "Prints which GPUs share a PCIe link to the host (the GPUs below one root port,\n"
    "behind its switch), with each link's speed and each GPU's NUMA node.\n"
    "  --topology FILE.xml   an hwloc XML file (lstopo FILE.xml) instead of this machine\n"
    "  --link-gbs X          every link's speed in GB/s, overriding hwloc's\n";

int rp_cli_topology(int argc, char **argv)
{
    static const struct option opts[] = {{"topology", required_argument, 0, 't'},
                                         {"link-gbs", required_argument, 0, 'l'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *xml = NULL;
    double link = 0;
    rp_error err = {0};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 't') {
            xml = optarg;
        } else if (c == 'l') {
            if (rp_arg_double("--link-gbs", optarg, &link, &err) != RP_OK || !(link > 0)) {
                if (err.code == RP_OK)
                    rp_error_set(&err, RP_ERR_INVALID_ARG, "--link-gbs must be > 0");
                fprintf(stderr, "roundpipe topology: %s\n", err.msg);
                return 2;
            }
        } else if (c == 'h') {
            fputs(topo_usage, stdout);
            return 0;
        } else {
            fputs(topo_usage, stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "roundpipe topology: unexpected argument '%s'\n%s", argv[optind],
                topo_usage);
        return 2;
    }
    rp_topology *t = malloc(sizeof *t);
    if (!t) {
        fputs("roundpipe topology: out of memory\n", stderr);
        return 1;
    }
    if (rp_topology_read(xml, t, &err) != RP_OK) {
        fprintf(stderr, "roundpipe topology: %s\n", err.msg);
        free(t);
        return 1;
    }
    char *text = malloc(1 << 16);
    if (text) {
        rp_topology_format(t, link, text, 1 << 16);
        fputs(text, stdout);
    }
    free(text);
    free(t);
    return text ? 0 : 1;
}
