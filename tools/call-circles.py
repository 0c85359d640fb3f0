#!/usr/bin/env python3
"""call-circles.py BUILD_SRC SRC: the call circles between roundpipe's source files.

Reads every library object under BUILD_SRC (a build's src/ folder) with nm, keeps those whose
source file still exists under SRC (a build folder keeps the objects of files since removed),
joins each undefined symbol to the file that defines it and prints the strongly connected parts
of that graph with more than one file (DESIGN 12: nothing reaches upward, nobody calls back).
Exit 0 with "call circles: none", 1 naming each circle."""
import collections
import os
import re
import subprocess
import sys


def main(build_src, src):
    def live(obj):
        folder = os.path.relpath(os.path.dirname(obj), build_src).replace(os.sep + ".libs", "")
        folder = "" if folder in (".libs", ".") else folder
        base = re.sub(r"^lib[a-z_]*_la-", "", os.path.basename(obj))[:-2]
        return any(os.path.exists(os.path.join(src, folder, base + ext)) for ext in (".c", ".cu"))

    objs = sorted(os.path.join(r, f) for r, _, fs in os.walk(build_src) for f in fs
                  if f.endswith(".o") and "mpi-tests" not in r)
    objs = [o for o in objs if live(o)]
    defines, uses, names = {}, collections.defaultdict(set), set()
    for obj in objs:
        name = re.sub(r"lib[a-z_]*_la-", "", os.path.relpath(obj, build_src).replace(".libs/", ""))
        if name in names:
            continue
        names.add(name)
        out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            p = line.split()
            if len(p) == 3 and p[1] in "TDBR":
                defines[p[2]] = name
            elif len(p) == 2 and p[0] == "U":
                uses[name].add(p[1])
    edges = {n: {defines[u] for u in uses[n] if u in defines and defines[u] != n} for n in names}
    # Tarjan's strongly connected components, iterative
    index, low, on, stack, circles, counter = {}, {}, set(), [], [], [0]
    for root in sorted(names):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]; counter[0] += 1
        stack.append(root); on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]; counter[0] += 1
                    stack.append(w); on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                part = []
                while True:
                    w = stack.pop(); on.discard(w); part.append(w)
                    if w == v:
                        break
                if len(part) > 1:
                    circles.append(sorted(part))
    print("%d object files; call circles: %s" % (len(names), "none" if not circles else ""))
    for c in circles:
        print("  circle: " + " <-> ".join(c))
    return 1 if circles else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
