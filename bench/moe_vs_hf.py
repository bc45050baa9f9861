#!/usr/bin/env python3
"""Qwen3-MoE training throughput: portatrain `train --backend cpu` vs Hugging Face transformers'
Qwen3MoeForCausalLM (PyTorch eager) on the same CPU.

Both sides train the same Qwen3-MoE config (same weights: transformers loads the directory `portatrain init`
wrote), on the same batch x sequence length of the same random token shard, fp32, AdamW (lr 1e-4, no weight
decay), global-norm clipping at 1.0, the load-balancing loss on (output_router_logits, coefficient 0.001,
Qwen3-MoE's default), the same number of threads (OMP_NUM_THREADS / torch.set_num_threads). Printed per config
and framework: tokens/s and ms/step as the median over repetitions of each repetition's median step time (warm-up
steps skipped), peak RSS, and MFU. Runs alternate between the frameworks so that a noisy machine affects all alike.

The PyTorch side is the strongest set-up found on this CPU: SDPA attention, transformers' experts
implementations "eager" (a loop over the experts hit) and "grouped_mm" (transformers' default:
torch._grouped_mm over the tokens sorted by expert), on jemalloc with freed pages kept (bench/bench_train.py
explains why; --jemalloc or Debian's libjemalloc2), and grouped_mm on glibc malloc too. "vs best torch" is
against the fastest of them. torch.compile is not used by default: the routing's data-dependent shapes make
it recompile (measured on small-moe-v8k: 1509 ms a step against 160 uncompiled); --torch-compile adds the row.

MFU = model FLOPs per second / the machine's sgemm ceiling (bench/sgemm_ceiling.c, as bench_train.py measures
it). Model FLOPs per token: 6 x (attention projections + the top-k experts' SwiGLU + the router + lm_head) +
causal attention 6 x layers x T x heads x head_dim; the experts NOT selected cost no FLOPs.

Configs ("small-moe"): hidden 256, 4 sparse layers, 8/4 heads x 32, 16 experts top-4 of width 128,
norm_topk_prob, batch 4 x seq 128, with Qwen3's vocabulary (151,936: then the lm_head is ~94% of the FLOPs) and
with vocabulary 8,192 ("small-moe-v8k", where the MoE blocks and attention carry most of the step), so that the
MoE path itself is measured too.

Run it with an interpreter that has numpy (the shard writer) and torch + transformers, e.g. a venv's:

  PY=/work/venv-tt/bin/python; $PY bench/moe_vs_hf.py            # both configs, 3 repetitions
  $PY bench/moe_vs_hf.py --configs small-moe-v8k --reps 1 --jemalloc /tmp/jem/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from bench_train import cpu_model, find_jemalloc, run_measured, sgemm_ceiling, step_times, write_shard  # noqa: E402

MOE = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 256,
    "intermediate_size": 768, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
    "head_dim": 32, "moe_intermediate_size": 128, "num_experts": 16, "num_experts_per_tok": 4,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True, "output_router_logits": True,
    "router_aux_loss_coef": 0.001, "rms_norm_eps": 1e-6, "rope_theta": 1000000, "max_position_embeddings": 4096,
    "tie_word_embeddings": False, "attention_bias": False, "hidden_act": "silu", "initializer_range": 0.02,
    "use_sliding_window": False, "torch_dtype": "float32",
}
# name -> (vocab, batch, seq_len, timed steps, warm-up steps)
CONFIGS = {"small-moe": (151936, 4, 128, 6, 2), "small-moe-v8k": (8192, 4, 128, 8, 2)}
# batched_mm (a [tokens x top-k] bmm over gathered expert weights) is left out by default: on the 2-core dev VM it
# took 6453 ms a step on small-moe-v8k against grouped_mm's 160 (--experts-impls adds it back).
EXPERTS_IMPLS = "eager,grouped_mm"


def flops_per_token(c, T):
    C, QD = c["hidden_size"], c["num_attention_heads"] * c["head_dim"]
    KD = c["num_key_value_heads"] * c["head_dim"]
    per_layer = C * QD * 2 + C * KD * 2 + c["num_experts_per_tok"] * 3 * C * c["moe_intermediate_size"] \
        + C * c["num_experts"]
    L = c["num_hidden_layers"]
    return 6.0 * (per_layer * L + c["vocab_size"] * C) + 6.0 * L * T * QD


def torch_worker(a):
    import numpy as np
    import torch
    from transformers import Qwen3MoeForCausalLM

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM.from_pretrained(a.model, dtype=torch.float32, attn_implementation="sdpa",
                                                experts_implementation=a.experts)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    fwd = torch.compile(model) if a.compile else model
    tok = np.memmap(a.data, dtype=np.uint32, mode="r", offset=1024)
    B, T = a.batch, a.seq_len
    with open(a.metrics, "w") as out:
        for step in range(a.steps):
            t0 = time.perf_counter()
            base = step * B * (T + 1)
            rows = np.stack([np.asarray(tok[base + i * (T + 1): base + (i + 1) * (T + 1)], dtype=np.int64)
                             for i in range(B)])
            ids = torch.from_numpy(np.ascontiguousarray(rows[:, :T]))
            tgt = torch.from_numpy(np.ascontiguousarray(rows[:, 1:]))
            # T targets per row, as portatrain's windows (shift_labels: used unshifted); loss includes coef x aux
            loss = fwd(input_ids=ids, labels=ids, shift_labels=tgt).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            dt = time.perf_counter() - t0
            out.write(json.dumps({"step": step + 1, "loss": loss.item(), "step_time_s": dt}) + "\n")
            out.flush()


def torch_setups(a, env):
    """[(framework label, argv suffix, env)] of the PyTorch set-ups that run here (each probed with 2 steps)."""
    jem = a.jemalloc or find_jemalloc()
    tenv = dict(env, LD_PRELOAD=jem, MALLOC_CONF="dirty_decay_ms:-1,muzzy_decay_ms:-1") if jem else env
    if not jem:
        print("note: libjemalloc2 not installed: PyTorch runs on glibc malloc")
    impls = [(f"hf-{e}" + ("+jemalloc" if jem else ""), ["--experts", e]) for e in a.experts_impls.split(",")]
    if a.torch_compile:
        impls.append(("hf-grouped_mm+compile" + ("+jemalloc" if jem else ""), ["--experts", "grouped_mm", "--compile"]))
    out = [(label, extra, tenv) for label, extra in impls]
    if jem:
        out.append(("hf-grouped_mm", ["--experts", "grouped_mm"], env))  # glibc malloc
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--portatrain", default=None, help="portatrain binary (default: build-cpu/ or build/)")
    ap.add_argument("--configs", default="small-moe,small-moe-v8k")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--torch-python", default=sys.executable, help="the interpreter with torch + transformers")
    ap.add_argument("--jemalloc", default=None, help="libjemalloc.so.2 to preload for PyTorch (default: Debian's, "
                    "if installed; e.g. one unpacked with dpkg-deb -x from libjemalloc2's .deb)")
    ap.add_argument("--experts-impls", default=EXPERTS_IMPLS, help="transformers experts_implementation values "
                    "to run (eager, grouped_mm, batched_mm)")
    ap.add_argument("--torch-compile", action="store_true", help="also a torch.compile(model) row")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    for k in ("--model", "--data", "--metrics", "--experts"):
        ap.add_argument(k, help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--seq-len", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--compile", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_worker:
        return torch_worker(a)
    exe = a.portatrain or next((os.path.join(ROOT, c) for c in ("build-cpu/portatrain", "build/portatrain")
                                if os.path.exists(os.path.join(ROOT, c))), None)
    if not exe or not os.path.exists(exe):
        sys.exit("portatrain binary not found: build it or pass --portatrain")
    tv = subprocess.run([a.torch_python, "-c", "import torch, transformers; print(torch.__version__, "
                         "transformers.__version__)"], capture_output=True, text=True)
    if tv.returncode != 0:
        sys.exit(f"--torch-python {a.torch_python}: cannot import torch and transformers")
    tmp = tempfile.mkdtemp(prefix="pt-moe-bench-")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS="1")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; load average {os.getloadavg()[0]:.2f} "
          f"{os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    print(f"cpu: {cpu_model()}, {os.cpu_count()} logical CPUs; threads used: {a.threads}")
    print(f"portatrain: {exe}; torch, transformers: {tv.stdout.strip()} ({a.torch_python})")
    ceiling = sgemm_ceiling(a.threads, tmp)
    print(f"sgemm ceiling ({a.threads} threads): {ceiling / 1e9:.1f} GFLOP/s\n")
    setups = torch_setups(a, env)
    results = []
    for name in a.configs.split(","):
        V, B, T, steps, warm = CONFIGS[name]
        cfg = dict(MOE, vocab_size=V)
        cdir = os.path.join(tmp, name)
        os.makedirs(cdir)
        json.dump(cfg, open(os.path.join(cdir, "config.json"), "w"), indent=2)
        model = os.path.join(cdir, "model")
        subprocess.run([exe, "init", "--config", os.path.join(cdir, "config.json"), "--output-dir", model,
                        "--seed", "42"], check=True, capture_output=True)
        total = steps + warm
        data = os.path.join(cdir, "data.bin")
        write_shard(data, V, (total + 2) * B * (T + 1) + 1024)
        fpt = flops_per_token(cfg, T)
        print(f"== {name}: hidden 256, 4 sparse layers, 16 experts top-4 x 128, vocab {V}; batch {B} x seq {T}; "
              f"{fpt * B * T / 1e9:.1f} GFLOP/step; {a.reps} reps x {steps} timed steps (+{warm} warm-up)")
        runs = {}
        for rep in range(a.reps):
            out = os.path.join(cdir, f"pt-{rep}")
            os.makedirs(out)
            cmd = [exe, "train", "--backend", "cpu", "--model", model, "--data", data, "--output-dir", out,
                   "--max-steps", str(total), "--seq-len", str(T), "--per-device-train-batch-size", str(B),
                   "--learning-rate", "1e-4", "--max-grad-norm", "1.0", "--quiet"]
            jobs = [("portatrain", cmd, env, os.path.join(out, "metrics.jsonl"))]
            for label, extra, tenv in setups:
                m = os.path.join(cdir, f"{label}-{rep}.jsonl")
                jobs.append((label, [a.torch_python, os.path.abspath(__file__), "--torch-worker", "--model", model,
                                     "--data", data, "--metrics", m, "--batch", str(B), "--seq-len", str(T),
                                     "--steps", str(total), "--threads", str(a.threads)] + extra, tenv, m))
            for label, cmd, jenv, metrics in jobs:
                log = os.path.join(cdir, f"{label}-{rep}.log")
                rc, hwm, _ = run_measured(cmd, jenv, metrics, total, log)
                if rc != 0:
                    print(f"  rep {rep}: {label}: failed (rc {rc}); see {log}: "
                          f"{open(log).read().strip().splitlines()[-1:]}")
                    continue
                st = statistics.median(step_times(metrics, warm))
                runs.setdefault(label, []).append((st, hwm))
                print(f"  rep {rep}: {label:<26} {st * 1e3:9.1f} ms/step  peak RSS {hwm / 1024:7.0f} MiB  "
                      f"(load average after: {os.getloadavg()[0]:.2f})", flush=True)
            shutil.rmtree(out, ignore_errors=True)
        for fw, rs in runs.items():
            st = statistics.median(r[0] for r in rs)
            results.append({"config": name, "vocab": V, "framework": fw, "batch": B, "seq_len": T,
                            "tokens_per_s": B * T / st, "ms_per_step": st * 1e3,
                            "peak_rss_mib": max(r[1] for r in rs) / 1024, "mfu": fpt * B * T / st / ceiling,
                            "step_ms_reps": [r[0] * 1e3 for r in rs]})
        print()
    print(f"sgemm ceiling ({a.threads} threads) {ceiling / 1e9:.1f} GFLOP/s; medians over {a.reps} repetitions; "
          f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    hdr = f"{'config':<14} {'framework':<26} {'tokens/s':>9} {'ms/step':>9} {'peak RSS MiB':>12} {'MFU':>6} {'vs best torch':>13}"
    print(hdr + "\n" + "-" * len(hdr))
    for r in results:
        best = max((q["tokens_per_s"] for q in results if q["config"] == r["config"] and q["framework"] != "portatrain"),
                   default=None)
        sp = f"{r['tokens_per_s'] / best:.2f}x" if best else "-"
        print(f"{r['config']:<14} {r['framework']:<26} {r['tokens_per_s']:9.0f} {r['ms_per_step']:9.1f} "
              f"{r['peak_rss_mib']:12.0f} {100 * r['mfu']:5.1f}% {sp:>13}")
    if a.json:
        json.dump({"date": time.strftime("%Y-%m-%d %H:%M"), "cpu": cpu_model(), "threads": a.threads,
                   "load_average": os.getloadavg(), "sgemm_ceiling_gflops": ceiling / 1e9,
                   "torch_transformers": tv.stdout.strip(), "results": results}, open(a.json, "w"), indent=2)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
