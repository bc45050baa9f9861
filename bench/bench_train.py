#!/usr/bin/env python3
"""Training throughput: portatrain `--backend cpu` vs PyTorch eager on the same CPU.

Both sides train the same Qwen3 config (same weights: PyTorch loads the
directory `portatrain init` wrote), the same batch x sequence length of the
same token shard, fp32, AdamW, global-norm clipping at 1.0, the same number of
threads. Printed per config and framework: tokens/s, ms/step, peak RSS and MFU,
as medians over repetitions (each repetition: the median step time of its
timed steps, warm-up steps skipped). Runs alternate between the two frameworks
so that a noisy machine affects both alike.

MFU = model FLOPs per second / the machine's measured sgemm ceiling
(bench/sgemm_ceiling.c: the faster of OpenBLAS's and oneDNN's sgemm, large
square sizes, same thread count, median of repetitions; OpenBLAS alone where
oneDNN's headers are missing). Model FLOPs per token are those of
qwen3_train_flops_per_token (src/model/qwen3.c): 6 x matmul parameters
(lm_head included) + causal attention 6 x layers x T x heads x head_dim.

PyTorch runs with each allocator of --torch-allocators: "system" (glibc
malloc) and, where Debian's libjemalloc2 is installed, "jemalloc" (LD_PRELOAD,
freed pages kept: MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1), the
allocator PyTorch's CPU performance guidance recommends. glibc hands PyTorch's
large per-step buffers (the [batch x vocab] logits and their gradients) back
to the kernel and faults them in again every step, which on some VMs costs
PyTorch more system time than compute. "vs torch" is against the FASTER of the
PyTorch rows, so the ratio is the conservative one.

Peak RSS is the kernel's high-water mark (VmHWM of /proc/PID/status) sampled
until the last training step has been logged, so portatrain's final model
save (which makes host copies of the weights) is not counted; PyTorch's
worker does nothing after its last step.

bf16 (--precisions fp32,bf16): portatrain `--precision bf16` (docs/PRECISION.md)
against PyTorch's mixed-precision recipe, torch.autocast("cpu", bfloat16)
around the forward and loss (fp32 master weights and AdamW, as ours); bf16
MFU is against the measured bf16 matmul ceiling (bench/bf16_ceiling.c,
oneDNN: AMX / AVX512-BF16 where the CPU has them).

Other PyTorch installs run as extra rows with --torch-python (their
interpreters, e.g. a venv's python). Debian's python3-torch is probed when
installed; bookworm's is 1.13.1, below the torch that transformers' Qwen3
needs (transformers >= 4.51, which requires torch >= 2.x), so there it is
reported and skipped rather than compared through different model code.

  python3 bench/bench_train.py                      # both configs, ~10 minutes on 2 cores
  python3 bench/bench_train.py --configs tiny --reps 2
  python3 bench/bench_train.py --portatrain build-cpu/portatrain --threads 2
  python3 bench/bench_train.py --precisions fp32,bf16
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# name -> (config overrides on top of configs/tiny.json, batch, seq_len, timed steps, warm-up steps)
CONFIGS = {
    "tiny": ({}, 8, 256, 6, 2),
    "0.6b-4l": (
        {
            "hidden_size": 1024,
            "intermediate_size": 3072,
            "num_hidden_layers": 4,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
        },
        1,
        512,
        4,
        2,
    ),
}


def flops_per_token(c, T):
    C, I = c["hidden_size"], c["intermediate_size"]
    QD = c["num_attention_heads"] * c["head_dim"]
    KD = c["num_key_value_heads"] * c["head_dim"]
    L, V = c["num_hidden_layers"], c["vocab_size"]
    per_layer = C * QD * 2 + C * KD * 2 + 3 * C * I
    return 6.0 * (per_layer * L + V * C) + 6.0 * L * T * QD


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def vm_hwm_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def count_lines(path):
    try:
        with open(path) as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def find_jemalloc():
    """The path of Debian's libjemalloc.so.2 (package libjemalloc2), or None."""
    import ctypes.util

    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"):
        p = os.path.join(d, "libjemalloc.so.2")
        if os.path.exists(p):
            return p
    return ctypes.util.find_library("jemalloc")


