#!/usr/bin/env bash
# The cuda backend through the CLI (issue 9), on cuda-sim (the cuda backend's kernels under the host
# emulator, src/backend/cuda/sim) and, when a GPU is found, on cuda itself:
#   1. the tiny config (configs/tiny.json, demo data, 6 steps) trained on X and on cpu: every loss
#      within 1e-4 relative;
#   2. checkpoints restore across backends both ways (X <-> cpu, golden fixture): 8 steps with a save
#      at 4 on one, resumed on the other, steps 5..8 within 1e-4 relative of the writer's run;
#   3. `portatrain accept --baseline cpu:fp32 --candidate X:fp32` ACCEPTED, and `--candidate X:bf16`
#      ACCEPTED under the bf16 profile (the recorded baseline reused);
#   4. an MPI job of 2 X ranks (tp 2) against 2 cpu ranks: every loss within 1e-4 relative.
# cuda-sim runs the emulated kernels one thread at a time: the steps and shapes are the small ones above
# (accept: 8 steps, its minimum, of 2 x 32 tokens); on 2 cores 95 s lightly loaded, 2m20s at load 4-9;
# each part prints its time.
# Exit 77 when `portatrain devices` lists no cuda-sim.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cd "$S"
fail=0
. "$S/tests/cli_check.sh"

"$B" devices >"$T/devices" 2>&1
if ! grep -qE "^cuda-sim(:[0-9]+)? " "$T/devices"; then
    echo "SKIP test_cuda_cli: this build has no cuda-sim backend ($(grep -m1 "^cuda" "$T/devices" || echo "no cuda line in devices"))"
    exit 77
fi
cat "$T/devices"
BACKENDS=cuda-sim
cuda_line=$(grep -E "^cuda(:[0-9]+)? " "$T/devices" | head -1)
if [ -n "$cuda_line" ] && ! grep -qiE "no CUDA device|not built" <<<"$cuda_line"; then BACKENDS="cuda-sim cuda"
else echo "note: no CUDA device (${cuda_line:-no cuda line}): cuda-sim only"; fi
[ -d data/demo/shards/train ] || { echo "FAIL: no demo data (bash scripts/fetch_demo_data.sh)"; exit 1; }

# 0. cuBLAS is opened when a cuda backend starts, not linked: linking it made every process (the CLI, the
#    supervisor, each CPU rank) resident at ~216 MiB before main. No libcublas in ldd; `--help` peaks under
#    64 MiB RSS (229 MiB linked); `devices` opens it (every entry point resolved) and names its version; a
#    PT_CUBLAS_LIBRARY that cannot be opened is named, in `devices` and in the cuda backend's error.
if [ -n "$cuda_line" ] && ! grep -q "not built" <<<"$cuda_line"; then
    if ldd "$B" | grep -q libcublas; then echo "FAIL: the binary links cuBLAS: $(ldd "$B" | grep libcublas)"; fail=1
    else echo "ok: no libcublas in ldd"; fi
    rss=$(python3 -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)' "$B" --help)
    if [ "$rss" -lt 64 ]; then echo "ok: --help peaks at $rss MiB RSS"; else echo "FAIL: --help peaks at $rss MiB RSS"; fail=1; fi
    if grep -qE "^cublas +cuBLAS [0-9]+\.[0-9]+\.[0-9]+ from .* \(opened when a cuda backend starts\)$" "$T/devices"
    then echo "ok: devices opens cuBLAS: $(grep "^cublas" "$T/devices")"
    else echo "FAIL: devices: no cuBLAS line with a version"; fail=1; fi
    check 0 "cublas       cannot open cuBLAS (/nonexistent/libcublas.so): " -- \
        env PT_CUBLAS_LIBRARY=/nonexistent/libcublas.so "$B" devices
    if [[ " $BACKENDS " == *" cuda "* ]]; then
        check 1 "backend 'cuda': cannot open cuBLAS (/nonexistent/libcublas.so)" -- env PT_CUBLAS_LIBRARY=/nonexistent/libcublas.so \
            "$B" train --backend cuda --model "$S/tests/fixtures/golden/untied" --data "$S/tests/fixtures/golden/untied/data.bin" \
            --output-dir "$T/nocublas" --max-steps 1 --seq-len 16 --quiet
    fi
fi

