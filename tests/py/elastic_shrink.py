"""elastic_shrink.py REF RUN LOST_NODE STEPS: the elastic run RUN (TP2 x FSDP4 on 8 ranks, shrunk once to TP2 x
FSDP2 on 4 after losing LOST_NODE) completed steps 1..STEPS with one restart; its recovery.json names both
layouts, the lost node and the time to recover with its parts; steps after the restore ran on 4 ranks; every
step read the same global batch (tokens, batch fingerprint) as the uninterrupted run REF. Prints what differs."""
import json
import sys

ref, run, lost, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
a = {r["step"]: r for r in map(json.loads, open(ref + "/metrics.jsonl"))}
b = {r["step"]: r for r in map(json.loads, open(run + "/metrics.jsonl"))}
rec = json.load(open(run + "/recovery.json"))
bad = []
if sorted(b) != list(range(1, n + 1)): bad.append("steps %s" % sorted(b))
if not rec["completed"] or rec["restarts"] != 1: bad.append("completed %s, restarts %s" % (rec["completed"], rec["restarts"]))
r = rec["recoveries"][0] if rec["recoveries"] else {}
e = r.get("elastic", {})
old, new = e.get("old", {}), e.get("new", {})
want_old = dict(world=8, tp=2, fsdp=4, dp=1, per_device_train_batch_size=2, gradient_accumulation_steps=1)
want_new = dict(world=4, tp=2, fsdp=2, dp=1, per_device_train_batch_size=2, gradient_accumulation_steps=2)
if old != want_old or new != want_new: bad.append("layouts %s -> %s" % (old, new))
if e.get("lost_nodes") != [lost]: bad.append("lost_nodes %s, want [%s]" % (e.get("lost_nodes"), lost))
if not r.get("recovered") or not r.get("rejoin_wait_s", 0) >= 0.5: bad.append("recovery %s" % r)
parts = ["detect_s", "teardown_s", "rejoin_wait_s", "restart_s", "restore_s", "replay_s"]
if not r.get("total_s", 0) > 0 or any(k not in r for k in parts) or r["total_s"] + 1e-6 < sum(r[k] for k in parts[2:]):
    bad.append("time to recover and its parts: %s" % {k: r.get(k) for k in parts + ["total_s"]})
restored = r.get("restored_step", -1)
for s in sorted(b):
    ranks = len(b[s]["peak_rss_mib_per_rank"])
    if ranks != (8 if s <= restored else 4): bad.append("step %d ran on %d ranks" % (s, ranks))
    if a[s]["tokens"] != b[s]["tokens"] or a[s]["batch_fingerprint"] != b[s]["batch_fingerprint"]:
        bad.append("step %d: another global batch than the 8-rank run's" % s)
if bad: print("FAIL: " + "\nFAIL: ".join(bad)); sys.exit(1)
print("ok: %s -> %s after step %d (restored %d), recovered in %.2f s (rejoin wait %.2f, restore %.2f, replay %.2f)"
      % (e["old_layout"], e["new_layout"], r["fault_step"], restored, r["total_s"], r["rejoin_wait_s"],
         r["restore_s"], r["replay_s"]))
