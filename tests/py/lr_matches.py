"""lr_matches.py FIXTURE.json CASE METRICS.jsonl WHO: the run's lr at every step equals the reference's rate of
that case (within 1e-15 relative: both compute in double, the JSON carries 17 digits), one rate per step."""
import json
import sys

c = json.load(open(sys.argv[1]))["cases"][int(sys.argv[2])]
got = [json.loads(l)["lr"] for l in open(sys.argv[3])]
worst = max((abs(a - b) / max(abs(b), 1e-300) for a, b in zip(got, c["rates"])), default=0)
print("  worst relative difference to %s: %.3g" % (sys.argv[4], worst))
sys.exit(0 if len(got) == len(c["rates"]) and worst <= 1e-15 else 1)
