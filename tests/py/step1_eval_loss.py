"""step1_eval_loss.py METRICS.jsonl EVAL.json: the run's step-1 loss (before any update) is within 1e-6
relative of eval's loss of the same weights on the same batch; prints both."""
import json
import sys

train = json.loads(open(sys.argv[1]).readline())["loss"]
ev = json.load(open(sys.argv[2]))["loss"]
print(f"  step 1 loss {train!r}, eval loss {ev!r}")
sys.exit(0 if abs(train - ev) <= 1e-6 * abs(ev) else 1)
