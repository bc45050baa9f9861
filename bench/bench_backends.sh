#!/usr/bin/env bash
# Training throughput of the backends on this machine (docs/RESULTS.md): tokens/s and ms/step,
# medians of 3 repetitions, each the median step time of its steps after the first (warm-up,
# which also holds the OpenCL program builds). Demo data (make data), packed windows, fp32.
#   bash bench/bench_backends.sh [BUILD_DIR] [BACKENDS...]     default: build cpu opencl
# Configs: tiny (configs/tiny.json, batch 4 x 64) and small (hidden 256, 4 layers, 8/4 heads,
# intermediate 768, Qwen3's vocabulary; batch 4 x 128).
set -euo pipefail
BUILD=${1:-build}; shift || true
BACKENDS=${*:-cpu opencl}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN="$BUILD/portatrain"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
python3 - "$ROOT/configs/tiny.json" "$T/small.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
         head_dim=32)
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
"$BIN" init --config "$ROOT/configs/tiny.json" --seed 42 --output-dir "$T/tiny" 2>/dev/null
"$BIN" init --config "$T/small.json" --seed 42 --output-dir "$T/small" 2>/dev/null
run() {  # config seq steps backend -> prints "tok/s ms/step" (median over steps 2..)
    "$BIN" train --backend "$4" --model "$T/$1" --data "$ROOT/data/demo/shards/train" --output-dir "$T/run" \
        --max-steps "$3" --seq-len "$2" --per-device-train-batch-size 4 --learning-rate 3e-3 --quiet
    python3 -c "
import json, statistics, sys
r = [json.loads(l) for l in open('$T/run/metrics.jsonl')][1:]
print(statistics.median(x['tokens_per_s'] for x in r), 1000 * statistics.median(x['step_time_s'] for x in r))"
    rm -rf "$T/run"
}
echo "config backend tokens_per_s ms_per_step (median of 3)"
for cfg in "tiny 64 10" "small 128 6"; do
    set -- $cfg
    for be in $BACKENDS; do
        res=$(for r in 1 2 3; do run "$1" "$2" "$3" "$be"; done | sort -n | sed -n 2p)
        echo "$1 $be $res"
    done
done
