#!/usr/bin/env python3
"""Golden fixtures for portatrain's Qwen3-MoE path, from Hugging Face transformers.

Regenerate (from the repository root):

    /work/venv-tt/bin/python tools/hf_moe_golden.py              # tests/fixtures/golden_moe/{norm,nonorm,bf16}/
    /work/venv-tt/bin/python tools/hf_moe_golden.py --out /tmp/g # somewhere else (e.g. to diff)

Needs torch, transformers (Qwen3MoeForCausalLM) and safetensors; the committed fixtures were made with the
versions recorded in each variant's versions.json, on the CPU with one thread and deterministic algorithms.

Variants  "norm" (norm_topk_prob true, seed 4321) and "nonorm" (norm_topk_prob false, seed 8765); "bf16": the
          "norm" model loaded with from_pretrained(dtype=torch.bfloat16) (its weights rounded to bf16, nearest
          even), the default sdpa attention and experts_implementation "eager" (the per-expert loop with
          index_add_ into a bf16 zeros tensor); bf16/ holds expected.safetensors only (the model is norm/'s).
Config    Qwen3MoeConfig: vocab_size 128, hidden_size 32, intermediate_size 48 (the dense layer),
          moe_intermediate_size 16, num_hidden_layers 3, mlp_only_layers [0] (layer 0 dense, layers 1 and 2
          sparse), num_experts 8, num_experts_per_tok 2, output_router_logits true, router_aux_loss_coef 0.1
          (large, so that the aux term's gradient is well above the tolerance), num_attention_heads 4,
          num_key_value_heads 2, head_dim 8, rope theta 1e6, max_position_embeddings 64, untied lm_head,
          eager attention, float32.
Weights   torch.manual_seed(seed), then in named_parameters() order: 1-D norm weights <- 1 + 0.1*normal;
          router weights (mlp.gate.weight) <- normal(0, 0.5) (clear top-k gaps, no near ties); every other
          weight (the fused experts' gate_up_proj / down_proj included) <- normal(0, 0.08). Saved with
          save_pretrained: transformers 5 writes the experts per expert
          (model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight), the layout portatrain reads and writes.
expected.safetensors (F32 unless noted):
  input_ids I32 [2,16]  uniform tokens (numpy default_rng(seed)).
  labels    I32 [2,16]  uniform tokens with labels[0,2:5] = -100 and labels[1,15] = -100 (28 counted).
  logits    [2,16,128]  model(input_ids).logits.
  ce        [1]         F.cross_entropy(logits, labels, ignore_index=-100) (mean over the 28 labels).
  aux       [1]         the model output's aux_loss (load_balancing_loss_func, no attention mask).
  loss      [1]         ce + router_aux_loss_coef * aux (HF's loss with labels).
  grad.<name>           d loss / d param for every name of model.safetensors (fused expert gradients split
                        per expert: gate_up_proj[e][:16] -> gate_proj, [16:] -> up_proj).
bf16/expected.safetensors: the same names from the bf16 model (logits the bf16 values as F32; ce, aux and loss
  HF's fp32 reductions of them; every gradient a bf16 tensor, as F32), plus logits_fp32 (norm/'s logits) and
  logits_eager (the bf16 model with eager attention: how far HF's own two attention paths are apart), and
  block.*: layer 1's sparse block alone in bf16 on x [32,32] (randn, generator seed 99, rounded) with
  d(out) dy = bf16(0.01 randn): block.y, block.dx, block.grad.gate (router) and block.grad.E.{gate,up,down}_proj.
"""
import argparse
import json
import os

import numpy as np
import torch
import torch.nn.functional as F
import safetensors
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

B, T, V, I_MOE, COEF = 2, 16, 128, 16, 0.1


def make_model(norm, seed):
    cfg = Qwen3MoeConfig(vocab_size=V, hidden_size=32, intermediate_size=48, moe_intermediate_size=I_MOE,
                         num_hidden_layers=3, mlp_only_layers=[0], decoder_sparse_step=1, num_experts=8,
                         num_experts_per_tok=2, norm_topk_prob=norm, output_router_logits=True,
                         router_aux_loss_coef=COEF, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                         rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                         max_position_embeddings=64, tie_word_embeddings=False, attention_bias=False,
                         use_sliding_window=False, initializer_range=0.02)
    cfg._attn_implementation = "eager"
    model = Qwen3MoeForCausalLM(cfg).float()
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif name.endswith("mlp.gate.weight"):
                p.copy_(0.5 * torch.randn_like(p))
            else:
                p.copy_(0.08 * torch.randn_like(p))
    return model


def per_expert_grads(model):
    out = {}
    for name, p in model.named_parameters():
        g = p.grad.detach().clone().contiguous()
        if name.endswith("experts.gate_up_proj"):
            base = name[: -len("gate_up_proj")]
            for e in range(g.shape[0]):
                out[f"grad.{base}{e}.gate_proj.weight"] = g[e, :I_MOE].contiguous()
                out[f"grad.{base}{e}.up_proj.weight"] = g[e, I_MOE:].contiguous()
        elif name.endswith("experts.down_proj"):
            base = name[: -len("down_proj")]
            for e in range(g.shape[0]):
                out[f"grad.{base}{e}.down_proj.weight"] = g[e].contiguous()
        else:
            out[f"grad.{name}"] = g
    return out


