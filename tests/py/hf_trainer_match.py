"""hf_trainer_match.py TRAINER_STATE.json METRICS.jsonl COMPARE.json NAME: portatrain's run matches HF Trainer's:
every step, step-1 loss within 1e-6 and every loss within 1e-5 relative (compare's report), grad norms within
1e-4, lr within 1e-12; with HF's epoch boundaries also as many steps as HF and the same epoch field."""
import json, sys
hf = [e for e in json.load(open(sys.argv[1]))["log_history"] if "loss" in e]
pt = {j["step"]: j for j in map(json.loads, open(sys.argv[2]))}
r = json.load(open(sys.argv[3]))
rel = lambda a, b: abs(a - b) / max(abs(b), 1e-12)
gn = max(rel(pt[e["step"]]["grad_norm"], e["grad_norm"]) for e in hf)
lr = max(rel(pt[e["step"]]["lr"], e["learning_rate"]) if e["learning_rate"] else pt[e["step"]]["lr"] for e in hf)
ps = r["per_step"]
print(f"measured ({sys.argv[4]}): steps {ps['n']}, loss max rel {ps['max_rel_diff']:.3g} (windowed {ps['windowed_a']}),"
      f" step-1 loss {r['step0']['loss_rel_diff']:.3g}, grad norm max rel {gn:.3g}, lr max rel {lr:.3g}")
ok = (ps["n"] == len(hf) and r["step0"]["loss_rel_diff"] < 1e-6 and ps["max_rel_diff"] < 1e-5 and gn < 1e-4
      and lr <= 1e-12)
run = json.load(open(sys.argv[1].replace("trainer_state.json", "hf_run.json")))
if run.get("epoch_boundary") == "hf":
    # HF's own epochs: as many steps as HF made (num_train_epochs resolved the same way), the same "epoch" field
    n_pt, n_hf = len(pt), json.load(open(sys.argv[1]))["max_steps"]
    ep = max(abs(pt[e["step"]]["epoch"] - e["epoch"]) for e in hf)
    print(f"measured ({sys.argv[4]}): portatrain steps {n_pt}, HF steps {n_hf}, epoch field max abs diff {ep:.3g}")
    ok = ok and n_pt == n_hf and ep < 1e-6
sys.exit(0 if ok else 1)
