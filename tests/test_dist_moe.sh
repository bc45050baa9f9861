#!/usr/bin/env bash
# Qwen3-MoE under the parallel runtime (docs/DISTRIBUTED.md, "Qwen3-MoE"), 2-4 ranks oversubscribed, on the
# golden MoE fixture (8 experts, top-2, layer 0 dense, norm_topk_prob, output_router_logits with coefficient
# 0.1, so the load-balancing loss steers every step), layouts FSDP2, DP2, TP2 (experts split like the dense
# MLP, the router replicated) and TP2 x FSDP2:
#  - layout parity: every layout against the single process on the same global batch (one micro-batch per
#    step, so the global micro-batch is the single process's batch): the step-1 loss within 1e-6 relative,
#    20 steps within 1e-5 relative, the same tokens;
#  - with gradient accumulation the load-balancing loss is over the global micro-batch (every data rank's
#    micro-batch i): FSDP2 and DP2 give the same losses;
#  - resharding: the step-10 checkpoint of every layout resumes in every other one and steps 11-20 keep parity.
set -uo pipefail
: "${PORTATRAIN:?}" "${PT_SOURCE_DIR:?}"
if ! command -v mpirun >/dev/null; then echo "SKIP: mpirun not found (scripts/deps.sh installs openmpi-bin)"; exit 77; fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
. "$PT_SOURCE_DIR/tests/cli_check.sh"
fail=0
. "$PT_SOURCE_DIR/tests/mpi_env.sh"
MPIRUN=(timeout -k 5 120 mpirun --oversubscribe)
[ -n "${PT_SANITIZED:-}" ] && MPIRUN=(env ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 "${MPIRUN[@]}")
STEPS=20; GLOBAL=8; ACC=1

"$PORTATRAIN" init --config "$PT_SOURCE_DIR/tests/fixtures/golden_moe/norm/config.json" --seed 7 \
  --output-dir "$T/init" >/dev/null 2>&1 || { echo "FAIL: init"; exit 1; }
data="$PT_SOURCE_DIR/tests/fixtures/golden/untied/data.bin"

# name np tp fsdp dp
LAYOUTS="fsdp2:2:1:2:1 dp2:2:1:1:2 tp2:2:2:1:1 tp2fsdp2:4:2:2:1"

train() { # name np tp fsdp dp out [extra...]
  local name=$1 np=$2 tp=$3 fsdp=$4 dp=$5 out=$6; shift 6
  local B=$((GLOBAL / ACC / (fsdp * dp)))
  local args=(train --model "$T/init" --data "$data" --output-dir "$out" --max-steps $STEPS --seq-len 16
              --per-device-train-batch-size $B --gradient-accumulation-steps $ACC --learning-rate 3e-3
              --warmup-steps 2 --weight-decay 0.1 --quiet "$@")
  if [ "$name" = single ]; then "$PORTATRAIN" "${args[@]}"
  else "${MPIRUN[@]}" -np "$np" "$PORTATRAIN" "${args[@]}" --tp "$tp" --fsdp "$fsdp" --dp "$dp"; fi
}
parity() { python3 "$PT_SOURCE_DIR/tests/py/layout_parity.py" "$1/metrics.jsonl" "$2/metrics.jsonl" "${3:-1}"; }

train single 1 1 1 1 "$T/single" --save-steps 10 >"$T/out" 2>&1 || { echo "FAIL: single-process run"; cat "$T/out"; exit 1; }
for l in $LAYOUTS; do
  IFS=: read -r name np tp fsdp dp <<<"$l"
  train "$name" "$np" "$tp" "$fsdp" "$dp" "$T/$name" --save-steps 10 >"$T/out" 2>&1 \
    || { echo "FAIL: $name run"; cat "$T/out"; fail=1; continue; }
  if parity "$T/single" "$T/$name" >"$T/out"; then echo "ok: $name parity with the single process"
  else echo "FAIL: $name parity"; cat "$T/out"; fail=1; fi
done

# accumulation: 2 micro-batches of 4 global rows per step; both layouts form the same global micro-batches
ACC=2
for l in fsdp2:2:1:2:1 dp2:2:1:1:2; do
  IFS=: read -r name np tp fsdp dp <<<"$l"
  train "$name" "$np" "$tp" "$fsdp" "$dp" "$T/acc-$name" >"$T/out" 2>&1 || { echo "FAIL: acc $name run"; cat "$T/out"; fail=1; }
done
if parity "$T/acc-fsdp2" "$T/acc-dp2" >"$T/out"; then echo "ok: accumulation: fsdp2 and dp2 agree"
else echo "FAIL: accumulation fsdp2 vs dp2"; cat "$T/out"; fail=1; fi
ACC=1

# resharding: every layout's step-10 checkpoint continues in every other layout
for src in single $(for l in $LAYOUTS; do echo "${l%%:*}"; done); do
  for l in "single:1:1:1:1" $LAYOUTS; do
    IFS=: read -r name np tp fsdp dp <<<"$l"
    [ "$name" = "$src" ] && continue
    out="$T/re/$src-to-$name"
    if ! train "$name" "$np" "$tp" "$fsdp" "$dp" "$out" --resume-from-checkpoint "$T/$src/checkpoint-10" >"$T/out" 2>&1; then
      echo "FAIL: resume $src -> $name"; cat "$T/out"; fail=1; continue
    fi
    if parity "$T/single" "$out" 11 >"$T/out"; then echo "ok: $src checkpoint resumes in $name"
    else echo "FAIL: $src -> $name parity"; cat "$T/out"; fail=1; fi
  done
done

[ "$fail" -eq 0 ] && echo "test_dist_moe: all checks passed"
exit "$fail"
