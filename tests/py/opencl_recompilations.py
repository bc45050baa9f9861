"""opencl_recompilations.py METRICS.jsonl: a 6-step padded opencl run recompiles once per new row length (the
recompilations so far = distinct row lengths so far - 1), and every step logs cache_hits and cache_misses."""
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
seen, want = [], []  # recompilations so far = distinct row lengths so far - 1
for r in rows:
    if r["row_len"] not in seen: seen.append(r["row_len"])
    want.append(len(seen) - 1)
print("padded: row lengths", [r["row_len"] for r in rows], "recompilations", [r["recompilations"] for r in rows],
      "compile_s %.3f" % rows[-1]["compile_s"])
ok = len(rows) == 6 and [r["recompilations"] for r in rows] == want
sys.exit(0 if ok and all("cache_hits" in r and "cache_misses" in r for r in rows) else 1)
