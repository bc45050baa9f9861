"""curve_parity.py A/metrics.jsonl B/metrics.jsonl LABEL TOL [FIRST LAST]: exit 0 when B has every one of the
steps FIRST..LAST (default: A's steps) and every loss of B is within TOL relative of A's same step; prints the
worst difference."""
import json
import sys

a = {j["step"]: j["loss"] for j in map(json.loads, open(sys.argv[1]))}
b = {j["step"]: j["loss"] for j in map(json.loads, open(sys.argv[2]))}
label, tol = sys.argv[3], float(sys.argv[4])
want = list(range(int(sys.argv[5]), int(sys.argv[6]) + 1)) if len(sys.argv) > 6 else sorted(a)
steps = [s for s in want if s in b and s in a]
worst = max(abs(b[s] - a[s]) / abs(a[s]) for s in steps) if steps else 1
print(f"{label}: steps {steps[0] if steps else '-'}..{steps[-1] if steps else '-'}, max rel diff {worst:.3e} (bound {tol:g})")
sys.exit(0 if steps == want and worst <= tol else 1)
