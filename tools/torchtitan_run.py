#!/usr/bin/env python3
"""Run TorchTitan (0.3.0, from PyPI) on CPU with a Qwen3 model that matches a portatrain config, and print its
real console log: the peer whose logs `portatrain compare` reads (docs/COMPARE.md, "TorchTitan console logs").

TorchTitan has no CPU switch. Five things stop it there; this launcher passes each from outside, without
editing the installed package:
  1. the device type falls back to "cuda" when no GPU is found: torch reports "cpu" as the available device,
     so TorchTitan picks "cpu" (and gloo);
  2. the memory monitor calls torch.cpu functions that do not exist: stubs report no memory (logs -0.00GiB);
  3. FlexAttention has no backward on CPU: the same block-causal mask (BlockMask.mask_mod) is applied through
     scaled_dot_product_attention;
  4. a barrier passes device_ids=['cpu']: non-integer device ids are dropped;
  5. FSDP over gloo (two ranks) needs ReduceOp.PREMUL_SUM, which gloo lacks: FSDP modules reduce with a plain
     sum (set_force_sum_reduction_for_comms) and divide afterwards.

The model: --model is a `portatrain init` directory (config.json + model.safetensors); its weights are the
initial weights (--checkpoint.initial-load-in-hf), its config.json sets the layer sizes. --tokenizer is a
directory with tokenizer.json and tokenizer_config.json. --data is a JSON Lines file with a "text" field per
line, or a plain text file (one document per line). Anything after `--` goes to TorchTitan as it is.

The fixtures in tests/fixtures/torchtitan/ were made with torch 2.15.0, torchtitan 0.3.0 on a 2-core CPU
(python3 -m venv /work/venv-tt && /work/venv-tt/bin/pip install torch==2.15.0 torchtitan==0.3.0), with
  build/portatrain init --config configs/tiny.json --output-dir /tmp/tt/m --seed 42
  R="/work/venv-tt/bin/python tools/torchtitan_run.py --model /tmp/tt/m --tokenizer data/demo/qwen3-tokenizer
     --data data/demo/corpus/train.jsonl"
and, each into tests/fixtures/torchtitan/NAME.log (`> NAME.log 2>&1`):
  seed42_a, seed42_b: $R --out /tmp/tt/a --steps 12 (then --out /tmp/tt/b; the same run twice)
  lr_changed:         $R --out /tmp/tt/c --steps 12 --lr 4e-3
  logfreq_val:        $R --out /tmp/tt/d --steps 12 --log-freq 3 --val-freq 6 --val-steps 2
  nonfinite:          $R --out /tmp/tt/e --steps 12 --lr 1e6
  resumed:            $R --out /tmp/tt/g --steps 12 --ckpt-interval 4 --stop-after 6, then the same without
                      --stop-after, appended to the same file (the second attempt resumes from step 4)
Two ranks (FSDP2 over gloo): --nproc 2 --batch 2 (tests/fixtures/torchtitan_docs/make.sh: one and two ranks on
400 documents, which portatrain replays with --data-mode documents; docs/COMPARE.md).
(--seed 42 and the other defaults: seq-len 64, batch 4, lr 3e-3, warm-up 2 then linear decay over 80% of the steps
(decay_ratio 0.8 of TorchTitan's qwen3 debug recipe), wd 0.1 on every parameter, betas 0.9/0.95, max-norm 1.0,
log-freq 1.)
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="portatrain init dir: config.json + model.safetensors")
    p.add_argument("--tokenizer", required=True, help="dir with tokenizer.json and tokenizer_config.json")
    p.add_argument("--data", required=True, help="JSON Lines with a 'text' field, or plain text")
    p.add_argument("--out", required=True, help="TorchTitan's dump folder (assets, checkpoints)")
    p.add_argument("--nproc", type=int, default=1)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch", type=int, default=4, help="rows per rank per step")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--wd", type=float, default=0.1)
    p.add_argument("--max-norm", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--log-freq", type=int, default=1)
    p.add_argument("--val-freq", type=int, default=0, help="validate every N steps (0: no validation)")
    p.add_argument("--val-steps", type=int, default=2)
    p.add_argument("--ckpt-interval", type=int, default=0, help="save a DCP checkpoint every N steps (0: none)")
    p.add_argument("--stop-after", type=int, default=0, help="end the run after this step (a stopped attempt)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("rest", nargs=argparse.REMAINDER, help="-- then TorchTitan flags as they are")
    return p.parse_args(argv)


def assets_dir(a):
    """TorchTitan reads the tokenizer and the HF weights from one directory: link both there."""
    d = os.path.join(a.out, "assets")
    os.makedirs(d, exist_ok=True)
    for src, names in ((a.tokenizer, ("tokenizer.json", "tokenizer_config.json")),
                       (a.model, ("config.json", "model.safetensors"))):
        for n in names:
            dst = os.path.join(d, n)
            if not os.path.exists(os.path.join(src, n)):
                sys.exit(f"torchtitan_run: {os.path.join(src, n)}: missing")
            if os.path.lexists(dst):
                os.remove(dst)
            os.symlink(os.path.abspath(os.path.join(src, n)), dst)
    return d


def titan_args(a, assets):
    t = ["--module", "torchtitan_run", "--config", "portatrain_qwen3",
         "--hf-assets-path", assets, "--dump-folder", a.out,
         "--dataloader.dataset", "portatrain_text", "--dataloader.dataset-path", os.path.abspath(a.data),
         "--training.steps", str(a.steps), "--training.seq-len", str(a.seq_len),
         "--training.local-batch-size", str(a.batch), "--training.max-norm", str(a.max_norm),
         "--training.mixed-precision-param", "float32",
         "--optimizer.param-groups.0.optimizer-kwargs.lr", str(a.lr),
         "--optimizer.param-groups.0.optimizer-kwargs.weight-decay", str(a.wd),
         "--lr-scheduler.warmup-steps", str(a.warmup),
         "--debug.seed", str(a.seed), "--metrics.log-freq", str(a.log_freq),
         "--checkpoint.initial-load-path", assets, "--checkpoint.initial-load-in-hf",
         "--checkpoint.folder", "checkpoint", "--checkpoint.enable",
         # the checkpointer is what loads the initial weights; without --ckpt-interval it saves only the last step
         "--checkpoint.interval", str(a.ckpt_interval or a.steps + 1)]
    if a.val_freq:
        t += ["--validator.enable", "--validator.freq", str(a.val_freq), "--validator.steps", str(a.val_steps),
              "--validator.dataloader.dataset", "portatrain_text",
              "--validator.dataloader.dataset-path", os.path.abspath(a.data)]
    rest = a.rest[1:] if a.rest[:1] == ["--"] else a.rest
    return t + rest


def launch(a):
    assets = assets_dir(a)
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    cmd = [torchrun, "--nproc_per_node", str(a.nproc), "--local-ranks-filter", "0", "--role", "rank", "--tee", "3",
           os.path.abspath(__file__), "--worker", "--"] + titan_args(a, assets)
    env = dict(os.environ, PT_TT_MODEL_CONFIG=os.path.join(os.path.abspath(a.model), "config.json"),
               PT_TT_STOP_AFTER=str(a.stop_after), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    sys.stdout.flush()
    return subprocess.call(cmd, env=env)


# ---- inside each rank -----------------------------------------------------------------------------------------

def patch_device():
    import torch
    import torch._utils
    torch._utils._get_available_device_type = lambda: "cpu"  # 1: before torchtitan.tools.utils reads it

    class _Props:
        total_memory = 1 << 30

    cpu = torch.cpu  # 2: what the memory monitor calls
    for name, fn in (("get_device_name", lambda *a, **k: "cpu"), ("get_device_properties", lambda *a, **k: _Props()),
                     ("memory_stats", lambda *a, **k: {}), ("reset_peak_memory_stats", lambda *a, **k: None),
                     ("empty_cache", lambda *a, **k: None)):
        if not hasattr(cpu, name):
            setattr(cpu, name, fn)
    barrier = torch.distributed.barrier  # 4

    def barrier_int_ids(*args, device_ids=None, **kw):
        if device_ids is not None:
            device_ids = [d for d in device_ids if isinstance(d, int)] or None
        return barrier(*args, device_ids=device_ids, **kw)
    torch.distributed.barrier = barrier_int_ids


def sdpa_block_mask(q, k, v, *, score_mod, block_mask, scale, enable_gqa, return_aux, kernel_options):
    """3: FlexAttention's result for a mask-only BlockMask, through SDPA (which has a CPU backward)."""
    import torch
    from torch.nn.attention.flex_attention import AuxOutput, create_mask
    assert score_mod is None and not return_aux.lse and not return_aux.max_scores, "only masks are supported"
    B, _, L, _ = q.shape
    S = k.shape[2]
    mask = create_mask(block_mask.mask_mod, B, 1, L, S, device=q.device)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=enable_gqa)
    return out, AuxOutput()


