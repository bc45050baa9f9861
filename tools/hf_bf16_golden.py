#!/usr/bin/env python3
"""bf16 golden fixtures: Hugging Face transformers' bf16 Qwen3 forward on the
golden models of tools/hf_golden.py (tests/fixtures/golden/{tied,untied}).

    python3 tools/hf_bf16_golden.py          # writes tests/fixtures/golden/<variant>/bf16.safetensors

For each variant: Qwen3ForCausalLM.from_pretrained(dir, dtype=torch.bfloat16)
(the fp32 weights rounded to bf16, nearest-even), on the CPU, one thread, for
attn_implementation "sdpa" (transformers' default) and "eager":
  input_ids  I32 [2,16]   = expected.safetensors input_ids
  labels     I32 [2,16]   = expected.safetensors labels (-100 = ignored)
  logits_sdpa, logits_eager  F32 [2,16,128]  the bf16 logits, widened exactly
  loss_sdpa, loss_eager      F32 [1]  F.cross_entropy(logits.float(), labels,
                                       ignore_index=-100), HF's loss path
  logits_fp32  F32 [2,16,128]  the same model in float32 (sdpa), for the
                               bf16-vs-fp32 gap the C test reports.
Versions used are written into bf16.json next to it. Needs torch,
transformers, safetensors (pip-installed if missing).
"""
import importlib
import json
import os
import subprocess
import sys


def _ensure_deps():
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        import safetensors  # noqa: F401
    except ImportError:
        subprocess.check_call([sys.executable, "-m", "pip", "install", "torch", "transformers", "safetensors"])
        importlib.invalidate_caches()


_ensure_deps()
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import safetensors  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import Qwen3ForCausalLM  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "golden")


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for variant in ("tied", "untied"):
        d = os.path.join(ROOT, variant)
        ex = load_file(os.path.join(d, "expected.safetensors"))
        ids, labels = ex["input_ids"].long(), ex["labels"].long()
        out = {"input_ids": ex["input_ids"], "labels": ex["labels"]}
        with torch.no_grad():
            for impl in ("sdpa", "eager"):
                m = Qwen3ForCausalLM.from_pretrained(d, dtype=torch.bfloat16, attn_implementation=impl).eval()
                logits = m(input_ids=ids).logits
                assert logits.dtype == torch.bfloat16
                V = logits.shape[-1]
                loss = F.cross_entropy(logits.float().view(-1, V), labels.view(-1), ignore_index=-100)
                out["logits_" + impl] = logits.float().contiguous()
                out["loss_" + impl] = loss.reshape(1).float()
            m = Qwen3ForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="sdpa").eval()
            out["logits_fp32"] = m(input_ids=ids).logits.float().contiguous()
        save_file(out, os.path.join(d, "bf16.safetensors"))
        diff = (out["logits_sdpa"] - out["logits_eager"]).abs().max().item()
        gap = (out["logits_sdpa"] - out["logits_fp32"]).abs().max().item()
        print(f"{variant}: loss sdpa {out['loss_sdpa'].item():.6f} eager {out['loss_eager'].item():.6f}; "
              f"max |sdpa - eager| {diff:.4g}, max |bf16 - fp32| {gap:.4g}, "
              f"max |logit| {out['logits_fp32'].abs().max().item():.4g}")
        with open(os.path.join(d, "bf16.json"), "w") as f:
            json.dump({"torch": torch.__version__, "transformers": transformers.__version__,
                       "safetensors": safetensors.__version__, "threads": 1}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
