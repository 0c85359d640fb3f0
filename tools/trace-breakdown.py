#!/usr/bin/env python3
"""trace-breakdown.py: where the steps of a run went, activity by activity.

  tools/trace-breakdown.py trace.json [--skip N]

Reads a `roundpipe train --trace` file: one process per rank, one track per
activity ("compute", "waits (executor)", "xfer: weights", "optimizer", ...;
an activity whose spans overlap spreads over extra tracks, "... #2"). For the
steps past the first N (--skip, default 1: the first pays page faults,
thread start-up and, on a GPU, cuDNN's plans), each step being rank 0's
"step T" span, it prints for every activity of every rank the time it was
busy within the steps (the union of its spans on all its tracks, each span
clipped to the step it overlaps, so overlapping optimizer threads count
once) and that as a share of the steps' time; then, per activity, the mean
share over the ranks, and a last line

  RESULT breakdown STEP_MS ACTIVITY=SHARE ...

(STEP_MS the steps' mean length; activities named without spaces or
colons: compute, waits-executor, xfer-weights, ...; shares of rank 0's
steps, averaged over the ranks) for scripts: bench/gpu/run.sh's e2e row.
Spans nest (a job's compute span holds its waits for weights), so the
shares of activities are not parts of one whole: each says how much of the
step that activity took, alone. Python 3's standard library only.
"""
import re
import sys

from rp_trace import STEP, arguments, events

LANE = re.compile(r"^(.*?)(?: #[0-9]+)?$")


def union_ms(spans, lo, hi):
    """Milliseconds of [lo, hi) covered by the (start, end) spans."""
    total, at = 0.0, lo
    for s, e in sorted(spans):
        s, e = max(s, at), min(e, hi)
        if e > s:
            total += e - s
            at = e
    return total


def slug(activity):
    return re.sub(r"[^a-z0-9]+", "-", activity.lower()).strip("-")


def main():
    a = arguments(__doc__, "steps left out (default 1)")
    evs = events(a.trace, "trace-breakdown")
    track = {}   # (pid, tid) -> activity
    spans = {}   # (pid, activity) -> [(start ms, end ms)]
    steps = {}   # step -> (start ms, end ms), rank 0's
    for ev in evs:
        if ev.get("ph") == "M" and ev.get("name") == "thread_name":
            track[(ev.get("pid"), ev.get("tid"))] = LANE.match(ev["args"]["name"]).group(1)
    for ev in evs:
        if ev.get("ph") != "X":
            continue
        start, end = ev["ts"] / 1e3, (ev["ts"] + ev["dur"]) / 1e3
        m = STEP.match(ev.get("name", ""))
        if m and ev.get("pid") == 0:
            steps[int(m.group(1))] = (start, end)
            continue
        activity = track.get((ev.get("pid"), ev.get("tid")))
        if activity is None or activity == "steps":
            continue
        spans.setdefault((ev.get("pid"), activity), []).append((start, end))
    kept = [steps[t] for t in sorted(steps) if t > a.skip]
    if not kept:
        sys.exit("trace-breakdown: %s: no \"step N\" span of rank 0 past step %d (%d steps)"
                 % (a.trace, a.skip, len(steps)))
    total = sum(e - s for s, e in kept)
    ranks = sorted({pid for pid, _ in spans})
    activities = sorted({act for _, act in spans})
    first, last = min(t for t in steps if t > a.skip), max(steps)
    print("steps %d-%d: %d steps, %.2f ms each on average; %d rank(s)"
          % (first, last, len(kept), total / len(kept), len(ranks)))
    print("%-6s %-26s %14s %7s" % ("rank", "activity", "busy ms/step", "share"))
    mean = {}
    for act in activities:
        shares = []
        for r in ranks:
            busy = sum(union_ms(spans.get((r, act), []), s, e) for s, e in kept)
            shares.append(busy / total)
            print("%-6d %-26s %14.2f %7.3f" % (r, act, busy / len(kept), busy / total))
        mean[act] = sum(shares) / len(ranks)
    print("RESULT breakdown %.2f %s" % (total / len(kept),
                                         " ".join("%s=%.3f" % (slug(act), mean[act])
                                                  for act in activities)))


if __name__ == "__main__":
    main()
