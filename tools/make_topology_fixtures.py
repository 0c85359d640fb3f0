#!/usr/bin/env python3
"""Write the hwloc XML topologies of mpi-tests/fixtures/topology/: GPU
servers as hwloc 2 describes them (packages with cores and a NUMA node each,
a host bridge per package, PCIe root ports, switches made of an upstream and
downstream ports, GPUs as 3D controllers), for roundpipe's topology tests
and `roundpipe plan/simulate --topology`. Link speeds are hwloc's GB/s of
one direction (PCIe 4.0 x16: 31.5; 3.0 x16: 15.75).

  8gpu-4switch.xml   2 sockets x 2 root ports x a switch of 2 GPUs (the
                     consumer 8-GPU server: four 2-GPU switches)
  8gpu-2switch.xml   2 sockets x 1 root port x a switch of 4 GPUs
  4gpu-1switch.xml   1 socket, one switch of 4 GPUs
  4gpu-rootports.xml 1 socket, 4 GPUs each straight on a root port
  partial-nobridge.xml  2 GPUs on a switch, and 2 GPUs hanging off the host
                     bridge with no root port (a missing bridge)
  partial-nobusid.xml   a 3D controller without a pci_busid
  noGPU.xml          a machine without GPUs
  notxml.xml         not XML at all

Run: python3 tools/make_topology_fixtures.py [OUT_DIR]"""
import os
import sys

GEN4 = 31.507692


class Writer:
    def __init__(self):
        self.lines, self.gp = [], 100

    def gpi(self):
        self.gp += 1
        return self.gp

    def add(self, depth, text):
        self.lines.append("  " * depth + text)


def cpusets(sockets, cores):
    full = (1 << (sockets * cores)) - 1
    return full, [((1 << cores) - 1) << (s * cores) for s in range(sockets)]


def machine(sockets, cores, io_of_socket):
    """io_of_socket(w, depth, socket, bus) writes the socket's I/O tree and
    returns the next free bus number."""
    w = Writer()
    full, per = cpusets(sockets, cores)
    nodes = (1 << sockets) - 1
    w.add(0, '<?xml version="1.0" encoding="UTF-8"?>')
    w.add(0, '<!DOCTYPE topology SYSTEM "hwloc2.dtd">')
    w.add(0, '<topology version="2.0">')
    w.add(1, '<object type="Machine" os_index="0" cpuset="0x%08x" complete_cpuset="0x%08x" '
             'allowed_cpuset="0x%08x" nodeset="0x%08x" complete_nodeset="0x%08x" '
             'allowed_nodeset="0x%08x" gp_index="1">' % (full, full, full, nodes, nodes, nodes))
    bus = 0
    for s in range(sockets):
        cs, ns = per[s], 1 << s
        sets = 'cpuset="0x%08x" complete_cpuset="0x%08x" nodeset="0x%08x" complete_nodeset="0x%08x"' % (
            cs, cs, ns, ns)
        w.add(2, '<object type="Package" os_index="%d" %s gp_index="%d">' % (s, sets, w.gpi()))
        w.add(3, '<object type="NUMANode" os_index="%d" %s gp_index="%d" local_memory="%d"/>'
              % (s, sets, w.gpi(), 64 << 30))
        for c in range(cores):
            i = s * cores + c
            one = 'cpuset="0x%08x" complete_cpuset="0x%08x" nodeset="0x%08x" complete_nodeset="0x%08x"' % (
                1 << i, 1 << i, ns, ns)
            w.add(3, '<object type="Core" os_index="%d" %s gp_index="%d">' % (i, one, w.gpi()))
            w.add(4, '<object type="PU" os_index="%d" %s gp_index="%d"/>' % (i, one, w.gpi()))
            w.add(3, '</object>')
        bus = io_of_socket(w, 3, s, bus)
        w.add(2, '</object>')
    w.add(1, '</object>')
    w.add(0, '</topology>')
    return "\n".join(w.lines) + "\n"


def bridge(w, depth, level, busid, lo, hi, speed, vendor="1000:c010"):
    w.add(depth, '<object type="Bridge" gp_index="%d" bridge_type="1-1" depth="%d" '
                 'bridge_pci="0000:[%02x-%02x]" pci_busid="%s" pci_type="0604 [%s] '
                 '[0000:0000] b0" pci_link_speed="%f">' % (w.gpi(), level, lo, hi, busid, vendor,
                                                           speed))


