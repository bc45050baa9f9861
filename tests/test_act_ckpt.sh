#!/usr/bin/env bash
# Activation checkpointing changes memory, not results (issue 11): with every policy (none, full,
# selective, selective:every=1, op) and on cpu-ref and cpu, 10 training steps give bitwise the same
# losses, gradient norms and final weights, and the activation allocation shrinks as the policy says
# (a 6-layer model, so that a shared recompute buffer is worth it); the same in bf16 on cpu. A bad
# policy is one clear error.
set -uo pipefail
: "${PORTATRAIN:?}" "${PT_SOURCE_DIR:?}"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
. "$PT_SOURCE_DIR/tests/cli_check.sh"
fail=0
STEPS=10; [ -n "${PT_SANITIZED:-}" ] && { STEPS=3; echo "sanitized build: $STEPS steps a run"; }  # same code paths
python3 "$PT_SOURCE_DIR/tests/py/json_edit.py" "$PT_SOURCE_DIR/tests/fixtures/golden/untied/config.json" "$T/config.json" \
  num_hidden_layers=6 -layer_types  # one layer_types entry a layer: dropped with the count changed
"$PORTATRAIN" init --config "$T/config.json" --seed 3 --output-dir "$T/init" >/dev/null 2>&1
data="$PT_SOURCE_DIR/tests/fixtures/golden/untied/data.bin"
# run_policy NAME POLICY TRAIN-ARGS...: STEPS steps into $T/NAME-POLICY; for a policy other than none, its
# losses, grad norms and final weights must be bitwise those of $T/NAME-none.
run_policy() {
  local name=$1 p=$2; shift 2
  OMP_NUM_THREADS=2 "$PORTATRAIN" train --model "$T/init" --data "$data" --output-dir "$T/$name-$p" --max-steps $STEPS \
    --seq-len 16 --per-device-train-batch-size 4 --gradient-accumulation-steps 2 --learning-rate 3e-3 \
    --quiet --activation-checkpointing "$p" "$@" 2>"$T/err" || { echo "FAIL: $name $p: $(cat "$T/err")"; fail=1; return; }
  [ "$p" = none ] && return
  if cmp -s "$T/$name-none/model.safetensors" "$T/$name-$p/model.safetensors" &&
     diff <(cut -d, -f1-3 "$T/$name-none/metrics.jsonl") <(cut -d, -f1-3 "$T/$name-$p/metrics.jsonl") >/dev/null; then
    echo "ok: $name $p: losses, grad norms and final weights bitwise those of none"
  else echo "FAIL: $name $p differs from none"; fail=1; fi
}
for be in cpu-ref cpu; do
  for p in none full selective selective:every=1 selective:every=3 op; do run_policy "$be" "$p" --backend "$be"; done
  check 0 "memory ordered" -- python3 "$PT_SOURCE_DIR/tests/py/act_memory_order.py" "$T" "$be"
done
# bf16 (the casts happen in the recomputation too): full, selective and op bitwise those of none
for p in none full selective op; do run_policy bf16 "$p" --backend cpu --precision bf16; done
cmp -s "$T/bf16-none/model.safetensors" "$T/cpu-none/model.safetensors" \
  && { echo "FAIL: the bf16 run's weights equal the fp32 run's"; fail=1; } || echo "ok: bf16 differs from fp32"
check 2 "want none, full, selective" -- "$PORTATRAIN" train --model "$T/init" --data "$data" --output-dir "$T/bad" \
  --max-steps 1 --seq-len 16 --activation-checkpointing selective:every=0
[ "$fail" -eq 0 ] && echo "test_act_ckpt: all checks passed"
exit "$fail"
