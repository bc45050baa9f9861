"""topo_bytes.py TOPO.json METRICS.jsonl: every step's measured comm_bytes equal `topo`'s comm_bytes_per_step."""
import json
import sys

want = json.load(open(sys.argv[1]))["comm_bytes_per_step"]
for line in open(sys.argv[2]):
    r = json.loads(line)
    for k, v in want.items():
        if r["comm_bytes"][k] != v: sys.exit("step %d %s: measured %d, topo %d" % (r["step"], k, r["comm_bytes"][k], v))
