#!/usr/bin/env python3
"""`portatrain eval` loss against transformers' loss on the same windows, for model directories written by
transformers' save_pretrained (fp32, bf16, sharded; tied and untied) and for config.json variants (RoPE and
sliding-window keys as transformers 5 writes them, and a legacy rope_scaling beside rope_parameters).

Usage: python3 tools/hf_eval_parity.py PORTATRAIN SHARD WORKDIR [--seq-len 16] [--batch 2]

SHARD is a v1 token shard (256 int32 header, then uint32 ids), e.g. tests/fixtures/golden/tied/data.bin
(vocab 128). The loss is portatrain's: packed windows w of seq_len + 1 tokens starting at w * seq_len, inputs
the first seq_len, labels the next; mean cross-entropy over every full batch. transformers runs each
directory with from_pretrained(dtype=float32, attn_implementation="eager"). One line per directory:
transformers' loss, portatrain's, and their relative difference (or portatrain's error when it refuses).
Exit 1 when an accepted directory differs by more than 1e-6 relative.
"""
import argparse, json, os, shutil, subprocess, sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM


def windows(shard, T, B):
    toks = np.fromfile(shard, dtype=np.uint32)[256:].astype(np.int64)
    nb = ((len(toks) - 1) // T) // B
    for b in range(nb):
        yield torch.tensor(np.stack([toks[w * T:w * T + T + 1] for w in range(b * B, b * B + B)]))


def hf_loss(d, shard, T, B):
    m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    total, n = 0.0, 0
    with torch.no_grad():
        for x in windows(shard, T, B):
            lg = m(input_ids=x[:, :T]).logits.float()
            total += torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), x[:, 1:].reshape(-1),
                                                       reduction="sum").double().item()
            n += x.shape[0] * T
    return total / n


def pt_loss(exe, d, shard, T, B):
    r = subprocess.run([exe, "eval", "--model", d, "--data", shard, "--seq-len", str(T),
                        "--per-device-eval-batch-size", str(B)], capture_output=True, text=True)
    return json.loads(r.stdout)["loss"] if r.returncode == 0 else r.stderr.strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("portatrain"); ap.add_argument("shard"); ap.add_argument("workdir")
    ap.add_argument("--seq-len", type=int, default=16); ap.add_argument("--batch", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    os.makedirs(a.workdir, exist_ok=True)
    dirs = []
    for tied in (True, False):
        c = Qwen3Config(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=24, tie_word_embeddings=tied,
                        max_position_embeddings=64, rms_norm_eps=1e-5,
                        rope_parameters={"rope_type": "default", "rope_theta": 500.0})
        m = Qwen3ForCausalLM(c).eval()
        with torch.no_grad():
            for p in m.parameters():
                p.add_(torch.randn_like(p) * 0.05)  # norms away from 1
        base = os.path.join(a.workdir, "tied" if tied else "untied")
        m.save_pretrained(base + "-fp32"); m.save_pretrained(base + "-fp32-20KBshards", max_shard_size="20KB")
        m.to(torch.bfloat16)
        m.save_pretrained(base + "-bf16"); m.save_pretrained(base + "-bf16-20KBshards", max_shard_size="20KB")
        dirs += [base + s for s in ("-fp32", "-fp32-20KBshards", "-bf16", "-bf16-20KBshards")]
    # config.json variants on the tied fp32 weights (DROP removes the key)
    src = os.path.join(a.workdir, "tied-fp32")
    variants = {
        "rope_theta-top-level-only": {"rope_theta": 500.0, "rope_parameters": "DROP"},
        "rope_parameters-wins-over-rope_theta": {"rope_theta": 77.0},
        "rope_parameters-without-theta": {"rope_parameters": {"rope_type": "default"}},
        "sliding-on-all-layers-full": {"use_sliding_window": True, "sliding_window": 4, "layer_types": "DROP"},
        "sliding-on-layer1-slides": {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1,
                                     "layer_types": "DROP"},
        "layer_types-sliding-no-window": {"layer_types": ["full_attention", "sliding_attention"]},
        "torch_dtype-instead-of-dtype": {"dtype": "DROP", "torch_dtype": "float32"},
        # a non-empty rope_scaling (the older key) replaces rope_parameters in transformers 5, even beside it
        "rope_scaling-linear-beside-rope_parameters": {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
        "rope_scaling-theta-beside-rope_parameters": {"rope_scaling": {"rope_type": "default", "rope_theta": 77.0}},
        "rope_scaling-no-theta-top-level-theta": {"rope_scaling": {"rope_type": "default"}, "rope_theta": 77.0},
        "rope_scaling-empty-beside-rope_parameters": {"rope_scaling": {}},
    }
    cfg = json.load(open(os.path.join(src, "config.json")))
    for name, upd in variants.items():
        d = os.path.join(a.workdir, "cfg-" + name); os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(src, "model.safetensors"), d)
        c = dict(cfg); c.update(upd); c = {k: v for k, v in c.items() if v != "DROP"}
        json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=1)
        dirs.append(d)
    bad = 0
    for d in dirs:
        try:
            h = hf_loss(d, a.shard, a.seq_len, a.batch)
        except Exception as e:  # transformers refuses or fails on the config
            h = "transformers error: " + str(e).splitlines()[0][:80]
        q = pt_loss(a.portatrain, d, a.shard, a.seq_len, a.batch)
        if isinstance(h, float) and isinstance(q, float):
            rel = abs(h - q) / abs(h); bad += rel > 1e-6
            print(f"{os.path.basename(d)}: transformers {h:.9f} portatrain {q:.9f} rel {rel:.1e}")
        else:
            print(f"{os.path.basename(d)}: transformers {h} | portatrain {q}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
