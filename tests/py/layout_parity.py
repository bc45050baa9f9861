"""layout_parity.py A/metrics.jsonl B/metrics.jsonl FIRST: B logged steps FIRST..20; from FIRST on, every loss of
B is within 1e-5 relative of A's (the first within 1e-6), on the same global batch (tokens and the
layout-independent batch fingerprint). Prints what differs."""
import json
import sys

a = {r["step"]: r for r in map(json.loads, open(sys.argv[1]))}
b = {r["step"]: r for r in map(json.loads, open(sys.argv[2]))}
first = int(sys.argv[3]); bad = []
steps = [s for s in sorted(b) if s >= first]
if len(steps) != 20 - first + 1: bad.append("steps %s" % steps)
for s in steps:
    rel = abs(a[s]["loss"] - b[s]["loss"]) / abs(a[s]["loss"])
    if rel > (1e-6 if s == first else 1e-5): bad.append("step %d: %r vs %r (rel %.2e)" % (s, a[s]["loss"], b[s]["loss"], rel))
    if a[s]["tokens"] != b[s]["tokens"]: bad.append("step %d: tokens %d vs %d" % (s, a[s]["tokens"], b[s]["tokens"]))
    if a[s]["batch_fingerprint"] != b[s]["batch_fingerprint"]: bad.append("step %d: the global batch differs" % s)
if bad: print("\n".join(bad)); sys.exit(1)
