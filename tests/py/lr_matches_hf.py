"""lr_matches_hf.py FIXTURE.json CASE METRICS.jsonl: the run's lr at every step equals HF's rate of that case
(within 1e-15 relative), one rate per step."""
import json
import sys

c = json.load(open(sys.argv[1]))["cases"][int(sys.argv[2])]
got = [json.loads(l)["lr"] for l in open(sys.argv[3])]
worst = max((abs(a - b) / max(abs(b), 1e-300) for a, b in zip(got, c["rates"])), default=0)
print("  worst relative difference to HF: %.3g" % worst)
sys.exit(0 if len(got) == len(c["rates"]) and worst <= 1e-15 else 1)
