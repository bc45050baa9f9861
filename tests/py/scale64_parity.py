"""scale64_parity.py SINGLE/metrics.jsonl DIST/metrics.jsonl STEPS: every line of both is valid JSON; DIST logged
steps 1..STEPS, each loss within 1e-6 relative of SINGLE's, on the same tokens and global batch (fingerprint).
Prints what differs, or the worst relative difference."""
import json
import sys


def load(p):
    recs = []
    for i, line in enumerate(open(p), 1):
        try: recs.append(json.loads(line))
        except ValueError as e: print("FAIL: %s line %d is not valid JSON: %s" % (p, i, e)); sys.exit(1)
    return {r["step"]: r for r in recs}


a, b, n = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3])
bad = []
if sorted(b) != list(range(1, n + 1)): bad.append("64-rank steps %s, want 1..%d" % (sorted(b), n))
for s in sorted(b):
    rel = abs(a[s]["loss"] - b[s]["loss"]) / abs(a[s]["loss"])
    if rel > 1e-6: bad.append("step %d: loss %r vs %r (rel %.2e > 1e-6)" % (s, a[s]["loss"], b[s]["loss"], rel))
    if a[s]["tokens"] != b[s]["tokens"]: bad.append("step %d: tokens %d vs %d" % (s, a[s]["tokens"], b[s]["tokens"]))
    if a[s]["batch_fingerprint"] != b[s]["batch_fingerprint"]: bad.append("step %d: the global batch differs" % s)
if bad: print("FAIL: " + "\nFAIL: ".join(bad)); sys.exit(1)
print("ok: %d steps of TP4 x FSDP16 within 1e-6 of the single process (max rel %.1e)" % (n, max(
    abs(a[s]["loss"] - b[s]["loss"]) / abs(a[s]["loss"]) for s in b)))
