"""nccl_parity.py A/metrics.jsonl B/metrics.jsonl LABEL STEPS: B logged steps 1..STEPS, each loss within 1e-4
relative of A's, on the same batches (tokens and batch fingerprint). Prints the worst difference."""
import json
import sys

a = {r["step"]: r for r in map(json.loads, open(sys.argv[1]))}
b = {r["step"]: r for r in map(json.loads, open(sys.argv[2]))}
bad, worst = [], 0.0
if sorted(b) != list(range(1, int(sys.argv[4]) + 1)): bad.append("steps %s" % sorted(b))
for s in sorted(set(a) & set(b)):
    rel = abs(a[s]["loss"] - b[s]["loss"]) / abs(a[s]["loss"]); worst = max(worst, rel)
    if rel > 1e-4: bad.append("step %d: %r vs %r (rel %.2e)" % (s, a[s]["loss"], b[s]["loss"], rel))
    if a[s]["tokens"] != b[s]["tokens"] or a[s]["batch_fingerprint"] != b[s]["batch_fingerprint"]:
        bad.append("step %d: another batch" % s)
print("%s: %d steps, max relative loss difference to cpu-ref %.3e" % (sys.argv[3], len(b), worst))
if bad: print("\n".join(bad)); sys.exit(1)
