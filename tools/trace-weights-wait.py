#!/usr/bin/env python3
"""trace-weights-wait.py: how long the jobs of each step stood still for their weights.

  tools/trace-weights-wait.py trace.json [--skip N]

Reads a `roundpipe train --trace` file. The executor records every wait for
weights as a span on its waits track, "weights of layer(s) ... (F0, pipeline
0, it T)"; the first forward job of step T is F0 of pipeline 0. For each step
it prints that job's waits summed (milliseconds), the waits of every job of
the step on every rank summed, the step's length (rank 0's "step T" span) and
both as a share of the step; then the totals over the steps past the first N
(--skip, default 1: the first step pays page faults and thread start-up).
Python 3's standard library only.
"""
import re
import sys

from rp_trace import STEP, arguments, events

WAIT = re.compile(r"^weights of layers? [0-9-]+ \(([FTB][0-9]+), pipeline ([0-9]+), it ([0-9]+)\)$")


def main():
    a = arguments(__doc__, "steps left out of the totals (default 1)")
    first, wait, step = {}, {}, {}
    for ev in events(a.trace, "trace-weights-wait"):
        if ev.get("ph") != "X":
            continue
        name = ev.get("name", "")
        m = WAIT.match(name)
        if m:
            t, ms = int(m.group(3)), ev["dur"] / 1e3
            wait[t] = wait.get(t, 0.0) + ms
            if m.group(1) == "F0" and m.group(2) == "0":
                first[t] = first.get(t, 0.0) + ms
            continue
        m = STEP.match(name)
        if m:
            step[int(m.group(1))] = ev["dur"] / 1e3
    if not step:
        sys.exit("trace-weights-wait: %s: no \"step N\" spans (a trace of roundpipe train?)" % a.trace)
    print("step  step (ms)  F0 waits for weights (ms)  share   all jobs wait (ms)  share")
    tf = tw = ts = 0.0
    for t in sorted(step):
        f, w = first.get(t, 0.0), wait.get(t, 0.0)
        print("%4d  %9.2f  %25.2f  %5.1f%%  %18.2f  %5.1f%%" % (t, step[t], f, 100.0 * f / step[t],
                                                             w, 100.0 * w / step[t]))
        if t > a.skip:
            tf += f
            tw += w
            ts += step[t]
    if ts > 0:
        print("steps %d-%d: %.2f ms; F0 waited %.2f ms (%.2f%%), all jobs %.2f ms (%.2f%%)"
              % (a.skip + 1, max(step), ts, tf, 100.0 * tf / ts, tw, 100.0 * tw / ts))


if __name__ == "__main__":
    main()
