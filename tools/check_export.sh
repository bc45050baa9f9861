#!/usr/bin/env bash
# Export parity with Hugging Face transformers: train a few steps with a
# checkpoint, `portatrain export` it (fp32 and bf16), and check with
# transformers (tools/hf_check_model.py, pip-installs torch/transformers)
# that the exported directory loads unchanged and gives portatrain's logits
# (max abs error <= 1e-4 in fp32).
#   tools/check_export.sh [BUILD] [DATA]   (DATA: a shard/dataset; default the demo's)
set -euo pipefail
BUILD=${1:-build}; DATA=${2:-data/demo/shards/train}
P="$BUILD/portatrain"; tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$P" init --config configs/tiny.json --seed 3 --output-dir "$tmp/init" 2>/dev/null
"$P" train --model "$tmp/init" --data "$DATA" --output-dir "$tmp/run" --max-steps 4 --seq-len 32 \
  --per-device-train-batch-size 2 --save-steps 4 --learning-rate 1e-3 --quiet
for dt in float32 bfloat16; do
  "$P" export --checkpoint "$tmp/run/checkpoint-4" --output-dir "$tmp/hf-$dt" --dtype $dt 2>/dev/null
  "$P" eval --model "$tmp/hf-$dt" --data "$DATA" --seq-len 32 --per-device-eval-batch-size 2 --max-batches 1 \
    --logits-out "$tmp/logits-$dt.safetensors" >/dev/null
  python3 "$(dirname "$0")/hf_check_model.py" "$tmp/hf-$dt" "$tmp/logits-$dt.safetensors" "$tmp/logits-$dt.safetensors" --atol 1e-4
done
