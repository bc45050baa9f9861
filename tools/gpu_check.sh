#!/usr/bin/env bash
# tools/gpu_check.sh: the one script to run on the GPU machine (issue 9), from the repository root,
# through the device tool: command `bash tools/gpu_check.sh`, carry [".gpupack"] (made here by
# tools/gpu_pack.sh), timeout_s 540. It must end inside 8 minutes: the stages share a budget of
# GPU_CHECK_BUDGET seconds (default 430), each has its own limit on top, and a failed or timed-out
# stage is reported and the next one runs.
#   env          GPU, driver, CUDA (driver and nvcc), cmake, OS/glibc, PyTorch; which of portatrain's
#                libraries (cJSON, pcre2, utf8proc, xxhash, OpenBLAS, OpenMP, OpenSSL, MPI) and -dev
#                packages the machine has
#   setup        unpack .gpupack (sha256 manifest checked), find cuBLAS/NCCL there (CUDA toolkit or
#                PyTorch's nvidia/* wheels), LD_LIBRARY_PATH for portatrain only; with no pack, build
#                here if every -dev package is present
#   devices      `portatrain devices`: the cuda line names the GPU, the nccl line NCCL
#   parity       test_backend_parity cuda (kernels, whole-model parity, determinism against cpu-ref)
#   accept_fp32  `portatrain accept --baseline cpu:fp32 --candidate cuda:fp32` (tiny config, demo data)
#   accept_bf16  `--candidate cuda:bf16` against the recorded fp32 baseline (bf16 profile)
#   ckpt         a checkpoint written on cuda resumes on cpu and one written on cpu resumes on cuda
#   nccl         tests/test_nccl.sh (one GPU: the host fallback, then SKIP; needs mpirun and an MPI pack)
#   bench        bench/bench_gpu.py with what is left of the budget: portatrain cuda bf16 vs PyTorch
#                eager vs torch.compile
# Prints ONE summary table last. $OUT (the device tool's; else out/gpu_check) receives summary.txt,
# summary.json, logs.tar.gz (every stage's log), the accept reports (html) and bench.json.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/out/gpu_check}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/gpu_check.XXXXXX)
LOGS="$W/logs"
mkdir -p "$LOGS"
BUDGET=${GPU_CHECK_BUDGET:-430}
ACCEPT_STEPS=${GPU_CHECK_ACCEPT_STEPS:-40}
T_START=$SECONDS
RESULTS=()  # name|status|seconds|detail
export PT_SOURCE_DIR="$ROOT" PT_SHARED_DIR="$ROOT/../shared" PT_BUILD_DIR="$W/build"

# stage NAME LIMIT_S FUNCTION: runs FUNCTION under its own limit (and what is left of the budget), its
# output in $LOGS/NAME.log; the function may write a one-line result into $W/detail.
stage() {
    local name=$1 limit=$2 fn=$3
    local left=$((BUDGET - (SECONDS - T_START)))
    [ "$limit" -gt "$left" ] && limit=$left
    if [ "$limit" -lt 10 ]; then
        RESULTS+=("$name|NO TIME|0|budget of ${BUDGET}s spent"); echo "== $name: skipped, budget spent"; return
    fi
    echo "== $name (limit ${limit}s)"
    : >"$W/detail"
    local t0=$SECONDS
    export -f "$fn"
    timeout -k 10 "$limit" bash -c "set -u; $fn" >"$LOGS/$name.log" 2>&1
    local rc=$? status
    case $rc in
        0) status=ok ;;
        77) status=SKIP ;;
        124 | 137) status=TIMEOUT ;;
        *) status="FAIL($rc)" ;;
    esac
    tail -n 12 "$LOGS/$name.log" | sed 's/^/   | /'
    local detail
    detail=$(head -c 300 "$W/detail" | tr '\n|' ' /' | sed 's/^ *//; s/ *$//')
    [ -z "$detail" ] && [ "$status" != ok ] && detail=$(grep -v '^\s*$' "$LOGS/$name.log" | tail -1 | head -c 200 | tr '|' '/')
    RESULTS+=("$name|$status|$((SECONDS - t0))|$detail")
    echo "== $name: $status in $((SECONDS - t0)) s"
}
export W LOGS ACCEPT_STEPS ROOT

