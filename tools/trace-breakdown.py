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
step that activity took, alone.

Where the trace has the device's own time of each layer call (its
"device: layer calls" track, since 2026-12-01), the time within the kept
steps that no call covers is the device's idle time; it is split by what
the rank's host was doing meanwhile: each other activity's share of it
(they overlap, so these are not parts of one whole either), and the part
no traced activity covers. A last line

  RESULT idle IDLE_SHARE ACTIVITY=SHARE ... untraced=SHARE

(IDLE_SHARE of the steps, each ACTIVITY's of the idle time; averaged over
the ranks with the track). Python 3's standard library only.
"""
import re
import sys

from rp_trace import STEP, arguments, events

LANE = re.compile(r"^(.*?)(?: #[0-9]+)?$")


def merged(spans, lo, hi):
    """The spans clipped to [lo, hi), sorted and merged."""
    out = []
    for s, e in sorted(spans):
        s, e = max(s, lo), min(e, hi)
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def union_ms(spans, lo, hi):
    """Milliseconds of [lo, hi) covered by the (start, end) spans."""
    return sum(e - s for s, e in merged(spans, lo, hi))


def gaps(spans, lo, hi):
    """[lo, hi) less the spans: the intervals none covers."""
    out, at = [], lo
    for s, e in merged(spans, lo, hi):
        if s > at:
            out.append((at, s))
        at = max(at, e)
    if hi > at:
        out.append((at, hi))
    return out


def overlap_ms(intervals, spans):
    """Milliseconds of the disjoint intervals the spans cover."""
    return sum(union_ms(spans, s, e) for s, e in intervals)


DEVICE = "device: layer calls"


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
    idle_split(spans, kept, total, ranks, [act for act in activities if act != DEVICE])


def idle_split(spans, kept, total, ranks, others):
    """The device's idle time within the kept steps, by what the host did."""
    with_device = [r for r in ranks if (r, DEVICE) in spans]
    if not with_device:
        return
    print("%-6s %-26s %14s %7s" % ("rank", "the device idle, during", "ms/step", "of idle"))
    idle_mean, split_mean = 0.0, {}
    for r in with_device:
        idle = [g for s, e in kept for g in gaps(spans[(r, DEVICE)], s, e)]
        idle_ms = sum(e - s for s, e in idle)
        idle_mean += idle_ms / total / len(with_device)
        print("%-6d %-26s %14.2f %7.3f" % (r, "(idle in all)", idle_ms / len(kept),
                                           idle_ms / total))
        host = [sp for act in others for sp in spans.get((r, act), [])]
        parts = [(act, overlap_ms(idle, spans.get((r, act), []))) for act in others]
        parts.append(("untraced", idle_ms - overlap_ms(idle, host)))
        for act, ms in parts:
            share = ms / idle_ms if idle_ms > 0 else 0.0
            split_mean[act] = split_mean.get(act, 0.0) + share / len(with_device)
            print("%-6d %-26s %14.2f %7.3f" % (r, act, ms / len(kept), share))
    print("RESULT idle %.3f %s" % (idle_mean, " ".join("%s=%.3f" % (slug(act), split_mean[act])
                                                        for act in others + ["untraced"])))


if __name__ == "__main__":
    main()
