#!/usr/bin/env python3
"""Training throughput on one GPU: portatrain `--backend cuda --precision bf16` vs PyTorch eager vs
torch.compile, on a Qwen3-0.6B-shaped model (issue 9).

The model: hidden 1024, 28 layers (--layers), 16 heads / 8 KV heads x head_dim 128, intermediate 3072,
vocab 151,936, tied embeddings; the same weights on every side (PyTorch loads the directory that
`portatrain init` wrote), the same batch x sequence (default 4 x 2048) of the same token shard, AdamW
(lr 1e-4, no weight decay), global-norm clipping at 1.0.

Precision, matched to what portatrain does with --precision bf16 (docs/PRECISION.md): fp32 master
weights, gradients and AdamW moments, bf16 matmul operands with fp32 accumulation. PyTorch runs the
mixed-precision recipe that keeps the same fp32 state: fp32 weights, torch.autocast("cuda", bfloat16)
around the forward and loss, the optimizer in fp32 (PyTorch's default foreach AdamW). portatrain also
rounds the norm/RoPE/SwiGLU/residual outputs to bf16 as HF's bf16 model does; autocast keeps those in
fp32, so PyTorch moves somewhat more bytes there: same arithmetic, comparable step.

Each framework runs once in its own process (a fresh CUDA context, nothing cached between them): W
warm-up steps (torch.compile one more: its compilation, reported apart), then R x S timed steps; the
ms/step is the median over the R repetitions of each repetition's median step. portatrain's time per
step comes from its metrics.jsonl (step_time_s); PyTorch's from host timers around each step after
torch.cuda.synchronize(). Peak memory: the process's GPU memory as nvidia-smi reports it (the same
method for all three, CUDA context included), sampled until the last timed step; PyTorch's own
max_memory_allocated is printed beside it.

MFU = model FLOPs per second / the GPU's dense bf16 peak (H100/H200 SXM: 989 TFLOP/s; --peak-tflops to
override; printed). Model FLOPs per token are bench_train.py's (qwen3_train_flops_per_token of
src/model/qwen3.c): 6 x matmul parameters (lm_head included) + 6 x layers x T x heads x head_dim.

  python3 bench/bench_gpu.py --portatrain .gpupack-unpacked/bin/portatrain      # on the GPU machine
  python3 bench/bench_gpu.py --smoke                    # here: tiny shapes on the CPU, 1 repetition
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from bench_train import flops_per_token, write_shard  # noqa: E402  (one FLOP formula, one shard writer)

QWEN3_06B = {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
             "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": True,
             "max_position_embeddings": 40960}
SMOKE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 4096, "tie_word_embeddings": True}
# dense bf16 tensor-core peaks by GPU name (vendor datasheets, TFLOP/s, without sparsity)
PEAKS = [("H200", 989.0), ("H100 PCIe", 756.0), ("H100", 989.0), ("A100", 312.0)]


def gpu_name():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=20).stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def gpu_mem_mib(pid):
    """The GPU memory nvidia-smi attributes to pid (MiB), None when unknown."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) == 2 and f[0] == str(pid) and f[1].isdigit():
            return int(f[1])
    return None


