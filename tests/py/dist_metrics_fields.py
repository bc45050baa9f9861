"""dist_metrics_fields.py SINGLE.jsonl DIST.jsonl: a 2-step distributed run logs every field of the single
process, the same step, tokens, epoch, lr and batch, the loss within 1e-6, and peak_rss_mib the max over ranks."""
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 2, (len(a), len(b))
for x, y in zip(a, b):
    missing = sorted(set(x) - set(y))
    assert not missing, "fields of the single process missing: %s" % missing
    for k in ("step", "tokens", "epoch", "lr", "batch_fingerprint"):
        assert x[k] == y[k], (k, x[k], y[k])
    assert abs(x["loss"] - y["loss"]) <= 1e-6 * x["loss"], (x["loss"], y["loss"])
    assert y["peak_rss_mib"] == max(y["peak_rss_mib_per_rank"]), y
