#!/usr/bin/env bash
# The training CLI end to end on a tiny model: init is deterministic, training
# is bitwise deterministic across runs and across 1 vs 2 OpenMP threads,
# metrics.jsonl has the promised fields, the final model is an HF dir that
# eval and train load again, and gradient clipping can be disabled.
set -euo pipefail
: "${PORTATRAIN:?}" "${PT_SOURCE_DIR:?}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0; checks=0
. "$PT_SOURCE_DIR/tests/cli_check.sh"

cfg="$PT_SOURCE_DIR/tests/fixtures/golden/untied/config.json"
data="$PT_SOURCE_DIR/tests/fixtures/golden/untied/data.bin"
"$PORTATRAIN" init --config "$cfg" --seed 7 --output-dir "$tmp/init_a" 2>/dev/null
"$PORTATRAIN" init --config "$cfg" --seed 7 --output-dir "$tmp/init_b" 2>/dev/null
"$PORTATRAIN" init --config "$cfg" --seed 8 --output-dir "$tmp/init_c" 2>/dev/null
expect 'cmp -s "$tmp/init_a/model.safetensors" "$tmp/init_b/model.safetensors"' "init with the same seed differs"
expect '! cmp -s "$tmp/init_a/model.safetensors" "$tmp/init_c/model.safetensors"' "init with another seed is identical"
expect '[ -f "$tmp/init_a/config.json" ]' "init wrote no config.json"

train() { # out threads [extra...]
  local out=$1 th=$2; shift 2
  OMP_NUM_THREADS=$th "$PORTATRAIN" train --model "$tmp/init_a" --data "$data" --output-dir "$out" \
    --max-steps 12 --seq-len 16 --per-device-train-batch-size 2 --gradient-accumulation-steps 2 \
    --learning-rate 3e-3 --warmup-steps 2 --lr-scheduler-type cosine --weight-decay 0.1 --quiet "$@"
}
losses() { grep -o '"loss": [^,]*' "$1/metrics.jsonl"; }
train "$tmp/r1" 2; train "$tmp/r2" 2; train "$tmp/r3" 1
expect '[ "$(wc -l < "$tmp/r1/metrics.jsonl")" -eq 12 ]' "metrics.jsonl does not have 12 lines"
for f in step loss grad_norm lr tokens step_time_s tokens_per_s; do
  expect 'grep -q "\"$f\": " "$tmp/r1/metrics.jsonl"' "metrics.jsonl lacks $f"
done
expect '[ "$(losses "$tmp/r1")" = "$(losses "$tmp/r2")" ]' "two identical runs differ"
expect '[ "$(losses "$tmp/r1")" = "$(losses "$tmp/r3")" ]' "1 thread and 2 threads differ"
expect 'cmp -s "$tmp/r1/model.safetensors" "$tmp/r3/model.safetensors"' "final weights differ across thread counts"
first=$(losses "$tmp/r1" | head -1 | cut -d' ' -f2); last=$(losses "$tmp/r1" | tail -1 | cut -d' ' -f2)
expect 'awk -v a="$first" -v b="$last" "BEGIN{exit !(b < a)}"' "loss did not decrease ($first -> $last)"

# eval on the trained model: JSON with loss and tokens
ev=$("$PORTATRAIN" eval --model "$tmp/r1" --data "$data" --seq-len 16 --per-device-eval-batch-size 4 --max-batches 3)
expect 'echo "$ev" | grep -q "\"loss\": " && echo "$ev" | grep -q "\"tokens\": 192"' "eval output: $ev"

# without --max-batches every window once: 40 windows of 16 in batches of 3 are 14 batches (the last holds one
# window), 640 tokens (was 13 full batches, 624 tokens, the last window never read); the loss equals that of
# batches of 8 (the same windows, another summation order); more rows per batch than windows: one batch, no
# window read twice (it used to wrap)
e3=$("$PORTATRAIN" eval --model "$tmp/r1" --data "$data" --seq-len 16 --per-device-eval-batch-size 3)
e8=$("$PORTATRAIN" eval --model "$tmp/r1" --data "$data" --seq-len 16 --per-device-eval-batch-size 8)
e64=$("$PORTATRAIN" eval --model "$tmp/r1" --data "$data" --seq-len 16 --per-device-eval-batch-size 64)
expect 'echo "$e3" | grep -q "\"tokens\": 640, \"batches\": 14," && echo "$e64" | grep -q "\"tokens\": 640, \"batches\": 1,"' \
  "eval reads every window once: $e3 / $e64"
expect 'python3 -c "import json,sys; a,b,c=(json.loads(x)[\"loss\"] for x in sys.argv[1:]); sys.exit(not (abs(a-b)<=1e-6*b and abs(c-b)<=1e-6*b))" "$e3" "$e8" "$e64"' \
  "eval loss depends on the batch size: $e3 / $e8 / $e64"

# --max-grad-norm 0 disables clipping: same first-step loss, different updates
train "$tmp/noclip" 2 --max-grad-norm 0
expect '[ "$(losses "$tmp/r1" | head -1)" = "$(losses "$tmp/noclip" | head -1)" ]' "step-1 loss depends on clipping"
expect '[ "$(losses "$tmp/r1" | sed -n 4p)" != "$(losses "$tmp/noclip" | sed -n 4p)" ]' "clipping had no effect"
# the trained output dir is a loadable model dir: continue training from it
expect 'train "$tmp/cont" 2 --max-steps 2' "training from a trained output dir failed"

# precision bf16: bitwise reproducible (cpu), eval in bf16, and clear errors for what it does not do
train "$tmp/b1" 2 --backend cpu --precision bf16
train "$tmp/b2" 2 --backend cpu --bf16
expect 'cmp -s "$tmp/b1/model.safetensors" "$tmp/b2/model.safetensors" && [ "$(losses "$tmp/b1")" = "$(losses "$tmp/b2")" ]' "bf16 runs differ"
expect '[ "$(losses "$tmp/b1" | head -1)" != "$(losses "$tmp/r1" | head -1)" ]' "bf16 step-1 loss equals fp32's"
expect 'grep -Eq "\"precision\":[[:space:]]*\"bf16\"" "$tmp/b1/manifest.json"' "manifest does not record bf16"
ev=$("$PORTATRAIN" eval --model "$tmp/b1" --data "$data" --seq-len 16 --per-device-eval-batch-size 4 --max-batches 3 --precision bf16)
expect 'echo "$ev" | grep -q "\"precision\": \"bf16\""' "bf16 eval output: $ev"
err=$("$PORTATRAIN" train --model "$tmp/init_a" --data "$data" --output-dir "$tmp/bad" --max-steps 1 --seq-len 16 --precision fp16 2>&1 >/dev/null; echo "rc=$?")
expect 'echo "$err" | grep -q "precision must be fp32 or bf16" && echo "$err" | grep -q "rc=2"' "--precision fp16: $err"

echo "test_train_cli: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
