#!/usr/bin/env python3
"""Generate Hugging Face transformers golden fixtures for portatrain's Qwen3 path.

Regenerate (from the repository root):

    python3 tools/hf_golden.py                 # writes tests/fixtures/golden/{tied,untied}/
    python3 tools/hf_golden.py --out /tmp/g    # write somewhere else (e.g. to diff)

If torch / transformers / safetensors are missing the script runs
`pip install torch transformers safetensors` itself.  Fixtures committed in the
repository were produced with torch 2.15.0+cu132 (run on CPU), transformers
5.24.0, safetensors 0.8.0, numpy 2.4.6; the versions actually used are also
recorded in each variant's train_args.json.  Everything runs on the CPU with
torch.set_num_threads(1) and deterministic algorithms, so a rerun with the same
versions on the same machine is bitwise identical (checked: sha256 of
expected.safetensors identical over two runs).

Exact semantics (the C tests are written against these):

Variants  "tied" (tie_word_embeddings=true, weight seed 1234) and "untied"
          (tie_word_embeddings=false, weight seed 5678).
Config    transformers Qwen3Config: vocab_size 128, hidden_size 64,
          intermediate_size 96, num_hidden_layers 2, num_attention_heads 4,
          num_key_value_heads 2, head_dim 24 (!= hidden/heads on purpose),
          rms_norm_eps 1e-6, rope theta 1e6 (transformers 5 writes it as
          "rope_parameters": {"rope_theta": 1e6, "rope_type": "default"};
          older versions as "rope_theta"), max_position_embeddings 64,
          attention_bias false, use_sliding_window false,
          initializer_range 0.02, dtype float32.  Model = Qwen3ForCausalLM(config),
          attn_implementation "eager", float32.
Weights   After constructing the model: torch.manual_seed(seed), then for each
          parameter in model.named_parameters() order (tied lm_head is the same
          tensor as model.embed_tokens.weight and is listed once): 1-D norm
          weights (input_layernorm, post_attention_layernorm, q_norm, k_norm,
          model.norm) <- 1 + 0.1*normal(0,1); every Linear/Embedding weight <-
          normal(0, 0.08).  Saved with model.save_pretrained(dir,
          safe_serialization=True) -> config.json + model.safetensors
          (+ generation_config.json if transformers writes one); the tied model's
          file has no lm_head.weight.
Data      data.bin (portatrain token shard v1): 256 little-endian int32 header,
          header[0]=20241202, header[1]=1, header[2]=ntokens (641), header[3]=4,
          header[4]=vocab (128), rest 0; then ntokens little-endian uint32 ids.
          Tokens come from numpy.random.default_rng(99): an order-1 Markov chain
          where each token has 3 fixed likely successors (probabilities .5/.25/.15)
          and with probability 0.1 the next token is uniform in [0,128);
          first token uniform.  Same data.bin in both variants.
Windows   T = 16; window k = tokens[16k : 16k+17]; inputs = w[0:16], labels = w[1:17].
expected.safetensors (F32 unless noted):
  input_ids I32 [2,16]  windows 0,1 inputs.
  labels    I32 [2,16]  their labels, with labels[0,3:6] = -100 and labels[1,15] = -100.
  logits    [2,16,128]  model(input_ids).logits of the initial (saved) model.
  loss      [1]         F.cross_entropy(logits.view(-1,V), labels.view(-1), ignore_index=-100)
                        (mean over the 28 non-ignored labels).
  grad.<name>           d loss / d param for every state-dict name of model.safetensors
                        (tied: no lm_head; the embedding grad includes the lm_head part).
  train_loss [10], train_grad_norm [10], train_lr [10], final.<name>: training run from
                        the initial weights, 10 optimizer steps:
      step s uses windows 4s..4s+3 (labels unmasked); micro-batch 0 = windows 4s,4s+1,
      micro-batch 1 = windows 4s+2,4s+3 (per_device_train_batch_size 2,
      gradient_accumulation_steps 2).  For each micro-batch:
      loss_mb = F.cross_entropy(logits, labels, reduction="sum") / 64 (64 = label tokens
      in the whole step); loss_mb.backward() (grads accumulate).  train_loss[s] =
      sum of the two loss_mb (before the update).  train_grad_norm[s] = total_norm =
      torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5) (the norm BEFORE
      clipping; clipping scales grads by 0.5/(total_norm+1e-6) when total_norm > 0.5).
      Then optimizer.step(), scheduler.step(), zero_grad().
      Optimizer: torch.optim.AdamW(groups, lr=1e-2, betas=(0.9,0.95), eps=1e-8,
      foreach=False); weight_decay 0.1 for every parameter with ndim >= 2 (all
      Linear/Embedding weights, incl. embedding), 0.0 for the 1-D norm weights.
      Scheduler: transformers.get_cosine_schedule_with_warmup(opt, 3, 10):
      lr(s) = 1e-2 * (s/3 for s<3, else 0.5*(1+cos(pi*(s-3)/7))).
      train_lr[s] = opt.param_groups[0]['lr'] used by step s's optimizer.step()
      (0 at step 0: HF warmup behaviour), stored as F32 (the Python float rounded).
      train_loss / train_grad_norm are likewise F32.  With these settings clipping
      triggers on all 10 steps (norms 2-3.8 > 0.5).
      final.<name> = the weights after the 10 steps.
Total fixture size is about 2.1 MB (mostly grad.* and final.*, 2 x ~85k floats per variant).
train_args.json: the hyperparameters above plus torch/transformers/safetensors versions.
"""

