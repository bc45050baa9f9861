"""daly_intervals.py METRICS.jsonl OUTDIR: --save-steps auto probes a save at step 5, then saves at the Daly
interval from the measured save and step times (every save step recorded, each checkpoint present)."""
import json, math, os, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
saves = [r for r in rows if "save_time_s" in r]
assert saves and saves[0]["step"] == 5, f"probe save at step 5, got {[r['step'] for r in saves]}"
assert len(saves) >= 2, f"more than the probe: {[r['step'] for r in saves]}"
M = 0.0001 * 3600
for i, r in enumerate(saves):
    C = r["save_time_s"]
    times = [x["step_time_s"] for x in rows if 1 < x["step"] <= r["step"]]
    st = sum(times) / len(times)
    t = M if C >= 2 * M else math.sqrt(2 * C * M) * (1 + math.sqrt(C / (2 * M)) / 3 + C / (2 * M) / 9) - C
    want = max(1, int(math.floor(t / st + 0.5)))
    assert r["save_interval_steps"] == want, f"step {r['step']}: interval {r['save_interval_steps']}, Daly gives {want}"
    if i + 1 < len(saves):
        assert saves[i + 1]["step"] == r["step"] + want, f"next save at {saves[i+1]['step']}, want {r['step'] + want}"
    assert os.path.isdir(os.path.join(sys.argv[2], f"checkpoint-{r['step']}")), f"checkpoint-{r['step']} missing"
print("ok: probe at 5, then Daly intervals", [(r["step"], r["save_interval_steps"]) for r in saves])