def patch_attention():
    from torchtitan.models.common.attention import FlexAttention
    FlexAttention.compiled_flex_attn = staticmethod(sdpa_block_mask)


def register_data():
    from datasets import load_dataset
    from torchtitan.hf_datasets import DatasetConfig
    from torchtitan.hf_datasets import text_datasets

    def load(path):
        if path.endswith((".jsonl", ".json")):
            return load_dataset("json", data_files=path, split="train")
        return load_dataset("text", data_files=path, split="train")
    text_datasets.DATASETS["portatrain_text"] = DatasetConfig(path="", loader=load, sample_processor=lambda s: s["text"])


def force_sum_reduction(parallelize):
    """5: gloo has no PREMUL_SUM; FSDP then sums and divides by the world size itself."""
    def wrapped(model, *args, **kw):
        model = parallelize(model, *args, **kw)
        from torch.distributed.fsdp import FSDPModule
        for m in model.modules():
            if isinstance(m, FSDPModule):
                m.set_force_sum_reduction_for_comms(True)
        return model
    return wrapped


def stop_after(step):
    """--stop-after: end the run after that step, as a kill would, so the next attempt resumes."""
    from torchtitan.trainer import Trainer
    orig = Trainer.should_continue_training

    def should_continue(self):
        return orig(self) and self.step < step
    Trainer.should_continue_training = should_continue