import argparse
import hashlib
import importlib
import json
import os
import struct
import subprocess
import sys


def _ensure_deps():
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        import safetensors  # noqa: F401
        import numpy  # noqa: F401
    except ImportError:
        subprocess.check_call([sys.executable, "-m", "pip", "install",
                               "torch", "transformers", "safetensors", "numpy"])
        importlib.invalidate_caches()


_ensure_deps()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import safetensors  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import save_file, load_file  # noqa: E402
from transformers import Qwen3Config, Qwen3ForCausalLM, get_cosine_schedule_with_warmup  # noqa: E402

VOCAB = 128
T = 16
NWIN = 40
NTOK = NWIN * T + 1
DATA_SEED = 99
SEEDS = {"tied": 1234, "untied": 5678}

TRAIN = dict(
    learning_rate=1e-2,
    warmup_steps=3,
    lr_scheduler_type="cosine",
    max_steps=10,
    weight_decay=0.1,
    adam_beta1=0.9,
    adam_beta2=0.95,
    adam_epsilon=1e-8,
    max_grad_norm=0.5,
    per_device_train_batch_size=2,
    gradient_accumulation_steps=2,
    seq_len=T,
)


def make_config(tied):
    kw = dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=24,
        rms_norm_eps=1e-6,
        max_position_embeddings=64,
        attention_bias=False,
        use_sliding_window=False,
        initializer_range=0.02,
        tie_word_embeddings=tied,
    )
    major = int(transformers.__version__.split(".")[0])
    if major >= 5:
        kw["rope_parameters"] = {"rope_theta": 1000000.0, "rope_type": "default"}
        kw["dtype"] = "float32"
    else:
        kw["rope_theta"] = 1000000.0
        kw["torch_dtype"] = "float32"
    return Qwen3Config(**kw)


def build_model(config):
    try:
        model = Qwen3ForCausalLM(config, attn_implementation="eager")
    except TypeError:
        config._attn_implementation = "eager"
        model = Qwen3ForCausalLM(config)
    if getattr(model.config, "_attn_implementation", "eager") != "eager":
        model.set_attn_implementation("eager")
    assert model.config._attn_implementation == "eager", model.config._attn_implementation
    return model.to(torch.float32)


def is_norm(name):
    return name.endswith("norm.weight")  # input_layernorm, post_attention_layernorm, q_norm, k_norm, model.norm