def probe_torch(python):
    """(torch version, None) when `python` can run the worker (torch and transformers' Qwen3), else (None, why)."""
    code = ("import torch, transformers; from transformers import Qwen3ForCausalLM; "
            "print(torch.__version__)")
    try:
        r = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    if r.returncode != 0:
        lines = (r.stderr or r.stdout).strip().splitlines()
        return None, lines[-1] if lines else f"exit status {r.returncode}"
    return r.stdout.strip().splitlines()[-1], None


def torch_pythons(a):
    """[(interpreter, row label suffix)] of the extra PyTorch installs that can run the worker."""
    out = []
    cands = [p for p in a.torch_python.split(",") if p]
    deb = "/usr/lib/python3/dist-packages/torch"
    if os.path.isdir(deb) and os.path.exists("/usr/bin/python3") and "/usr/bin/python3" not in cands:
        ver = "?"
        try:
            with open(os.path.join(deb, "version.py")) as f:
                for line in f:
                    if line.startswith("__version__"):
                        ver = line.split("=", 1)[1].strip().strip("'\"")
        except OSError:
            pass
        v, why = probe_torch("/usr/bin/python3")
        if v:
            cands.append("/usr/bin/python3")
        else:
            print(f"note: Debian's python3-torch {ver} cannot run the PyTorch side ({why}); not compared")
    for py in cands:
        v, why = probe_torch(py)
        if not v:
            sys.exit(f"--torch-python {py}: cannot run the PyTorch worker: {why}")
        print(f"extra PyTorch: {py}: torch {v}")
        out.append((py, f"@{v.split('+')[0]}"))
    return out


def torch_env(env, allocator):
    if allocator == "system":
        return env
    lib = find_jemalloc()
    return dict(env, LD_PRELOAD=lib, MALLOC_CONF="dirty_decay_ms:-1,muzzy_decay_ms:-1")


def run_measured(cmd, env, metrics_path, total_steps, log_path):
    """Runs cmd; returns (rc, peak RSS KiB during training, whole-process max RSS KiB)."""
    with open(log_path, "w") as log:
        p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        hwm = 0
        while True:
            done_pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if done_pid:
                break
            if count_lines(metrics_path) < total_steps:
                h = vm_hwm_kib(p.pid)
                if h:
                    hwm = max(hwm, h)
            time.sleep(0.02)
    rc = os.waitstatus_to_exitcode(status)
    return rc, hwm or ru.ru_maxrss, ru.ru_maxrss


def step_times(metrics_path, warmup):
    ts = []
    with open(metrics_path) as f:
        for line in f:
            ts.append(json.loads(line)["step_time_s"])
    return ts[warmup:]


def sgemm_ceiling(threads, tmp):
    exe = os.path.join(tmp, "sgemm_ceiling")
    cc = os.environ.get("CC", "cc")
    src = os.path.join(HERE, "sgemm_ceiling.c")
    # both libraries the cpu backend uses (oneDNN for its tile products) where oneDNN builds
    if subprocess.run([cc, "-O2", src, "-o", exe, "-lopenblas", "-DWITH_DNNL", "-ldnnl", "-fopenmp"],
                      capture_output=True).returncode != 0:
        print("sgemm ceiling: oneDNN not found, OpenBLAS only")
        subprocess.run([cc, "-O2", src, "-o", exe, "-lopenblas"], check=True)
    out = subprocess.run([exe, str(threads), "7", "2048", "3072", "4096"], check=True, capture_output=True,
                         text=True).stdout
    print(out.rstrip())
    for line in out.splitlines():
        if line.startswith("ceiling_gflops"):
            return float(line.split()[1]) * 1e9
    raise RuntimeError("sgemm_ceiling printed no ceiling")


