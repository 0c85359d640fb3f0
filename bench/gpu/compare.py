#!/usr/bin/env python3
"""Compare two roundpipe metrics logs (--log JSON lines) for bench/gpu/parity.sh.

  compare.py close REF.jsonl RUN.jsonl RTOL
      every step's loss, every evaluation's eval_loss and, where REF has one,
      router_aux_loss of RUN within RTOL relative of REF's (the bf16 bound of a
      CUDA run against the CPU executors' on the same fixture); the same steps
      and evaluations on both sides. Prints
        "worst W (FIELD at step S: RUN_VALUE vs REF_VALUE), N values"
      and exits 0, or prints each value beyond RTOL and exits 1.
  compare.py same REF.jsonl RUN.jsonl [FIRST_STEP]
      RUN's lines identical to REF's (all fields but the timings), REF taken
      from FIRST_STEP on (a resumed run logs the steps after its checkpoint
      only). Exits 0 or prints the first difference and exits 1.

Exit 2: a file is missing or not a metrics log. Only the standard library.
"""

import json
import sys

TIMING = ("tokens_per_s", "time")


def read(path):
    try:
        with open(path) as f:
            lines = [json.loads(l) for l in f if l.strip()]
    except (OSError, ValueError) as ex:
        print("compare.py: %s: %s" % (path, ex))
        sys.exit(2)
    if not lines or any("step" not in l for l in lines):
        print("compare.py: %s: no metrics lines" % path)
        sys.exit(2)
    return lines


def key(line):
    """(step, 'eval' or 'train'): an evaluation shares its step's number."""
    return (line["step"], "eval" if "eval_loss" in line else "train")


def close(ref_path, run_path, rtol):
    ref = {key(l): l for l in read(ref_path)}
    run = {key(l): l for l in read(run_path)}
    if sorted(ref) != sorted(run):
        print("different lines: %s has %s, %s has %s" % (ref_path, sorted(ref), run_path, sorted(run)))
        return 1
    worst, where, n, bad = 0.0, "-", 0, 0
    for k in sorted(ref):
        fields = ["eval_loss"] if k[1] == "eval" else ["loss"]
        if k[1] == "train" and "router_aux_loss" in ref[k]:
            fields.append("router_aux_loss")
        for fld in fields:
            a, b = run[k].get(fld), ref[k].get(fld)
            if a is None or b is None:
                print("step %d: %s missing (%r vs %r)" % (k[0], fld, a, b))
                bad += 1
                continue
            err = abs(a - b) / max(abs(b), 1e-12)
            n += 1
            if err > worst or where == "-":
                worst, where = err, "%s at step %d: %.7g vs %.7g" % (fld, k[0], a, b)
            if not err <= rtol:
                print("step %d: %s %.7g vs %.7g: relative error %.3g > %g" % (k[0], fld, a, b, err, rtol))
                bad += 1
    print("worst %.3g (%s), %d values" % (worst, where, n))
    return 1 if bad else 0


def same(ref_path, run_path, first):
    strip = lambda l: {k: v for k, v in l.items() if k not in TIMING}
    ref = [strip(l) for l in read(ref_path) if l["step"] >= first]
    run = [strip(l) for l in read(run_path)]
    if len(ref) != len(run):
        print("%d lines against %d" % (len(run), len(ref)))
        return 1
    for a, b in zip(run, ref):
        if a != b:
            print("differs at step %d: %s vs %s" % (b["step"], json.dumps(a), json.dumps(b)))
            return 1
    print("%d lines identical" % len(ref))
    return 0


def main(argv):
    if len(argv) == 5 and argv[1] == "close":
        return close(argv[2], argv[3], float(argv[4]))
    if len(argv) in (4, 5) and argv[1] == "same":
        return same(argv[2], argv[3], int(argv[4]) if len(argv) == 5 else 1)
    print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