def init_weights(model, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if is_norm(name):
                assert p.ndim == 1, name
                p.copy_(1.0 + 0.1 * torch.randn(p.shape))
            else:
                assert p.ndim == 2, name
                p.copy_(torch.randn(p.shape) * 0.08)


def make_tokens():
    rng = np.random.default_rng(DATA_SEED)
    succ = rng.integers(0, VOCAB, size=(VOCAB, 3))
    cum = np.array([0.5, 0.75, 0.9])
    toks = np.empty(NTOK, dtype=np.uint32)
    toks[0] = rng.integers(0, VOCAB)
    for i in range(1, NTOK):
        u = rng.random()
        j = int(np.searchsorted(cum, u, side="right"))
        if j < 3:
            toks[i] = succ[toks[i - 1], j]
        else:
            toks[i] = rng.integers(0, VOCAB)
    return toks


def write_shard(path, toks):
    header = [0] * 256
    header[0] = 20241202
    header[1] = 1
    header[2] = len(toks)
    header[3] = 4
    header[4] = VOCAB
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(toks.astype("<u4").tobytes())


def window(toks, k):
    w = torch.from_numpy(toks[k * T: k * T + T + 1].astype(np.int64))
    return w[:-1], w[1:]


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def run_variant(name, outdir, toks):
    tied = name == "tied"
    seed = SEEDS[name]
    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    print(f"=== {name} (tie_word_embeddings={tied}, seed={seed}) -> {d}")

    model = build_model(make_config(tied))
    init_weights(model, seed)
    if tied:
        assert model.lm_head.weight is model.model.embed_tokens.weight
    else:
        assert model.lm_head.weight is not model.model.embed_tokens.weight
    model.save_pretrained(d, safe_serialization=True)
    print("files written by save_pretrained:", sorted(os.listdir(d)))

    saved = load_file(os.path.join(d, "model.safetensors"))
    names = list(saved.keys())
    pnames = [n for n, _ in model.named_parameters()]
    assert sorted(names) == sorted(pnames), (names, pnames)
    if tied:
        assert "lm_head.weight" not in names
    print("state-dict names in model.safetensors:")
    for n in pnames:
        print(f"  {n} {list(saved[n].shape)}")
    with open(os.path.join(d, "config.json")) as f:
        print("config.json:", json.dumps(json.load(f), sort_keys=True))

    write_shard(os.path.join(d, "data.bin"), toks)

    # --- forward / backward on 2 windows with masked labels ---
    model.eval()
    ins, labs = zip(*(window(toks, k) for k in (0, 1)))
    input_ids = torch.stack(ins)
    labels = torch.stack(labs).clone()
    labels[0, 3:6] = -100
    labels[1, 15] = -100
    params = dict(model.named_parameters())
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=input_ids).logits
    loss = F.cross_entropy(logits.view(-1, VOCAB).float(), labels.view(-1), ignore_index=-100)
    loss.backward()
    out = {
        "input_ids": input_ids.to(torch.int32).contiguous(),
        "labels": labels.to(torch.int32).contiguous(),
        "logits": logits.detach().float().contiguous(),
        "loss": loss.detach().float().reshape(1).contiguous(),
    }
    for n in pnames:
        out["grad." + n] = params[n].grad.detach().float().clone().contiguous()
    print(f"masked 2-window loss = {loss.item():.7f}")

    # --- reload check ---
    try:
        re = Qwen3ForCausalLM.from_pretrained(d, attn_implementation="eager", dtype=torch.float32)
    except TypeError:
        re = Qwen3ForCausalLM.from_pretrained(d, attn_implementation="eager", torch_dtype=torch.float32)
    re.eval()
    with torch.no_grad():
        rl = re(input_ids=input_ids).logits
    same = torch.equal(rl, out["logits"])
    print(f"reload check: from_pretrained logits identical = {same} "
          f"(max abs diff {(rl - out['logits']).abs().max().item():.3e})")
    assert same, "reloaded model gives different logits"
    del re

    # --- training ---
    model.zero_grad(set_to_none=True)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    nodecay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": TRAIN["weight_decay"]},
         {"params": nodecay, "weight_decay": 0.0}],
        lr=TRAIN["learning_rate"], betas=(TRAIN["adam_beta1"], TRAIN["adam_beta2"]),
        eps=TRAIN["adam_epsilon"], foreach=False)
    sched = get_cosine_schedule_with_warmup(opt, num_warmup_steps=TRAIN["warmup_steps"],
                                            num_training_steps=TRAIN["max_steps"])
    bs, ga = TRAIN["per_device_train_batch_size"], TRAIN["gradient_accumulation_steps"]
    ntok_step = bs * ga * T
    tl, tn, tlr = [], [], []
    clipped = 0
    for s in range(TRAIN["max_steps"]):
        step_loss = 0.0
        for mb in range(ga):
            ks = [s * bs * ga + mb * bs + i for i in range(bs)]
            ins, labs = zip(*(window(toks, k) for k in ks))
            x, y = torch.stack(ins), torch.stack(labs)
            lg = model(input_ids=x).logits
            lmb = F.cross_entropy(lg.view(-1, VOCAB).float(), y.view(-1), reduction="sum") / ntok_step
            lmb.backward()
            step_loss += lmb.detach()
        total_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), TRAIN["max_grad_norm"])
        lr = opt.param_groups[0]["lr"]
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        c = total_norm.item() > TRAIN["max_grad_norm"]
        clipped += c
        tl.append(float(step_loss))
        tn.append(total_norm.item())
        tlr.append(lr)
        print(f"step {s}: loss {float(step_loss):.7f} grad_norm {total_norm.item():.7f} "
              f"lr {lr:.8g} clipped {c}")
    print(f"clipping triggered on {clipped}/{TRAIN['max_steps']} steps")
    assert clipped > 0, "clipping never triggered; lower max_grad_norm"
    out["train_loss"] = torch.tensor(tl, dtype=torch.float32)
    out["train_grad_norm"] = torch.tensor(tn, dtype=torch.float32)
    out["train_lr"] = torch.tensor(tlr, dtype=torch.float32)
    for n in pnames:
        out["final." + n] = params[n].detach().float().clone().contiguous()

    ep = os.path.join(d, "expected.safetensors")
    save_file(out, ep)

    args = dict(TRAIN)
    args.update(
        variant=name,
        tie_word_embeddings=tied,
        weight_seed=seed,
        data_seed=DATA_SEED,
        seeds={"weights": seed, "data": DATA_SEED},
        num_tokens=NTOK,
        windows_per_step=bs * ga,
        label_tokens_per_step=ntok_step,
        optimizer="torch.optim.AdamW(foreach=False); weight_decay on ndim>=2 params, 0 on 1-D norm weights",
        attn_implementation="eager",
        dtype="float32",
        torch_version=torch.__version__,
        transformers_version=transformers.__version__,
        safetensors_version=safetensors.__version__,
        numpy_version=np.__version__,
    )
    with open(os.path.join(d, "train_args.json"), "w") as f:
        json.dump(args, f, indent=2, sort_keys=True)
        f.write("\n")
    print(f"wrote {ep} sha256 {sha256(ep)}")
    for fn in sorted(os.listdir(d)):
        print(f"  {fn}: {os.path.getsize(os.path.join(d, fn))} bytes")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "golden"))
    ap.add_argument("--variant", choices=["tied", "untied", "both"], default="both")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    print(f"torch {torch.__version__} transformers {transformers.__version__} "
          f"safetensors {safetensors.__version__} numpy {np.__version__}")
    toks = make_tokens()
    for v in (["tied", "untied"] if a.variant == "both" else [a.variant]):
        run_variant(v, os.path.normpath(a.out), toks)


if __name__ == "__main__":
    main()