# ---------------------------------------------------------------- stages

st_env() {
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); host $(uname -n); $(nproc) CPUs; $(awk '/MemTotal/ {printf "%.0f GiB RAM", $2 / 1048576}' /proc/meminfo)"
    (. /etc/os-release && echo "os: $PRETTY_NAME"); echo "glibc: $(ldd --version | head -1)"
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap,clocks.max.sm --format=csv
        nvidia-smi | grep -o "CUDA Version: [0-9.]*" | head -1
    else echo "nvidia-smi: not found"; fi
    echo "nvcc: $( (nvcc --version || /usr/local/cuda/bin/nvcc --version) 2>/dev/null | grep -o 'release [0-9.]*' || echo none)"
    echo "cmake: $(cmake --version 2>/dev/null | head -1 || echo none); gcc: $(gcc -dumpfullversion 2>/dev/null || echo none)"
    echo "mpirun: $(command -v mpirun || echo none); pkg-config: $(command -v pkg-config || echo none)"
    python3 - <<'PY' 2>&1
import importlib
for m in ("torch", "transformers", "numpy"):
    try:
        mod = importlib.import_module(m)
        extra = ""
        if m == "torch":
            extra = f" cuda {mod.version.cuda}, devices {mod.cuda.device_count()}" + (
                f", {mod.cuda.get_device_name(0)}" if mod.cuda.is_available() else "")
        print(f"python {m}: {mod.__version__}{extra}")
    except Exception as e:
        print(f"python {m}: not importable ({e.__class__.__name__})")
PY
    echo "-- run-time libraries (ldconfig):"
    for so in libcjson.so.1 libpcre2-8.so.0 libutf8proc.so.2 libxxhash.so.0 libopenblas.so.0 libgomp.so.1 \
              libcrypto.so.3 libmpi.so.40 libOpenCL.so.1 libcublas.so.13 libcublasLt.so.13 libnccl.so.2 libcuda.so.1; do
        printf '   %-20s %s\n' "$so" "$(ldconfig -p 2>/dev/null | grep -m1 " $so " | sed 's/.*=> //' || true)"
    done
    echo "-- -dev packages (pkg-config / headers):"
    local have=0 n=0
    for p in libcjson libpcre2-8 libutf8proc libxxhash; do
        n=$((n + 1))
        if pkg-config --exists "$p" 2>/dev/null; then have=$((have + 1)); echo "   $p: yes"; else echo "   $p: no"; fi
    done
    for h in openssl/evp.h cblas.h; do
        n=$((n + 1))
        if echo "#include <$h>" | gcc -E -x c - >/dev/null 2>&1; then have=$((have + 1)); echo "   $h: yes"; else echo "   $h: no"; fi
    done
    local gpu
    gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
    echo "${gpu:-no GPU}; -dev $have/$n; torch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo -)" >"$W/detail"
}

