"""topo_audit.py TOPO.json METRICS.jsonl: every step's measured comm_bytes, activation_bytes and
state_bytes_per_rank equal what `topo` predicted. Under expert parallelism the MoE blocks' expert-side rows grow
with the routing (topo predicts balanced routing): there the activations must lie between topo's figure and
that plus its worst-case growth, and the last line printed is the growth measured."""
import json, sys
t = json.load(open(sys.argv[1]))
for line in open(sys.argv[2]):
    r = json.loads(line)
    for k, v in t["comm_bytes_per_step"].items():
        if r["comm_bytes"][k] != v: sys.exit("step %d %s: measured %d, topo %d" % (r["step"], k, r["comm_bytes"][k], v))
    m = t["memory_bytes_per_rank"]
    grow = m.get("moe_block_growth_worst_case", 0)
    if not m["activations"] <= r["activation_bytes"] <= m["activations"] + grow:
        sys.exit("activations: measured %d, topo %d (+ at most %d under EP)" % (r["activation_bytes"], m["activations"], grow))
    if r["state_bytes_per_rank"] != m["parameter_state"]:
        sys.exit("parameter state: measured %d, topo %d" % (r["state_bytes_per_rank"], m["parameter_state"]))
print("activation growth %d" % (r["activation_bytes"] - t["memory_bytes_per_rank"]["activations"]))