def vm_hwm_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def metric_rows(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []


def run_until(cmd, env, metrics, total, log_path, deadline, on_gpu):
    """Runs cmd until its metrics file has `total` rows (then ends it: the final save is not timed),
    sampling its peak memory. Returns (status, rows, peak MiB)."""
    with open(log_path, "w") as log:
        p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        peak, status = 0.0, "ok"
        while True:
            if p.poll() is not None:
                if p.returncode != 0 and len(metric_rows(metrics)) < total:
                    status = f"failed (rc {p.returncode}, see {log_path})"
                break
            n = len(metric_rows(metrics))
            m = gpu_mem_mib(p.pid) if on_gpu else vm_hwm_mib(p.pid)
            if m and n < total:
                peak = max(peak, m)
            if n >= total:
                break
            if time.time() > deadline:
                status = "time budget spent"
                break
            time.sleep(0.25)
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return status, metric_rows(metrics), peak


def summarise(name, rows, warm, reps, steps, tokens, fpt, peak_flops, peak_mib, extra):
    timed = [r["step_time_s"] for r in rows[warm:warm + reps * steps]]
    if len(timed) < reps * steps:
        return None
    per_rep = [statistics.median(timed[i * steps:(i + 1) * steps]) for i in range(reps)]
    st = statistics.median(per_rep)
    tok_s = tokens / st
    r = {"framework": name, "ms_per_step": st * 1e3, "tokens_per_s": tok_s, "model_tflops_per_s": fpt * tok_s / 1e12,
         "mfu": fpt * tok_s / peak_flops if peak_flops else None, "peak_mem_mib": peak_mem(peak_mib),
         "rep_ms": [x * 1e3 for x in per_rep], "warmup_s": sum(x["step_time_s"] for x in rows[:warm]),
         "losses": [x.get("loss") for x in rows[:warm + reps * steps]]}
    r.update(extra)
    return r


def peak_mem(m):
    return round(m, 1) if m else None


# ---------------------------------------------------------------- PyTorch worker


def torch_worker(a):
    import numpy as np
    import torch
    from transformers import Qwen3ForCausalLM

    dev = torch.device(a.device)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM.from_pretrained(a.model, dtype=torch.float32, attn_implementation="sdpa").to(dev)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    step_fn = model
    if a.mode == "compile":
        step_fn = torch.compile(model)
    tok = np.memmap(a.data, dtype=np.uint32, mode="r", offset=1024)
    B, T = a.batch, a.seq_len
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    with open(a.metrics, "w") as out:
        for step in range(a.steps):
            base = step * B * (T + 1)
            rows = np.stack([np.asarray(tok[base + i * (T + 1): base + (i + 1) * (T + 1)], dtype=np.int64)
                             for i in range(B)])
            ids = torch.from_numpy(rows[:, :T]).to(dev)
            sync()
            t0 = time.perf_counter()
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                loss = step_fn(input_ids=ids, labels=ids).loss  # HF shifts the labels itself
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            sync()
            dt = time.perf_counter() - t0
            rec = {"step": step + 1, "loss": loss.item(), "step_time_s": dt}
            if dev.type == "cuda":
                rec["max_allocated_mib"] = torch.cuda.max_memory_allocated() / 2**20
            out.write(json.dumps(rec) + "\n")
            out.flush()


# ---------------------------------------------------------------- orchestration


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--portatrain", default=None, help="portatrain binary (default: build/portatrain)")
    ap.add_argument("--ld-library-path", default=None, help="LD_LIBRARY_PATH for portatrain only (the pack's)")
    ap.add_argument("--frameworks", default="portatrain,eager,compile")
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--warmup", type=int, default=2, help="warm-up steps (not timed)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3, help="timed steps per repetition")
    ap.add_argument("--peak-tflops", type=float, default=None, help="dense bf16 peak (default: by GPU name)")
    ap.add_argument("--time-budget", type=float, default=600, help="seconds for everything; what is left out says so")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU (backend cpu), 1 repetition")
    ap.add_argument("--json", default=None)
    ap.add_argument("--work", default=None, help="working directory (default: a temporary one, removed)")
    # internal: the PyTorch worker
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--device", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--metrics", help=argparse.SUPPRESS)
    ap.add_argument("--total", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_worker:
        a.steps = a.total
        return torch_worker(a)

    t_start = time.time()
    deadline = t_start + a.time_budget
    if a.smoke:
        cfg_over, a.batch, a.seq_len, a.warmup, a.reps, a.steps = dict(SMOKE), 2, 64, 1, 1, 2
        backend, device = "cpu", "cpu"
    else:
        cfg_over = dict(QWEN3_06B, num_hidden_layers=a.layers)
        backend, device = "cuda", "cuda"
    exe = a.portatrain or os.path.join(ROOT, "build", "portatrain")
    if not os.path.exists(exe):
        sys.exit(f"bench_gpu: portatrain binary not found: {exe} (build it or pass --portatrain)")
    pt_env = dict(os.environ)
    if a.ld_library_path:
        pt_env["LD_LIBRARY_PATH"] = a.ld_library_path
    work = a.work or tempfile.mkdtemp(prefix="pt-bench-gpu-")
    os.makedirs(work, exist_ok=True)
    name = gpu_name() if not a.smoke else None
    peak = a.peak_tflops
    if peak is None and name:
        peak = next((p for k, p in PEAKS if k in name), None)
    peak_flops = peak * 1e12 if peak else None
    try:
        import torch

        torch_version = f"{torch.__version__} (CUDA {torch.version.cuda})"
    except ImportError:
        torch_version = None

    cfg = dict(json.load(open(os.path.join(ROOT, "configs", "tiny.json"))), **cfg_over)
    B, T = a.batch, a.seq_len
    total = a.warmup + a.reps * a.steps
    fpt = flops_per_token(cfg, T)
    n_params = (cfg["hidden_size"] * (cfg["num_attention_heads"] + 2 * cfg["num_key_value_heads"]) * cfg["head_dim"]
                + cfg["num_attention_heads"] * cfg["head_dim"] * cfg["hidden_size"]
                + 3 * cfg["hidden_size"] * cfg["intermediate_size"]) * cfg["num_hidden_layers"] \
        + cfg["vocab_size"] * cfg["hidden_size"]
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; GPU: {name or device}; torch: {torch_version}")
    print(f"model: hidden {cfg['hidden_size']}, {cfg['num_hidden_layers']} layers, {cfg['num_attention_heads']}/"
          f"{cfg['num_key_value_heads']} heads x {cfg['head_dim']}, intermediate {cfg['intermediate_size']}, vocab "
          f"{cfg['vocab_size']}, tied; {n_params / 1e6:.0f} M matmul parameters; batch {B} x seq {T}; "
          f"{fpt * B * T / 1e12:.2f} TFLOP/step; bf16; {a.warmup} warm-up + {a.reps} x {a.steps} timed steps")
    print(f"MFU against: {f'{peak:.0f} TFLOP/s dense bf16' if peak else 'no known peak (MFU not computed)'}")
    sys.stdout.flush()

    cpath = os.path.join(work, "config.json")
    json.dump(cfg, open(cpath, "w"), indent=2)
    model = os.path.join(work, "model")
    if not os.path.exists(os.path.join(model, "config.json")):
        t0 = time.time()
        subprocess.run([exe, "init", "--config", cpath, "--output-dir", model, "--seed", "42"], check=True,
                       env=pt_env, capture_output=True)
        print(f"init: {time.time() - t0:.1f} s")
    data = os.path.join(work, "data.bin")
    write_shard(data, cfg["vocab_size"], (total + 3) * B * (T + 1) + 1024)

    results, skipped = [], []

    def save():
        if a.json:
            json.dump({"date": time.strftime("%Y-%m-%d %H:%M"), "gpu": name, "device": device, "torch": torch_version,
                       "peak_tflops": peak, "config": cfg, "batch": B, "seq_len": T, "warmup": a.warmup,
                       "reps": a.reps, "steps_per_rep": a.steps, "flops_per_token": fpt, "results": results,
                       "skipped": skipped}, open(a.json, "w"), indent=1)

    for fw in a.frameworks.split(","):
        if time.time() > deadline - 10:
            skipped.append(f"{fw}: time budget spent")
            print(f"{fw}: skipped, time budget spent")
            continue
        out = os.path.join(work, fw)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        metrics = os.path.join(out, "metrics.jsonl")
        # torch.compile's second call can compile again (autograd/optimizer graphs): one more warm-up step
        warm = a.warmup + (1 if fw == "compile" else 0)
        n = warm + a.reps * a.steps
        t0 = time.time()
        if fw == "portatrain":
            cmd = [exe, "train", "--backend", backend, "--precision", "bf16", "--model", model, "--data", data,
                   "--output-dir", out, "--max-steps", str(n), "--seq-len", str(T),
                   "--per-device-train-batch-size", str(B), "--learning-rate", "1e-4", "--weight-decay", "0",
                   "--warmup-steps", "0", "--lr-scheduler-type", "constant", "--quiet"]
            env = pt_env
        elif fw in ("eager", "compile"):
            if torch_version is None:
                skipped.append(f"{fw}: torch not importable")
                print(f"{fw}: skipped, torch not importable")
                continue
            cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", "--mode", fw, "--device", device,
                   "--model", model, "--data", data, "--metrics", metrics, "--batch", str(B), "--seq-len", str(T),
                   "--total", str(n)]
            env = dict(os.environ)
        else:
            sys.exit(f"bench_gpu: unknown framework '{fw}' (portatrain, eager, compile)")
        status, rows, peak_mib = run_until(cmd, env, metrics, n, out + ".log", deadline, device == "cuda")
        wall = time.time() - t0
        extra = {"wall_s": wall}
        if fw != "portatrain" and rows and "max_allocated_mib" in rows[-1]:
            extra["torch_max_allocated_mib"] = rows[-1]["max_allocated_mib"]
        r = summarise(fw, rows, warm, a.reps, a.steps, B * T, fpt, peak_flops, peak_mib, extra)
        if r is None:
            skipped.append(f"{fw}: {status}, {len(rows)} of {n} steps")
            print(f"{fw}: {status}; {len(rows)} of {n} steps logged (see {out}.log)")
            try:
                print("   " + "".join(open(out + ".log").readlines()[-3:]).rstrip().replace("\n", "\n   "))
            except OSError:
                pass
        else:
            results.append(r)
            alloc = f", torch max allocated {r['torch_max_allocated_mib']:.0f} MiB" if "torch_max_allocated_mib" in r else ""
            print(f"{fw}: {r['ms_per_step']:.1f} ms/step (reps {', '.join(f'{x:.1f}' for x in r['rep_ms'])}), "
                  f"warm-up {r['warmup_s']:.1f} s, wall {wall:.0f} s, losses {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}"
                  f"{alloc}")
        sys.stdout.flush()
        save()

    print()
    print(f"{'framework':<11} {'ms/step':>9} {'tokens/s':>10} {'TFLOP/s':>8} {'MFU':>6} {'peak MiB':>9} {'vs eager':>8}")
    print("-" * 66)
    eager = next((r for r in results if r["framework"] == "eager"), None)
    for r in results:
        mfu = f"{100 * r['mfu']:5.1f}%" if r["mfu"] is not None else "     -"
        sp = f"{r['tokens_per_s'] / eager['tokens_per_s']:.2f}x" if eager else "-"
        pm = f"{r['peak_mem_mib']:9.0f}" if r["peak_mem_mib"] else "        -"
        print(f"{r['framework']:<11} {r['ms_per_step']:9.1f} {r['tokens_per_s']:10.0f} {r['model_tflops_per_s']:8.1f} {mfu} {pm} {sp:>8}")
    for s in skipped:
        print(f"not measured: {s}")
    print(f"peak used for MFU: {f'{peak:.0f} TFLOP/s (dense bf16, {name})' if peak else 'none'}; "
          f"peak memory: {'nvidia-smi per process' if device == 'cuda' else 'VmHWM (host)'}")
    save()
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if results and not skipped else 1


if __name__ == "__main__":
    sys.exit(main())