st_setup() {
    local P="$W/pack"
    mkdir -p "$P"
    if [ -f .gpupack/pack.tar.xz ]; then
        cat .gpupack/INFO 2>/dev/null
        # without xz(1), Python's lzma unpacks it
        tar -C "$P" -xJf .gpupack/pack.tar.xz 2>/dev/null ||
            python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' .gpupack/pack.tar.xz "$P" ||
            { echo "cannot unpack .gpupack/pack.tar.xz"; return 1; }
        (cd "$P" && sha256sum --quiet -c MANIFEST.sha256) || { echo "pack manifest mismatch"; return 1; }
        cmp -s .gpupack/MANIFEST.sha256 "$P/MANIFEST.sha256" || { echo "pack and .gpupack/MANIFEST.sha256 differ"; return 1; }
        echo "pack: $(wc -l <"$P/MANIFEST.sha256") files verified"
    else
        echo "no .gpupack/pack.tar.xz: building here"
        for p in libcjson libpcre2-8 libutf8proc libxxhash; do
            pkg-config --exists "$p" 2>/dev/null || { echo "cannot build here: no $p (-dev) and no pack (run tools/gpu_pack.sh first)"; return 1; }
        done
        cmake -S "$ROOT" -B "$W/build" -DCMAKE_BUILD_TYPE=Release -DPT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 && \
            cmake --build "$W/build" -j"$(nproc)" --target portatrain || return 1
        mkdir -p "$P/bin" "$P/lib/fallback"
        cp "$W/build/portatrain" "$P/bin/"
        for t in test_backend_parity test_cuda_sim; do
            cmake --build "$W/build" -j"$(nproc)" --target "$t" >/dev/null 2>&1 && cp "$W/build/$t" "$P/bin/"
        done
    fi
    # cuBLAS / NCCL / cudart: the CUDA toolkit's, else PyTorch's nvidia/* wheels
    local dirs="" site so d
    site=$(python3 -c 'import nvidia, os; print(" ".join(nvidia.__path__))' 2>/dev/null || true)
    for so in libcublas.so.13 libcublasLt.so.13 libnccl.so.2 libcudart.so.13; do
        d=""
        for c in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib; do
            [ -e "$c/$so" ] && { d=$c; break; }
        done
        if [ -z "$d" ] && [ -n "$site" ]; then
            d=$(find $site -name "$so" -printf '%h\n' 2>/dev/null | head -1)
        fi
        echo "   $so: ${d:-NOT FOUND}"
        [ -n "$d" ] && case ":$dirs:" in *":$d:"*) ;; *) dirs="$dirs:$d" ;; esac
    done
    # fallback libraries only where the system has none of that soname
    mkdir -p "$P/lib/use-fallback"
    for f in "$P"/lib/fallback/*; do
        [ -e "$f" ] || continue
        ldconfig -p | grep -q " $(basename "$f") " || { ln -sf "$f" "$P/lib/use-fallback/"; echo "   fallback: $(basename "$f")"; }
    done
    echo "$P/lib:$P/lib/use-fallback${dirs}" >"$W/ldpath"
    [ -d data/demo/shards/train ] || { mkdir -p data && [ -d "$P/data/demo" ] && ln -sfn "$P/data/demo" data/demo; }
    echo "LD_LIBRARY_PATH for portatrain: $(cat "$W/ldpath")"
    LD_LIBRARY_PATH=$(cat "$W/ldpath") ldd "$P/bin/portatrain" | grep -E "not found|cublas|cudart|gomp|openblas"
    if LD_LIBRARY_PATH=$(cat "$W/ldpath") ldd "$P/bin/portatrain" | grep -q "not found"; then
        echo "unresolved libraries" >"$W/detail"; return 1
    fi
    echo "$( [ -f .gpupack/INFO ] && grep -m1 commit .gpupack/INFO || echo "built here"); bins: $(ls "$P/bin" | tr '\n' ' ')" >"$W/detail"
}

# portatrain and the test binaries with the pack's libraries (only they get LD_LIBRARY_PATH: PyTorch
# keeps its own)
pt() { LD_LIBRARY_PATH=$(cat "$W/ldpath") "$W/pack/bin/portatrain" "$@"; }
ptenv() { LD_LIBRARY_PATH=$(cat "$W/ldpath") PORTATRAIN="$W/pack/bin/portatrain" "$@"; }
export -f pt ptenv

st_devices() {
    pt devices
    local line
    line=$(pt devices | grep -E "^cuda(:[0-9]+)? " | head -1)
    echo "$line / $(pt devices | grep '^nccl' | cut -c14-)" >"$W/detail"
    [ -n "$line" ] && ! grep -qi "no CUDA device\|not built" <<<"$line"
}

st_parity() {
    [ -x "$W/pack/bin/test_backend_parity" ] || { echo "no test_backend_parity in the pack"; return 77; }
    ptenv "$W/pack/bin/test_backend_parity" cuda; local rc=$?
    echo "rc $rc: $(grep -v '^\s*$' "$LOGS/parity.log" | tail -1)" >"$W/detail"
    return $rc
}

accept_summary() {  # report.json -> one line
    python3 - "$1" <<'PY' 2>/dev/null
import json, sys
r = json.load(open(sys.argv[1]))
c = r.get("convergence", {})
print(f"{r.get('verdict')}; profile {c.get('profile')}; max rel {c.get('per_step', {}).get('max_rel_diff', float('nan')):.2e};"
      f" portability {[p.get('ok') for p in r.get('portability', [])]}")
PY
}
export -f accept_summary

st_accept_fp32() {
    pt accept --baseline cpu:fp32 --candidate cuda:fp32 --steps "$ACCEPT_STEPS" --output-dir "$W/accept-fp32"; local rc=$?
    accept_summary "$W/accept-fp32/report.json" >"$W/detail"
    return $rc
}

st_accept_bf16() {
    local base=()
    [ -d "$W/accept-fp32/baseline" ] && base=(--baseline-run "$W/accept-fp32/baseline")
    pt accept --baseline cpu:fp32 "${base[@]}" --candidate cuda:bf16 --steps "$ACCEPT_STEPS" --output-dir "$W/accept-bf16"
    local rc=$?
    accept_summary "$W/accept-bf16/report.json" >"$W/detail"
    return $rc
}

st_ckpt() {
    . "$ROOT/tests/cli_check.sh"
    pt init --config configs/tiny.json --seed 42 --output-dir "$W/tiny" >/dev/null || return 1
    run_tiny() {  # backend outdir [extra...]
        local be=$1 out=$2; shift 2
        pt train --backend "$be" --model "$W/tiny" --data data/demo/shards/train --output-dir "$out" --max-steps 12 \
            --seq-len 64 --per-device-train-batch-size 4 --learning-rate 3e-3 --warmup-steps 2 --quiet "$@"
    }
    local fail=0 w r out detail=""
    for be in cpu cuda; do run_tiny "$be" "$W/ck-$be" --save-steps 6 || { echo "FAIL: train on $be"; return 1; }; done
    curve_parity "$W/ck-cpu/metrics.jsonl" "$W/ck-cuda/metrics.jsonl" "cuda vs cpu, 12 steps" 1e-4 1 12 >>"$W/ck.txt" || fail=1
    for pair in cuda:cpu cpu:cuda; do
        w=${pair%%:*} r=${pair##*:} out="$W/ck-$w-to-$r"
        mkdir -p "$out" && cp -r "$W/ck-$w/checkpoint-6" "$out/"
        run_tiny "$r" "$out" --resume-from-checkpoint "$out/checkpoint-6" || { echo "FAIL: $r resuming $w"; fail=1; continue; }
        curve_parity "$W/ck-$w/metrics.jsonl" "$out/metrics.jsonl" "checkpoint $w -> $r" 1e-4 7 12 >>"$W/ck.txt" || fail=1
    done
    cat "$W/ck.txt"
    sed 's/: steps [0-9.]*, max rel diff/:/; s/ (bound.*//' "$W/ck.txt" | tr '\n' ';' >"$W/detail"
    return $fail
}

