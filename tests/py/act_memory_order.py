"""act_memory_order.py DIR BACKEND: the step-1 activation_bytes of DIR/BACKEND-POLICY/metrics.jsonl for each
activation-checkpointing policy are ordered: full keeps one input per layer + one shared layer, selective sits
between full and none, op keeps the matmul outputs."""
import json
import sys

d, be = sys.argv[1], sys.argv[2]
m = {p: json.loads(open("%s/%s-%s/metrics.jsonl" % (d, be, p)).readline())["activation_bytes"]
     for p in ["none", "full", "selective", "selective:every=1", "selective:every=3", "op"]}
assert m["full"] == m["selective:every=1"] < m["selective"] < m["selective:every=3"] < m["none"], m
assert m["full"] < m["op"] < m["none"], m
print("memory ordered", m)
