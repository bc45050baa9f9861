#!/usr/bin/env bash
# The opencl backend through the CLI (issue 10), on opencl:0:0 (PoCL's CPU device in CI):
#   1. `portatrain devices` lists cpu-ref, cpu and the OpenCL device; bad platform/device indices
#      and a malformed spec are one-line errors naming them, exit 1; with no platform (OCL_ICD_VENDORS
#      pointed at an empty dir) devices says "no OpenCL platform" and --backend opencl fails in one line;
#   2. checkpoints restore across backends both ways (opencl <-> cpu-ref, opencl <-> cpu): train 8
#      steps with a save at 4 on one, resume on the other, steps 5..8 within 1e-4 relative of the
#      writer's uninterrupted run;
#   3. padded mode with sequence-length buckets: one recompilation per new bucket, in metrics.jsonl;
#   4. `portatrain accept --candidate opencl:fp32` on the embedded default (configs/tiny.json, demo
#      data; short): ACCEPTED, and report.json/html carry compile time (also as a "compilation" phase),
#      cache hits/misses and recompilations; the runs after the candidate's first load every program
#      from the cache;
#   5. --precision bf16 against cpu-ref's on the tiny config (10 steps, demo data): step-1 loss within
#      1e-4 relative, every step within 1e-3 (measured: ~2e-8 and ~3e-5), and the step-1 loss visibly
#      not the fp32 one (the casts are in effect).
# Exit 77 (skipped) when this build has no opencl backend or no OpenCL platform is found.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cd "$S"
fail=0
. "$S/tests/cli_check.sh"
export PT_OPENCL_CACHE="$T/clcache"   # a cold program cache of our own

"$B" devices >"$T/devices" 2>&1
if grep -q "no OpenCL platform\|opencl       not built" "$T/devices"; then
    echo "SKIP test_opencl_cli: $(grep opencl "$T/devices")"; exit 77
fi
cat "$T/devices"
for be in "^cpu-ref " "^cpu " "^opencl:0:0 "; do
    grep -q "$be" "$T/devices" || { echo "FAIL: devices lacks $be"; fail=1; }
done


# 1. bad input: one line naming the index, non-zero exit, before any work
check 1 "no OpenCL platform 7" -- train_fixture opencl:7:0 "$T/bad"
[ "$(wc -l < "$T/out")" -eq 1 ] || { echo "FAIL: more than one line for a bad platform index"; fail=1; }
check 1 "platform 0 has no device 9" -- train_fixture opencl:0:9 "$T/bad"
check 1 "expected opencl\[:PLATFORM\[:DEVICE\]\]" -- train_fixture opencl:x "$T/bad"
train_fixture opencl:0:0 "$T/explicit" --max-steps 1 || { echo "FAIL: --backend opencl:0:0"; fail=1; }
# no platform at all (ocl-icd's OCL_ICD_VENDORS pointed at an empty place): said cleanly
if OCL_ICD_VENDORS="$T/none" "$B" devices 2>&1 | grep -q "^opencl  *no OpenCL platform$"; then
    OCL_ICD_VENDORS="$T/none" check 1 "no OpenCL platform found" -- train_fixture opencl "$T/bad"
    [ "$(wc -l < "$T/out")" -eq 1 ] || { echo "FAIL: more than one line without a platform"; fail=1; }
else echo "note: this OpenCL loader ignores OCL_ICD_VENDORS; the no-platform case is not exercised"; fi