def run_variant(name, norm, seed, outdir):
    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    model = make_model(norm, seed)
    model.save_pretrained(d, safe_serialization=True)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(d, extra)):
            os.remove(os.path.join(d, extra))
    rng = np.random.default_rng(seed)
    ids = torch.tensor(rng.integers(0, V, size=(B, T)), dtype=torch.long)
    labels = torch.tensor(rng.integers(0, V, size=(B, T)), dtype=torch.long)
    labels[0, 2:5] = -100
    labels[1, 15] = -100
    model.train()
    model.zero_grad()
    out = model(input_ids=ids, output_router_logits=True)
    ce = F.cross_entropy(out.logits.view(-1, V), labels.view(-1), ignore_index=-100)
    loss = ce + COEF * out.aux_loss
    loss.backward()
    exp = {"input_ids": ids.to(torch.int32), "labels": labels.to(torch.int32),
           "logits": out.logits.detach().contiguous(), "ce": ce.detach().reshape(1),
           "aux": out.aux_loss.detach().float().reshape(1), "loss": loss.detach().reshape(1)}
    grads = per_expert_grads(model)
    with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
        saved = set(f.keys())
    assert saved == {k[len("grad."):] for k in grads}, "state-dict names differ from the gradients' names"
    exp.update(grads)
    save_file(exp, os.path.join(d, "expected.safetensors"))
    with open(os.path.join(d, "versions.json"), "w") as f:
        json.dump({"torch": torch.__version__, "transformers": transformers.__version__,
                   "safetensors": safetensors.__version__, "numpy": np.__version__}, f, indent=2)
    print(f"[{name}] ce {ce.item():.8f} aux {out.aux_loss.item():.8f} loss {loss.item():.8f}")


def run_bf16(outdir):
    """The "norm" model in bf16 on the same inputs (norm/ must have been written first)."""
    src, d = os.path.join(outdir, "norm"), os.path.join(outdir, "bf16")
    os.makedirs(d, exist_ok=True)
    model = Qwen3MoeForCausalLM.from_pretrained(src, dtype=torch.bfloat16, attn_implementation="sdpa",
                                                experts_implementation="eager")
    assert model.config._experts_implementation == "eager"
    with safe_open(os.path.join(src, "expected.safetensors"), "pt") as f:
        ids, labels = f.get_tensor("input_ids").long(), f.get_tensor("labels").long()
        logits_fp32 = f.get_tensor("logits")
    model.train()
    model.zero_grad()
    out = model(input_ids=ids, output_router_logits=True)
    ce = F.cross_entropy(out.logits.float().view(-1, V), labels.view(-1), ignore_index=-100)
    loss = ce + COEF * out.aux_loss.float()
    loss.backward()
    exp = {"input_ids": ids.to(torch.int32), "labels": labels.to(torch.int32),
           "logits": out.logits.detach().float().contiguous(), "logits_fp32": logits_fp32,
           "ce": ce.detach().reshape(1), "aux": out.aux_loss.detach().float().reshape(1),
           "loss": loss.detach().float().reshape(1)}
    exp.update({k: v.float() for k, v in per_expert_grads(model).items()})
    with open(os.path.join(d, "versions.json"), "w") as f:
        json.dump({"torch": torch.__version__, "transformers": transformers.__version__,
                   "safetensors": safetensors.__version__, "numpy": np.__version__}, f, indent=2)
    eager = Qwen3MoeForCausalLM.from_pretrained(src, dtype=torch.bfloat16, attn_implementation="eager",
                                                experts_implementation="eager")
    with torch.no_grad():
        exp["logits_eager"] = eager(input_ids=ids).logits.float().contiguous()
    save_file(exp, os.path.join(d, "expected.safetensors"))
    # The sparse block of layer 1 alone on fixed bf16 inputs: routing, experts and combine without the
    # attention's rounding noise upstream (no load-balancing term: it lives at the model level).
    block = Qwen3MoeForCausalLM.from_pretrained(src, dtype=torch.bfloat16, experts_implementation="eager")
    block = block.model.layers[1].mlp
    g = torch.Generator().manual_seed(99)
    x = torch.randn(B * T, 32, generator=g).to(torch.bfloat16).requires_grad_(True)
    dy = (0.01 * torch.randn(B * T, 32, generator=g)).to(torch.bfloat16)
    y = block(x.view(B, T, 32)).view(B * T, 32)
    y.backward(dy)
    exp.update({"block.x": x.detach().float(), "block.dy": dy.float(), "block.y": y.detach().float(),
                "block.dx": x.grad.float(), "block.grad.gate": block.gate.weight.grad.float().contiguous()})
    for e in range(8):
        gu = block.experts.gate_up_proj.grad[e].float()
        exp[f"block.grad.{e}.gate_proj"] = gu[:I_MOE].contiguous()
        exp[f"block.grad.{e}.up_proj"] = gu[I_MOE:].contiguous()
        exp[f"block.grad.{e}.down_proj"] = block.experts.down_proj.grad[e].float().contiguous()
    save_file(exp, os.path.join(d, "expected.safetensors"))
    err = (out.logits.float() - logits_fp32).abs()
    print(f"[bf16] ce {ce.item():.8f} aux {out.aux_loss.item():.8f} loss {loss.item():.8f} "
          f"logits vs fp32 max {err.max().item():.4f} mean {err.mean().item():.5f}, sdpa vs eager max "
          f"{(out.logits.float() - exp['logits_eager']).abs().max().item():.4f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "golden_moe"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    run_variant("norm", True, 4321, args.out)
    run_variant("nonorm", False, 8765, args.out)
    run_bf16(args.out)


if __name__ == "__main__":
    main()