# 1. the tiny config against cpu
"$B" init --config configs/tiny.json --seed 42 --output-dir "$T/tiny" >/dev/null 2>&1 || { echo "FAIL: init tiny"; exit 1; }
tiny() {  # backend outdir
    "$B" train --backend "$1" --model "$T/tiny" --data data/demo/shards/train --output-dir "$2" --max-steps 6 \
        --seq-len 32 --per-device-train-batch-size 2 --learning-rate 3e-3 --warmup-steps 2 --quiet
}
tiny cpu "$T/tiny-cpu" || { echo "FAIL: tiny on cpu"; fail=1; }
for be in $BACKENDS; do
    if tiny "$be" "$T/tiny-$be"; then
        curve_parity "$T/tiny-cpu/metrics.jsonl" "$T/tiny-$be/metrics.jsonl" "tiny $be vs cpu" 1e-4 1 6 \
            || { echo "FAIL: tiny $be vs cpu"; fail=1; }
    else echo "FAIL: tiny on $be"; fail=1; fi
done

echo "part 1: $SECONDS s"
# 2. checkpoint portability, both directions
for be in cpu $BACKENDS; do train_fixture "$be" "$T/full-$be" --save-steps 4 || { echo "FAIL: train $be"; fail=1; }; done
for be in $BACKENDS; do
    for pair in "$be:cpu" "cpu:$be"; do
        w=${pair%%:*} r=${pair##*:}
        mkdir -p "$T/res-$w-$r"
        cp -r "$T/full-$w/checkpoint-4" "$T/res-$w-$r/"
        train_fixture "$r" "$T/res-$w-$r" --resume-from-checkpoint "$T/res-$w-$r/checkpoint-4" || { echo "FAIL: $r resuming $w"; fail=1; continue; }
        curve_parity "$T/full-$w/metrics.jsonl" "$T/res-$w-$r/metrics.jsonl" "portability $w -> $r" 1e-4 5 8 \
            || { echo "FAIL: portability $w -> $r"; fail=1; }
    done
done

echo "part 2: $SECONDS s"
# 3. the acceptance suite, fp32 and bf16 candidates (short run of the default experiment)
A=(--steps 8 --checkpoint-step 4 --recovery-save-steps 2 --eval-batches 2 --seq-len 32 --per-device-train-batch-size 2)
for be in $BACKENDS; do
    check 0 "verdict: ACCEPTED" -- "$B" accept --baseline cpu:fp32 --candidate "$be:fp32" "${A[@]}" --output-dir "$T/acc-$be"
    jcheck "$T/acc-$be/report.json" "r['verdict']=='ACCEPTED' and [p['ok'] for p in r['portability']]==[True,True]" \
        "$be:fp32 accepted, checkpoints portable both ways"
    check 0 "verdict: ACCEPTED" -- "$B" accept --baseline cpu:fp32 --baseline-run "$T/acc-$be/baseline" \
        --candidate "$be:bf16" "${A[@]}" --output-dir "$T/acc-$be-bf16"
    jcheck "$T/acc-$be-bf16/report.json" "r['verdict']=='ACCEPTED' and r['convergence']['profile']=='bf16'" \
        "$be:bf16 accepted under the bf16 profile"
done

echo "part 3: $SECONDS s"
# 4. two ranks, tensor parallel 2: X against cpu
if command -v mpirun >/dev/null; then
    . "$PT_SOURCE_DIR/tests/mpi_env.sh"
    ufix="$S/tests/fixtures/golden/untied"
    tp2() {  # backend outdir
        timeout -k 5 300 mpirun --oversubscribe -np 2 "$B" train --backend "$1" --model "$ufix" --data "$ufix/data.bin" \
            --output-dir "$2" --max-steps 8 --seq-len 16 --per-device-train-batch-size 4 --learning-rate 3e-3 \
            --warmup-steps 2 --weight-decay 0.1 --tp 2 --quiet >"$2.log" 2>&1
    }
    tp2 cpu "$T/tp2-cpu" || { echo "FAIL: tp2 on cpu"; cat "$T/tp2-cpu.log"; fail=1; }
    for be in $BACKENDS; do
        if tp2 "$be" "$T/tp2-$be"; then
            curve_parity "$T/tp2-cpu/metrics.jsonl" "$T/tp2-$be/metrics.jsonl" "tp2: 2 $be ranks vs 2 cpu ranks" 1e-4 1 8 \
                || { echo "FAIL: tp2 $be vs cpu"; fail=1; }
        else echo "FAIL: tp2 on $be"; cat "$T/tp2-$be.log"; fail=1; fi
    done
else echo "note: mpirun not found: the two-rank check is not run"; fi

echo "part 4: $SECONDS s"
[ "$fail" -eq 0 ] && echo "test_cuda_cli: ok"
exit "$fail"
