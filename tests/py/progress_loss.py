"""progress_loss.py METRICS.jsonl STDERR: the progress lines of a 6-step run logged at steps 1, 3 and 6 show the
mean loss since the previous line (not the last step's loss), to 4 decimals."""
import json
import re
import sys

r = [json.loads(l)["loss"] for l in open(sys.argv[1])]
shown = {int(m.group(1)): m.group(2) for m in re.finditer(r"step (\d+)/6  loss (\S+)", open(sys.argv[2]).read())}
want = {1: r[0], 3: sum(r[1:3]) / 2, 6: sum(r[3:6]) / 3}
sys.exit(0 if shown == {k: "%.4f" % v for k, v in want.items()} and "%.4f" % r[5] != shown[6] else 1)