def bf16_ceiling(threads, tmp):
    exe = os.path.join(tmp, "bf16_ceiling")
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-O2", os.path.join(HERE, "bf16_ceiling.c"), "-o", exe, "-ldnnl"], check=True)
    out = subprocess.run([exe, "7", "2048", "3072", "4096"], check=True, capture_output=True, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS=str(threads))).stdout
    print(out.rstrip())
    for line in out.splitlines():
        if line.startswith("ceiling_gflops"):
            return float(line.split()[1]) * 1e9
    raise RuntimeError("bf16_ceiling printed no ceiling")


def write_shard(path, vocab, n):
    import numpy as np

    rng = np.random.default_rng(0)
    tok = rng.integers(0, vocab, size=n, dtype=np.uint32)
    h = np.zeros(256, np.int32)
    h[0], h[1], h[2], h[3], h[4] = 20241202, 1, n, 4, vocab
    with open(path, "wb") as f:
        f.write(h.tobytes())
        f.write(tok.tobytes())


# ---------------------------------------------------------------- PyTorch worker


def torch_worker(a):
    import numpy as np
    import torch
    from transformers import Qwen3ForCausalLM

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM.from_pretrained(a.model, dtype=torch.float32, attn_implementation="eager")
    model.train()
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.0}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.999), eps=1e-8)
    tok = np.memmap(a.data, dtype=np.uint32, mode="r", offset=1024)
    B, T = a.batch, a.seq_len
    with open(a.metrics, "w") as out:
        for step in range(a.steps):
            t0 = time.perf_counter()
            base = step * B * (T + 1)
            rows = np.stack([np.asarray(tok[base + i * (T + 1): base + (i + 1) * (T + 1)], dtype=np.int64)
                             for i in range(B)])
            ids = torch.from_numpy(rows[:, :T])
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                loss = model(input_ids=ids, labels=ids).loss  # HF shifts the labels itself
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            dt = time.perf_counter() - t0
            out.write(json.dumps({"step": step + 1, "loss": loss.item(), "step_time_s": dt}) + "\n")
            out.flush()


