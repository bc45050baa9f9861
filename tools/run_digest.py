#!/usr/bin/env python3
"""Digests of one run's results for tools/compare_commits.sh (plain Python, no torch).

  run_digest.py metrics METRICS.jsonl   the per-step loss and grad_norm values (the last line of each step
                                        wins, as a resumed run appends after the kill); the JSON numbers,
                                        not the line text, so a format change that keeps them digests alike
  run_digest.py weights FILE.safetensors|DIR   every tensor's name, dtype, shape and bytes (a DIR: each
                                        *.safetensors in it), not the header's layout or metadata
  run_digest.py accept REPORT.json      the verdict and the numbers accept compared (curves, per-step
                                        differences, portability and recovery outcomes); times and prices
                                        are measured, not computed, and are left out

Prints "<sha256 prefix> <what was digested>"; exits 1 when the input is missing or unreadable.
"""
import glob
import hashlib
import json
import os
import struct
import sys


def digest(obj):
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def metrics(path):
    steps = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                steps[r["step"]] = [repr(float(r["loss"])), repr(float(r["grad_norm"]))]
    if not steps:
        raise ValueError(f"{path}: no steps")
    return digest(sorted(steps.items())), f"{len(steps)} steps, last loss {steps[max(steps)][0]}"


def tensors(path, h):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        names = sorted(k for k in header if k != "__metadata__")
        for name in names:
            t = header[name]
            begin, end = t["data_offsets"]
            f.seek(base + begin)
            h.update(json.dumps([name, t["dtype"], t["shape"]]).encode())
            h.update(f.read(end - begin))
    return len(names)


def weights(path):
    files = sorted(glob.glob(os.path.join(path, "*.safetensors"))) if os.path.isdir(path) else [path]
    if not files:
        raise ValueError(f"{path}: no .safetensors")
    h = hashlib.sha256()
    count = sum(tensors(p, h) for p in files)
    return h.hexdigest()[:16], f"{count} tensors"


# Report fields that are measured (times, and what is derived from them: throughput, goodput, the prose
# details that quote recovery times) or sizes of files rather than compared numbers: not digested.
MEASURED = {"detail", "goodput", "bytes", "tokens_per_s"}


def compared(x):
    if isinstance(x, dict):
        return {k: compared(v) for k, v in x.items() if k not in MEASURED and not k.endswith("_s")}
    if isinstance(x, list):
        return [compared(v) for v in x]
    if isinstance(x, float):
        return repr(x)
    return x


def accept(path):
    with open(path) as f:
        r = json.load(f)
    keep = {k: compared(r.get(k)) for k in ("verdict", "convergence", "curves", "portability", "recovery")}
    return digest(keep), f"verdict {r['verdict']}"


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("metrics", "weights", "accept"):
        sys.exit("usage: run_digest.py metrics|weights|accept PATH")
    try:
        d, what = {"metrics": metrics, "weights": weights, "accept": accept}[sys.argv[1]](sys.argv[2])
    except (OSError, ValueError, KeyError, struct.error) as e:
        print(f"run_digest: {sys.argv[1]} {sys.argv[2]}: {e}", file=sys.stderr)
        sys.exit(1)
    print(d, what)


if __name__ == "__main__":
    main()