def gpu(w, depth, busid, speed=GEN4, with_busid=True):
    bid = ' pci_busid="%s"' % busid if with_busid else ""
    w.add(depth, '<object type="PCIDev" gp_index="%d"%s pci_type="0302 [10de:2684] '
                 '[10de:16f3] a1" pci_link_speed="%f"/>' % (w.gpi(), bid, speed))


def host_bridge(w, depth, lo, hi):
    w.add(depth, '<object type="Bridge" gp_index="%d" bridge_type="0-1" depth="0" '
                 'bridge_pci="0000:[%02x-%02x]">' % (w.gpi(), lo, hi))


def switches(nports, per_switch, speed=GEN4, nobusid=False, gpu_speed=None):
    """A socket with nports root ports, each holding a switch of
    per_switch GPUs (per_switch 0: a GPU straight on the root port); the
    GPUs' own links at gpu_speed (default: the switch's, speed)."""
    gpu_speed = gpu_speed or speed
    def io(w, d, s, bus):
        span = 1 + nports * (2 + per_switch)
        host_bridge(w, d, bus, bus + span)
        nxt = bus + 1
        for p in range(nports):
            root_bus = nxt
            if per_switch == 0:
                bridge(w, d + 1, 1, "0000:%02x:%02x.0" % (bus, p + 1), root_bus, root_bus, speed,
                       "8086:2030")
                gpu(w, d + 2, "0000:%02x:00.0" % root_bus, speed)
                w.add(d + 1, '</object>')
                nxt += 1
                continue
            bridge(w, d + 1, 1, "0000:%02x:%02x.0" % (bus, p + 1), root_bus,
                   root_bus + 1 + per_switch, speed, "8086:2030")
            bridge(w, d + 2, 2, "0000:%02x:00.0" % root_bus, root_bus + 1,
                   root_bus + 1 + per_switch, speed)
            for k in range(per_switch):
                down = root_bus + 2 + k
                bridge(w, d + 3, 3, "0000:%02x:%02x.0" % (root_bus + 1, k), down, down,
                       gpu_speed)
                gpu(w, d + 4, "0000:%02x:00.0" % down, gpu_speed,
                    with_busid=not (nobusid and s == 0 and p == 0 and k == 1))
                w.add(d + 3, '</object>')
            w.add(d + 2, '</object>')
            w.add(d + 1, '</object>')
            nxt += 2 + per_switch
        w.add(d, '</object>')
        return bus + span + 1
    return io


def partial_nobridge():
    def io(w, d, s, bus):
        host_bridge(w, d, 0, 0x20)
        bridge(w, d + 1, 1, "0000:00:01.0", 1, 4, GEN4, "8086:2030")
        bridge(w, d + 2, 2, "0000:01:00.0", 2, 4, GEN4)
        for k in range(2):
            bridge(w, d + 3, 3, "0000:02:%02x.0" % k, 3 + k, 3 + k, GEN4)
            gpu(w, d + 4, "0000:%02x:00.0" % (3 + k))
            w.add(d + 3, '</object>')
        w.add(d + 2, '</object>')
        w.add(d + 1, '</object>')
        gpu(w, d + 1, "0000:00:05.0")  # on the host bridge itself: no root port known
        gpu(w, d + 1, "0000:00:06.0")
        w.add(d, '</object>')
        return 0x21
    return io


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "mpi-tests", "fixtures",
        "topology")
    os.makedirs(out, exist_ok=True)
    files = {
        "8gpu-4switch.xml": machine(2, 4, switches(2, 2)),
        "8gpu-2switch.xml": machine(2, 4, switches(1, 4)),
        "4gpu-1switch.xml": machine(1, 8, switches(1, 4)),
        "4gpu-rootports.xml": machine(1, 8, switches(4, 0)),
        # x8 GPUs behind an x16 switch uplink: the shared link is 2x a GPU's
        "4gpu-1switch-x8.xml": machine(1, 8, switches(1, 4, gpu_speed=GEN4 / 2)),
        "partial-nobridge.xml": machine(1, 4, partial_nobridge()),
        "partial-nobusid.xml": machine(1, 4, switches(1, 2, nobusid=True)),
        "noGPU.xml": machine(1, 2, lambda w, d, s, bus: bus),
        "notxml.xml": "this is not an hwloc XML file\n",
    }
    for name, text in files.items():
        with open(os.path.join(out, name), "w") as f:
            f.write(text)
    print("wrote %d files to %s" % (len(files), out))


if __name__ == "__main__":
    main()