st_bench() {
    PYTHONUNBUFFERED=1 python3 bench/bench_gpu.py --portatrain "$W/pack/bin/portatrain" --ld-library-path "$(cat "$W/ldpath")" \
        --json "$W/bench.json" --work "$W/bench" --time-budget "${BENCH_BUDGET:-200}"; local rc=$?
    python3 - "$W/bench.json" <<'PY' >"$W/detail" 2>/dev/null
import json, sys
r = json.load(open(sys.argv[1]))
print("; ".join(f"{x['framework']} {x['ms_per_step']:.0f} ms {x['tokens_per_s']:.0f} tok/s MFU {100 * x['mfu']:.1f}%"
                for x in r.get("results", [])))
PY
    return $rc
}

st_nccl() {
    if ! LD_LIBRARY_PATH=$(cat "$W/ldpath") ldd "$W/pack/bin/portatrain" | grep -q libmpi; then
        echo "SKIP: this portatrain is built without MPI (tools/gpu_pack.sh: no mpirun on the GPU machine)"
        echo "built without MPI" >"$W/detail"; return 77
    fi
    [ -x "$(command -v mpirun)" ] || { echo "SKIP: no mpirun on this machine: the NCCL path (MPI bootstrap) cannot run"; echo "no mpirun" >"$W/detail"; return 77; }
    ptenv bash tests/test_nccl.sh; local rc=$?
    grep -E "^(ok|FAIL|SKIP|note)" "$LOGS/nccl.log" | tail -3 | tr '\n' ' ' >"$W/detail"
    return $rc
}

