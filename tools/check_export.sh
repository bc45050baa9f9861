#!/usr/bin/env bash
# Export parity with Hugging Face transformers: train a few steps with a
# checkpoint, `portatrain export` it (fp32, bf16, sharded, a TP2 x FSDP2 run's and its final dir, a DP2 run's),
# and check with
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
check() { # NAME CHECKPOINT [export flags...]: export, eval with portatrain, load and run in transformers
  local name=$1 ck=$2; shift 2
  "$P" export --checkpoint "$ck" --output-dir "$tmp/hf-$name" "$@" 2>/dev/null
  "$P" eval --model "$tmp/hf-$name" --data "$DATA" --seq-len 32 --per-device-eval-batch-size 2 --max-batches 1 \
    --logits-out "$tmp/logits-$name.safetensors" >/dev/null
  echo -n "$name: "
  python3 "$(dirname "$0")/hf_check_model.py" "$tmp/hf-$name" "$tmp/logits-$name.safetensors" \
    "$tmp/logits-$name.safetensors" --atol 1e-4
}
check float32 "$tmp/run/checkpoint-4" --dtype float32
check bfloat16 "$tmp/run/checkpoint-4" --dtype bfloat16
check float16 "$tmp/run/checkpoint-4" --dtype float16 --max-shard-size 20MB
# sharded: 4 MB shards (the tiny model's 151936 x 64 embedding alone is 39 MB: one tensor per shard at most)
check sharded "$tmp/run/checkpoint-4" --max-shard-size 4000000
ls "$tmp/hf-sharded" | grep -c '^model-.*-of-.*\.safetensors$' | sed 's/^/sharded: files: /'
# a checkpoint written by 4 MPI ranks (TP 2 x FSDP 2): its slices are merged on export
if command -v mpirun >/dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
  mpirun --oversubscribe -np 4 "$P" train --model "$tmp/init" --data "$DATA" --output-dir "$tmp/run4" --max-steps 4 \
    --seq-len 32 --per-device-train-batch-size 1 --save-steps 4 --learning-rate 1e-3 --tp 2 --fsdp 2 --quiet
  check tp2fsdp2 "$tmp/run4/checkpoint-4"
  # the run's own final model dir (rank 0 gathers the shards; no export)
  "$P" eval --model "$tmp/run4" --data "$DATA" --seq-len 32 --per-device-eval-batch-size 2 --max-batches 1 \
    --logits-out "$tmp/logits-run4.safetensors" >/dev/null
  echo -n "tp2fsdp2-final-dir: "
  python3 "$(dirname "$0")/hf_check_model.py" "$tmp/run4" "$tmp/logits-run4.safetensors" "$tmp/logits-run4.safetensors" --atol 1e-4
  # data parallel (2 replicas): rank 0 alone holds every tensor
  mpirun --oversubscribe -np 2 "$P" train --model "$tmp/init" --data "$DATA" --output-dir "$tmp/rundp" --max-steps 4 \
    --seq-len 32 --per-device-train-batch-size 1 --save-steps 4 --learning-rate 1e-3 --dp 2 --quiet
  check dp2 "$tmp/rundp/checkpoint-4"
fi
# The other way: models written by transformers' save_pretrained (fp32, bf16, 20 KB shards; tied and untied,
# with transformers 5's config keys: dtype, rope_parameters, layer_types, ...) read by portatrain eval.
python3 - "$tmp" <<'PY'
import sys, torch
from transformers import Qwen3Config, Qwen3ForCausalLM
torch.manual_seed(0)
for tied in (True, False):
    c = Qwen3Config(vocab_size=151936, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, tie_word_embeddings=tied, max_position_embeddings=64)
    m = Qwen3ForCausalLM(c).eval()
    name = "%s/hfsaved-%s" % (sys.argv[1], "tied" if tied else "untied")
    m.save_pretrained(name + "-fp32")
    m.save_pretrained(name + "-sharded", max_shard_size="20MB")
    m.to(torch.bfloat16).save_pretrained(name + "-bf16")
PY
for d in "$tmp"/hfsaved-*; do
  "$P" eval --model "$d" --data "$DATA" --seq-len 32 --per-device-eval-batch-size 2 --max-batches 1 \
    --logits-out "$d.logits.safetensors" >/dev/null
  echo -n "$(basename "$d"): "
  python3 "$(dirname "$0")/hf_check_model.py" "$d" "$d.logits.safetensors" "$d.logits.safetensors" --atol 1e-4
done