# 2. checkpoint portability, both directions
for be in cpu-ref cpu opencl; do train_fixture "$be" "$T/full-$be" --save-steps 4 || { echo "FAIL: train $be"; fail=1; }; done
for pair in opencl:cpu-ref cpu-ref:opencl opencl:cpu cpu:opencl; do
    w=${pair%%:*} r=${pair##*:}
    mkdir -p "$T/res-$w-$r"
    cp -r "$T/full-$w/checkpoint-4" "$T/res-$w-$r/"
    train_fixture "$r" "$T/res-$w-$r" --resume-from-checkpoint "$T/res-$w-$r/checkpoint-4" || { echo "FAIL: $r resuming $w"; fail=1; }
    curve_parity "$T/full-$w/metrics.jsonl" "$T/res-$w-$r/metrics.jsonl" "portability $w -> $r" 1e-4 5 8 \
        || { echo "FAIL: portability $w -> $r"; fail=1; }
done

# 3. padded mode, buckets 32/64/128/256: a recompilation per new bucket length, visible per step
"$B" init --config configs/tiny.json --seed 42 --output-dir "$T/tiny" 2>/dev/null
"$B" train --backend opencl --model "$T/tiny" --data data/demo/shards/train --output-dir "$T/padded" --max-steps 6 \
    --seq-len 256 --per-device-train-batch-size 1 --data-mode padded --shuffle --quiet || { echo "FAIL: padded run"; fail=1; }
if python3 "$S/tests/py/opencl_recompilations.py" "$T/padded/metrics.jsonl"
then :; else echo "FAIL: padded-mode recompilation counter"; fail=1; fi

# 4. the acceptance suite with the opencl candidate (short run of the default experiment), from a
# cold program cache: the candidate's first run compiles, every later opencl run loads
export PT_OPENCL_CACHE="$T/clcache-accept"
check 0 "verdict: ACCEPTED" -- "$B" accept --baseline cpu-ref:fp32 --candidate opencl:fp32 --steps 8 --checkpoint-step 4 \
    --recovery-save-steps 2 --eval-batches 2 --output-dir "$T/acc"
R="$T/acc/report.json"
if python3 "$S/tests/py/opencl_accept_compile.py" "$R" "$T/acc"
then :; else echo "FAIL: report.json compile fields / verdict / cache hits"; fail=1; fi
grep -q "Kernel compilation" "$T/acc/report.html" && grep -q "recompilations" "$T/acc/report.html" \
    || { echo "FAIL: report.html lacks the kernel compilation table"; fail=1; }
# its scorecard in Chromium: every cell with its unit, the candidate's compile time a number of seconds, the
# device PoCL's (not the host CPU's)
PT_REPORT_JSON="$R" bash "$S/tests/test_report_chromium.sh" >"$T/chromium.log" 2>&1 \
    && echo "ok: the opencl report's scorecard in Chromium" || { echo "FAIL: opencl scorecard"; cat "$T/chromium.log"; fail=1; }
python3 -c "import json,sys; d=json.load(open(sys.argv[1]))['candidate']['device']; sys.exit(0 if d.startswith('OpenCL 0:0') and 'driver' in d else 1)" "$R" \
    && echo "ok: the candidate's device is the OpenCL device and driver" || { echo "FAIL: candidate device"; fail=1; }

# 5. precision bf16: opencl against cpu-ref on the tiny model initialised in 3
bf() {  # backend outdir [extra...]
    local be=$1 out=$2; shift 2
    "$B" train --backend "$be" --model "$T/tiny" --data data/demo/shards/train --output-dir "$out" --max-steps 10 \
        --seq-len 32 --per-device-train-batch-size 2 --learning-rate 3e-3 --warmup-steps 2 --quiet "$@"
}
bf cpu-ref "$T/bf16-ref" --precision bf16 || { echo "FAIL: bf16 run on cpu-ref"; fail=1; }
bf opencl "$T/bf16-ocl" --precision bf16 || { echo "FAIL: bf16 run on opencl"; fail=1; }
bf opencl "$T/fp32-ocl" --max-steps 1 || { echo "FAIL: fp32 run on opencl"; fail=1; }
if python3 "$S/tests/py/bf16_curve_parity.py" "$T/bf16-ref/metrics.jsonl" "$T/bf16-ocl/metrics.jsonl" "$T/fp32-ocl/metrics.jsonl"
then :; else echo "FAIL: bf16 opencl vs cpu-ref losses"; fail=1; fi

[ "$fail" -eq 0 ] && echo "test_opencl_cli: ok"
exit "$fail"