def portatrain_qwen3():
    """TorchTitan's Qwen3 recipe (qwen3_debugmodel) with the layer sizes of the portatrain config.json."""
    from torchtitan.models import qwen3 as q
    from torchtitan.models.common import CosSinRoPE, Embedding, Linear
    from torchtitan.models.qwen3.config_registry import qwen3_debugmodel
    with open(os.environ["PT_TT_MODEL_CONFIG"]) as f:
        c = json.load(f)
    dim, hd, V = c["hidden_size"], c["head_dim"], c["vocab_size"]
    norm = q.RMSNorm.Config(normalized_shape=dim, eps=c["rms_norm_eps"], param_init=q._NORM_INIT)
    model = q.Qwen3Model.Config(
        vocab_size=V, dim=dim, norm=norm, enable_weight_tying=c["tie_word_embeddings"],
        tok_embeddings=Embedding.Config(num_embeddings=V, embedding_dim=dim, param_init=q._EMBEDDING_SKIP_INIT),
        lm_head=Linear.Config(in_features=dim, out_features=V, param_init=q._LINEAR_INIT),
        layers=q._build_qwen3_layers(
            n_layers=c["num_hidden_layers"], dim=dim, n_heads=c["num_attention_heads"],
            n_kv_heads=c["num_key_value_heads"], head_dim=hd, hidden_dim=c["intermediate_size"],
            attn_backend="flex", rope=CosSinRoPE.Config(dim=hd, max_seq_len=c["max_position_embeddings"],
                                                        theta=float(c["rope_theta"]))))
    for layer in model.layers:  # the config's eps in every norm, not TorchTitan's 1e-6 default
        layer.attention_norm.eps = layer.ffn_norm.eps = c["rms_norm_eps"]
        layer.attention.qk_norm.eps = c["rms_norm_eps"]
    cfg = qwen3_debugmodel()
    spec = q.model_registry("debugmodel")
    spec.flavor = "portatrain"
    spec.model = model
    spec.parallelize_fn = force_sum_reduction(spec.parallelize_fn)
    cfg.model_spec = spec
    cfg.loss.loss_fn.global_vocab_size = V
    return cfg


def worker(argv):
    sys.path.insert(0, HERE)
    patch_device()
    patch_attention()
    register_data()
    stop = int(os.environ.get("PT_TT_STOP_AFTER", "0"))
    if stop:
        stop_after(stop)
    sys.argv = ["torchtitan.train"] + argv[argv.index("--") + 1:]
    from torchtitan import train
    train.main()


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker(sys.argv[sys.argv.index("--worker") + 1:])
    else:
        sys.exit(launch(parse(sys.argv[1:])))
