#!/usr/bin/env python3
"""Tokenizer throughput: portatrain vs Hugging Face `tokenizers`, single thread and all threads, same corpus.

Usage (from the repository root, after building portatrain):
    python3 bench/tokenizer_bench.py --portatrain build/portatrain [--corpus-dir /tmp/pt-tokcorpus]
        [--tokenizer ../shared/assets/qwen3-tokenizer/tokenizer.json] [--repeat 3] [--update-doc]

The corpus is the parity corpus of tools/build_tokenizer_corpus.py (built if missing). Each measurement is the
best of --repeat passes over the whole corpus, MB/s of input bytes:
  - HF single thread: Tokenizer.encode(text, add_special_tokens=False) document by document, in a process
    with RAYON_NUM_THREADS=1 (texts are decoded from bytes before timing starts);
  - HF all threads: Tokenizer.encode_batch(all texts) with Rayon's default thread count;
  - portatrain: `portatrain tokenizer bench --threads N` (raw bytes in, including the invalid-UTF-8 check);
Tokenizer loading is not timed. --update-doc rewrites the table in docs/TOKENIZER.md between its markers.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HF_CODE = r"""
import struct, sys, time, json
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
data = open(sys.argv[2], "rb").read()
docs, i = [], 0
while i < len(data):
    (n,) = struct.unpack_from("<I", data, i); docs.append(data[i + 4:i + 4 + n]); i += 4 + n
texts = [d.decode("utf-8", "replace") for d in docs]
nbytes = sum(len(d) for d in docs)
mode, repeat = sys.argv[3], int(sys.argv[4])
best = None
for _ in range(repeat):
    t0 = time.perf_counter()
    if mode == "single":
        ntok = sum(len(tok.encode(t, add_special_tokens=False).ids) for t in texts)
    else:
        ntok = sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False))
    dt = time.perf_counter() - t0
    best = dt if best is None else min(best, dt)
print(json.dumps({"bytes": nbytes, "tokens": ntok, "seconds": best, "mb_per_s": nbytes / 1e6 / best}))
"""


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def hf(tok, corpus, mode, repeat, threads):
    env = dict(os.environ)
    if mode == "single":
        env["RAYON_NUM_THREADS"] = "1"
        env["TOKENIZERS_PARALLELISM"] = "false"
    else:
        env["RAYON_NUM_THREADS"] = str(threads)
        env["TOKENIZERS_PARALLELISM"] = "true"
    out = subprocess.run([sys.executable, "-c", HF_CODE, tok, corpus, mode, str(repeat)], env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def pt(exe, tok, corpus, threads, repeat):
    out = subprocess.run([exe, "tokenizer", "bench", "--tokenizer", tok, "--threads", str(threads), "--repeat",
                          str(repeat), corpus], capture_output=True, text=True, check=True).stdout
    runs = [json.loads(l) for l in out.strip().splitlines()]
    return max(runs, key=lambda r: r["mb_per_s"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--portatrain", default=os.path.join(ROOT, "build", "portatrain"))
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "..", "shared", "assets", "qwen3-tokenizer", "tokenizer.json"))
    ap.add_argument("--corpus-dir", default="/tmp/pt-tokcorpus")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--update-doc", action="store_true")
    a = ap.parse_args()
    corpus = os.path.join(a.corpus_dir, "corpus.bin")
    if not os.path.exists(corpus):
        subprocess.check_call([sys.executable, os.path.join(ROOT, "tools", "build_tokenizer_corpus.py"), "--out", a.corpus_dir])
    import tokenizers
    rows = []
    r1 = hf(a.tokenizer, corpus, "single", a.repeat, 1)
    rows.append(("HF tokenizers %s" % tokenizers.__version__, 1, r1))
    rn = hf(a.tokenizer, corpus, "batch", a.repeat, a.threads)
    rows.append(("HF tokenizers %s (encode_batch)" % tokenizers.__version__, a.threads, rn))
    p1 = pt(a.portatrain, a.tokenizer, corpus, 1, a.repeat)
    rows.append(("portatrain", 1, p1))
    pn = pt(a.portatrain, a.tokenizer, corpus, a.threads, a.repeat)
    rows.append(("portatrain", a.threads, pn))
    date = datetime.date.today().isoformat()
    lines = ["Measured %s on %s (%d logical CPUs), corpus %.2f MB (%s), best of %d passes, tokenizer loading not timed." % (
        date, cpu_model(), os.cpu_count(), r1["bytes"] / 1e6, corpus, a.repeat), "",
        "| implementation | threads | MB/s | tokens | seconds |", "|---|---:|---:|---:|---:|"]
    for name, th, r in rows:
        lines.append("| %s | %d | %.2f | %d | %.3f |" % (name, th, r["mb_per_s"], r["tokens"], r["seconds"]))
    lines += ["", "Single thread: portatrain / HF = %.2fx; all threads: %.2fx." % (
        p1["mb_per_s"] / r1["mb_per_s"], pn["mb_per_s"] / rn["mb_per_s"])]
    table = "\n".join(lines)
    print(table)
    if p1["tokens"] != r1["tokens"]:
        print("WARNING: token counts differ (%d vs %d)" % (p1["tokens"], r1["tokens"]), file=sys.stderr)
    if a.update_doc:
        p = os.path.join(ROOT, "docs", "TOKENIZER.md")
        s = open(p).read()
        b = s.index("<!-- BEGIN BENCH -->") + len("<!-- BEGIN BENCH -->\n")
        e = s.index("<!-- END BENCH -->")
        open(p, "w").write(s[:b] + table + "\n" + s[e:])
        print("updated", p)


if __name__ == "__main__":
    main()