# ---------------------------------------------------------------- orchestration


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--portatrain", default=None, help="portatrain binary (default: build-cpu/ or build/)")
    ap.add_argument("--configs", default="tiny,0.6b-4l")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=0, help="timed steps per repetition (default per config)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--precisions", default="fp32", help="fp32, bf16 or fp32,bf16")
    ap.add_argument("--torch-allocators", default=None,
                    help="PyTorch's allocators: jemalloc, system or both (default: jemalloc,system where "
                         "libjemalloc2 is installed, else system)")
    ap.add_argument("--torch-python", default="",
                    help="extra Python interpreters whose torch + transformers also run, comma-separated")
    # internal: the PyTorch worker
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--metrics", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--seq-len", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--lr", type=float, default=1e-4, help=argparse.SUPPRESS)
    ap.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_worker:
        return torch_worker(a)

    exe = a.portatrain
    if not exe:
        for cand in ("build-cpu/portatrain", "build/portatrain"):
            if os.path.exists(os.path.join(ROOT, cand)):
                exe = os.path.join(ROOT, cand)
                break
    if not exe or not os.path.exists(exe):
        sys.exit("portatrain binary not found: build it or pass --portatrain")
    tmp = tempfile.mkdtemp(prefix="pt-bench-")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads),
               OPENBLAS_NUM_THREADS="1")
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        torch_version = None
        a.no_torch = True
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    print(f"cpu: {cpu_model()}, {os.cpu_count()} logical CPUs; threads used: {a.threads}")
    print(f"portatrain: {exe}; torch: {torch_version}")
    a.torch_pythons = torch_pythons(a) if not a.no_torch else []
    have_jemalloc = find_jemalloc() is not None
    if a.torch_allocators is None:
        a.torch_allocators = "jemalloc,system" if have_jemalloc else "system"
        if not have_jemalloc:
            print("note: libjemalloc2 not installed (apt-get install libjemalloc2): PyTorch runs on glibc malloc only")
    a.torch_allocators = a.torch_allocators.split(",")
    for al in a.torch_allocators:
        if al not in ("jemalloc", "system"):
            sys.exit(f"--torch-allocators: unknown allocator '{al}' (jemalloc or system)")
        if al == "jemalloc" and not have_jemalloc:
            sys.exit("--torch-allocators jemalloc: libjemalloc.so.2 not found (apt-get install libjemalloc2)")
    if not a.no_torch:
        print(f"PyTorch allocators: {', '.join(a.torch_allocators)}")
    precisions = a.precisions.split(",")
    ceilings = {"fp32": sgemm_ceiling(a.threads, tmp)}
    print(f"sgemm ceiling ({a.threads} threads): {ceilings['fp32'] / 1e9:.1f} GFLOP/s")
    if "bf16" in precisions:
        ceilings["bf16"] = bf16_ceiling(a.threads, tmp)
        print(f"bf16 matmul ceiling ({a.threads} threads): {ceilings['bf16'] / 1e9:.1f} GFLOP/s")
    print()

    base_cfg = json.load(open(os.path.join(ROOT, "configs", "tiny.json")))
    results = []
    for name in a.configs.split(","):
        over, B, T, steps, warm = CONFIGS[name]
        if a.steps:
            steps = a.steps
        cfg = dict(base_cfg, **over)
        cdir = os.path.join(tmp, name)
        os.makedirs(cdir)
        cpath = os.path.join(cdir, "config.json")
        json.dump(cfg, open(cpath, "w"), indent=2)
        model = os.path.join(cdir, "model")
        subprocess.run([exe, "init", "--config", cpath, "--output-dir", model, "--seed", "42"], check=True,
                       capture_output=True)
        total = steps + warm
        data = os.path.join(cdir, "data.bin")
        write_shard(data, cfg["vocab_size"], (total + 2) * B * (T + 1) + 1024)
        fpt = flops_per_token(cfg, T)
        print(f"== {name}: hidden {cfg['hidden_size']}, {cfg['num_hidden_layers']} layers, "
              f"{cfg['num_attention_heads']}/{cfg['num_key_value_heads']} heads x {cfg['head_dim']}, "
              f"intermediate {cfg['intermediate_size']}, vocab {cfg['vocab_size']}; batch {B} x seq {T}; "
              f"{fpt * B * T / 1e9:.1f} GFLOP/step; {a.reps} reps x {steps} timed steps (+{warm} warm-up)")
        for prec in precisions:
            bench_config(a, exe, env, name, cdir, model, data, cfg, B, T, total, warm, fpt, prec, ceilings[prec],
                         results)
        print()

    print(f"ceilings ({a.threads} threads): " + ", ".join(f"{p} {c / 1e9:.1f} GFLOP/s" for p, c in ceilings.items()) +
          f"; medians over {a.reps} repetitions; MFU against the ceiling of the run's precision")
    hdr = f"{'config':<9} {'framework':<24} {'prec':<5} {'batch x seq':>11} {'tokens/s':>9} {'ms/step':>9} {'peak RSS MiB':>12} {'MFU':>6} {'vs torch':>8}"
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        ref = [q for q in results if q["config"] == r["config"] and q["framework"].startswith("pytorch")
               and q["precision"] == r["precision"]]
        best = max((q["tokens_per_s"] for q in ref), default=None)
        sp = f"{r['tokens_per_s'] / best:.2f}x" if best else "-"
        print(f"{r['config']:<9} {r['framework']:<24} {r['precision']:<5} {r['batch']:>4} x {r['seq_len']:<4} "
              f"{r['tokens_per_s']:9.0f} {r['ms_per_step']:9.1f} {r['peak_rss_mib']:12.0f} {100 * r['mfu']:5.1f}% {sp:>8}")
    if a.json:
        json.dump({"date": time.strftime("%Y-%m-%d"), "cpu": cpu_model(), "threads": a.threads,
                   "sgemm_ceiling_gflops": ceilings["fp32"] / 1e9,
                   "bf16_ceiling_gflops": ceilings["bf16"] / 1e9 if "bf16" in ceilings else None,
                   "torch": torch_version, "torch_allocators": a.torch_allocators, "results": results},
                  open(a.json, "w"), indent=2)
    if a.keep:
        print(f"kept {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)


def bench_config(a, exe, env, name, cdir, model, data, cfg, B, T, total, warm, fpt, prec, ceiling, results):
    """One config at one precision: a.reps alternating repetitions of both frameworks."""
    runs = {"portatrain": []}
    for rep in range(a.reps):
        out = os.path.join(cdir, f"pt-{prec}-{rep}")
        metrics = os.path.join(out, "metrics.jsonl")
        cmd = [exe, "train", "--backend", "cpu", "--model", model, "--data", data, "--output-dir", out,
               "--max-steps", str(total), "--seq-len", str(T), "--per-device-train-batch-size", str(B),
               "--learning-rate", "1e-4", "--precision", prec, "--quiet"]
        os.makedirs(out)
        rc, hwm, maxrss = run_measured(cmd, env, metrics, total, os.path.join(cdir, f"pt-{prec}-{rep}.log"))
        if rc != 0:
            sys.exit(f"portatrain failed (rc {rc}); see {cdir}/pt-{prec}-{rep}.log")
        ts = step_times(metrics, warm)
        runs["portatrain"].append((statistics.median(ts), hwm, maxrss))
        shutil.rmtree(out, ignore_errors=True)  # the saved model
        print(f"  {prec} rep {rep}: {'portatrain':<24} {statistics.median(ts) * 1e3:9.1f} ms/step  peak RSS {hwm / 1024:7.0f} MiB"
              f" (incl. final save {maxrss / 1024:.0f} MiB)")
        if a.no_torch:
            continue
        for (py, label), al in [(p, al) for p in [(sys.executable, "")] + a.torch_pythons
                                for al in a.torch_allocators]:
            fw = ("pytorch" if al == "system" else f"pytorch+{al}") + label
            tag = f"torch{label.replace('@', '-')}-{al}-{prec}-{rep}"
            metrics = os.path.join(cdir, f"{tag}.jsonl")
            cmd = [py, os.path.abspath(__file__), "--torch-worker", "--model", model, "--data", data,
                   "--metrics", metrics, "--batch", str(B), "--seq-len", str(T), "--steps", str(total),
                   "--threads", str(a.threads), "--precision", prec]
            rc, hwm, maxrss = run_measured(cmd, torch_env(env, al), metrics, total, os.path.join(cdir, f"{tag}.log"))
            if rc != 0:
                sys.exit(f"PyTorch worker failed (rc {rc}); see {cdir}/{tag}.log")
            ts = step_times(metrics, warm)
            runs.setdefault(fw, []).append((statistics.median(ts), hwm, maxrss))
            print(f"  {prec} rep {rep}: {fw:<24} {statistics.median(ts) * 1e3:9.1f} ms/step  peak RSS {hwm / 1024:7.0f} MiB")
    for fw, rs in runs.items():
        if not rs:
            continue
        st = statistics.median(r[0] for r in rs)
        tok_s = B * T / st
        results.append({
            "config": name, "framework": fw, "precision": prec, "batch": B, "seq_len": T, "tokens_per_s": tok_s,
            "ms_per_step": st * 1e3, "peak_rss_mib": max(r[1] for r in rs) / 1024,
            "mfu": fpt * tok_s / ceiling, "model_gflops_per_s": fpt * tok_s / 1e9,
            "step_ms_reps": [r[0] * 1e3 for r in rs],
        })


if __name__ == "__main__":
    main()