# ---------------------------------------------------------------- run

stage env 40 st_env
stage setup 150 st_setup
if [ -s "$W/ldpath" ]; then
    stage devices 30 st_devices
    stage parity 120 st_parity
    stage accept_fp32 120 st_accept_fp32
    stage accept_bf16 90 st_accept_bf16
    stage ckpt 60 st_ckpt
    stage nccl 60 st_nccl
    # the benchmark gets what is left (bench_gpu.py stops starting frameworks when its budget runs out)
    BENCH_BUDGET=$((BUDGET - (SECONDS - T_START) - 25)); [ "$BENCH_BUDGET" -gt 260 ] && BENCH_BUDGET=260
    export BENCH_BUDGET
    stage bench $((BENCH_BUDGET + 15)) st_bench
else
    RESULTS+=("devices..nccl|NOT RUN|0|setup failed: no portatrain")
fi

# ---------------------------------------------------------------- summary
{
    echo "gpu_check summary ($(date -u '+%Y-%m-%d %H:%M UTC'), $((SECONDS - T_START)) s of a ${BUDGET} s budget)"
    printf '%-12s %-9s %6s  %s\n' stage status seconds result
    printf '%-12s %-9s %6s  %s\n' ------------ --------- ------ ------
    for r in "${RESULTS[@]}"; do
        IFS='|' read -r n s t d <<<"$r"
        printf '%-12s %-9s %6s  %s\n' "$n" "$s" "$t" "$d"
    done
} >"$W/summary.txt"
python3 - "$W/summary.json" "${RESULTS[@]}" <<'PY'
import json, sys
rows = [dict(zip(("stage", "status", "seconds", "result"), r.split("|", 3))) for r in sys.argv[2:]]
json.dump({"stages": rows}, open(sys.argv[1], "w"), indent=1)
PY
cp "$W/summary.txt" "$W/summary.json" "$OUT/"
[ -f "$W/accept-fp32/report.html" ] && cp "$W/accept-fp32/report.html" "$OUT/accept_fp32_report.html"
[ -f "$W/accept-bf16/report.html" ] && cp "$W/accept-bf16/report.html" "$OUT/accept_bf16_report.html"
[ -f "$W/bench.json" ] && cp "$W/bench.json" "$OUT/bench.json"
for d in accept-fp32 accept-bf16; do [ -f "$W/$d/report.json" ] && cp "$W/$d/report.json" "$LOGS/$d-report.json"; done
tar -C "$W" -czf "$OUT/logs.tar.gz" logs
echo
cat "$W/summary.txt"
rm -rf "$W"
