#!/usr/bin/env bash
# Activation checkpointing on the Qwen3-0.6B shape (configs/qwen3-0.6b.json, 28 layers): for each policy,
# STEPS training steps (cpu backend, fp32, batch B x SEQ) and the activation allocation, peak RSS and
# median step time of steps 2.. (step 1 warms up). Usage: bench/act_ckpt_bench.sh [BUILD] (env STEPS,
# SEQ, B, THREADS, POLICIES).
set -euo pipefail
BUILD=${1:-build}; BIN="$BUILD/portatrain"
STEPS=${STEPS:-3}; SEQ=${SEQ:-512}; B=${B:-1}; THREADS=${THREADS:-$(nproc)}
POLICIES=${POLICIES:-"none selective:every=2 op full"}
root=$(cd "$(dirname "$0")/.." && pwd)
W=${WORK:-$(mktemp -d)}
[ -f "$W/init/model.safetensors" ] || "$BIN" init --config "$root/configs/qwen3-0.6b.json" --seed 42 --output-dir "$W/init" >/dev/null
data=${DATA:-$root/data/demo/shards/train}
echo "date $(date -u +%F) cpu '$(lscpu | sed -n 's/^Model name: *//p')' threads $THREADS batch $B x $SEQ steps $STEPS"
printf '%-20s %16s %12s %14s\n' policy activation_MiB peak_RSS_MiB median_step_s
for p in $POLICIES; do
  rm -rf "$W/run"
  OMP_NUM_THREADS=$THREADS "$BIN" train --model "$W/init" --data "$data" --output-dir "$W/run" --backend cpu \
    --max-steps "$STEPS" --seq-len "$SEQ" --per-device-train-batch-size "$B" --quiet --activation-checkpointing "$p"
  python3 - "$W/run/metrics.jsonl" "$p" <<'PY'
import json, statistics, sys
r = [json.loads(l) for l in open(sys.argv[1])]
t = statistics.median(x["step_time_s"] for x in r[1:]) if len(r) > 1 else r[0]["step_time_s"]
print("%-20s %16.1f %12.1f %14.3f" % (sys.argv[2], r[0]["activation_bytes"] / 2**20, max(x["peak_rss_mib"] for x in r), t))
PY
done
