#!/usr/bin/env python3
"""Check that Hugging Face transformers loads a model directory unchanged.

Usage:
    python3 tools/hf_check_model.py DIR TOKENS_FILE LOGITS_FILE [--atol 1e-4]

DIR          an HF model directory (config.json + model.safetensors or a sharded
             model.safetensors.index.json), e.g. one exported by portatrain.
TOKENS_FILE  safetensors file with tensor `input_ids` (I32 [B,T]).
LOGITS_FILE  safetensors file with tensor `logits` (F32 [B,T,V]): the logits the
             model is expected to produce on input_ids.

The model is loaded with AutoModelForCausalLM.from_pretrained(DIR,
attn_implementation="eager", dtype=float32) on the CPU, run on input_ids (no
attention mask, positions 0..T-1), and the max abs difference to LOGITS_FILE's
`logits` is printed.  Exit status 0 if it is <= atol, 1 if above (or on a shape
mismatch / non-finite values), 2 on usage errors.  Any "missing"/"unexpected"
weights reported by transformers also fail the check (a tied checkpoint may
lack lm_head.weight; that is not reported as missing), and so does a config.json
dtype (`dtype`, or the older `torch_dtype`) other than the weight files' one.

Example (the golden fixtures must give error 0):
    python3 tools/hf_check_model.py tests/fixtures/golden/tied \\
        tests/fixtures/golden/tied/expected.safetensors \\
        tests/fixtures/golden/tied/expected.safetensors
"""

import argparse
import sys


def main():
    ap = argparse.ArgumentParser(description="compare transformers logits for an HF dir with saved logits")
    ap.add_argument("dir")
    ap.add_argument("tokens_file")
    ap.add_argument("logits_file")
    ap.add_argument("--atol", type=float, default=1e-4)
    a = ap.parse_args()

    import torch
    import transformers
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    ids = load_file(a.tokens_file)["input_ids"].to(torch.long)
    want = load_file(a.logits_file)["logits"].to(torch.float32)
    if ids.ndim != 2:
        print(f"FAIL: input_ids must be [B,T], got {list(ids.shape)}")
        return 1

    kw = dict(attn_implementation="eager", output_loading_info=True)
    try:
        model, info = AutoModelForCausalLM.from_pretrained(a.dir, dtype=torch.float32, **kw)
    except TypeError:
        model, info = AutoModelForCausalLM.from_pretrained(a.dir, torch_dtype=torch.float32, **kw)
    model.eval()
    bad = False
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        v = info.get(k) if isinstance(info, dict) else None
        if v:
            print(f"FAIL: {k}: {sorted(v) if not isinstance(v, list) else v}")
            bad = True
    # the config's dtype is what from_pretrained(dtype="auto") loads in: it must name the stored dtype
    import glob, json, os, struct
    cfg = json.load(open(os.path.join(a.dir, "config.json")))
    cdt = cfg.get("dtype", cfg.get("torch_dtype"))
    stored = set()
    for f in glob.glob(os.path.join(a.dir, "*.safetensors")):
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            stored |= {v["dtype"] for k, v in json.loads(fh.read(n)).items() if k != "__metadata__"}
    names = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}
    if {names.get(x, x) for x in stored} != {cdt}:
        print(f"FAIL: config.json dtype {cdt!r} but the weights are stored as {sorted(stored)}")
        bad = True
    with torch.no_grad():
        got = model(input_ids=ids).logits.to(torch.float32)
    if got.shape != want.shape:
        print(f"FAIL: logits shape {list(got.shape)} != expected {list(want.shape)}")
        return 1
    if not torch.isfinite(got).all():
        print("FAIL: transformers produced non-finite logits")
        return 1
    err = (got - want).abs().max().item()
    ok = err <= a.atol and not bad
    print(f"transformers {transformers.__version__} torch {torch.__version__}: "
          f"{type(model).__name__} B={ids.shape[0]} T={ids.shape[1]} V={got.shape[-1]} "
          f"max abs error {err:.6e} (atol {a.atol:g}) -> {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
