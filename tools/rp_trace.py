"""rp_trace.py: what the trace tools beside it share (trace-breakdown.py,
trace-weights-wait.py): their command line and reading a `roundpipe train
--trace` file. Python 3's standard library only."""
import argparse
import json
import re
import sys

STEP = re.compile(r"^step ([0-9]+)$")  # rank 0's span of each optimizer step


def arguments(doc, skip_help):
    """The tools' command line: the trace file and --skip N (default 1)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--skip", type=int, default=1, help=skip_help)
    return ap.parse_args()


def events(path, tool):
    """The trace's events, or the tool stops naming the file and why."""
    try:
        with open(path) as f:
            return json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit("%s: %s: not a roundpipe trace (%s)" % (tool, path, e))
