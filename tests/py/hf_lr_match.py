"""hf_lr_match.py TRAINER_STATE.json METRICS.jsonl: the lr of each of HF's 30 logged steps equals portatrain's
(within 1e-9 relative)."""
import json, sys
hf = {e["step"]: e["learning_rate"] for e in json.load(open(sys.argv[1]))["log_history"] if "loss" in e}
pt = {j["step"]: j["lr"] for j in map(json.loads, open(sys.argv[2]))}
bad = [(s, hf[s], pt.get(s)) for s in sorted(hf) if pt.get(s) is None or abs(pt[s] - hf[s]) > 1e-9 * max(abs(hf[s]), 1e-12)]
print("lr steps", len(hf), "differing:", bad[:3])
sys.exit(1 if bad or len(hf) != 30 else 0)
