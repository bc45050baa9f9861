"""topo_audit.py TOPO.json METRICS.jsonl: every step's measured comm_bytes, activation_bytes and
state_bytes_per_rank equal what `topo` predicted."""
import json, sys
t = json.load(open(sys.argv[1]))
for line in open(sys.argv[2]):
    r = json.loads(line)
    for k, v in t["comm_bytes_per_step"].items():
        if r["comm_bytes"][k] != v: sys.exit("step %d %s: measured %d, topo %d" % (r["step"], k, r["comm_bytes"][k], v))
    m = t["memory_bytes_per_rank"]
    if r["activation_bytes"] != m["activations"]:
        sys.exit("activations: measured %d, topo %d" % (r["activation_bytes"], m["activations"]))
    if r["state_bytes_per_rank"] != m["parameter_state"]:
        sys.exit("parameter state: measured %d, topo %d" % (r["state_bytes_per_rank"], m["parameter_state"]))
