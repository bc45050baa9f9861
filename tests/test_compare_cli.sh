#!/usr/bin/env bash
# portatrain compare on real short runs (cpu vs cpu-ref, wrong kernel, frozen-input change, exact profile),
# imported logs and bad input. Each check must be able to fail: it asserts exit code and reason text.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
. "${PT_SOURCE_DIR:?}/tests/cli_check.sh"
"$B" init --config "$S/configs/tiny.json" --output-dir "$T/m" --seed 42 >/dev/null || exit 1
# cpu-ref runs ~15 s/step under ASan/UBSan at 4 rows: 4 steps of 2 rows there (the windows shrink to what exists).
STEPS=${PT_COMPARE_STEPS:-12} MB=4; [ -n "${PT_SANITIZED:-}" ] && { STEPS=4 MB=2; }
F="--model $T/m --data $S/data/demo/shards/train --max-steps $STEPS --seq-len 64
   --per-device-train-batch-size $MB --learning-rate 3e-3 --warmup-steps 5 --lr-scheduler-type cosine
   --weight-decay 0.1 --max-grad-norm 1.0 --seed 42 --quiet"
"$B" train $F --backend cpu-ref --output-dir "$T/ref" >/dev/null 2>&1 || { echo "cpu-ref train failed"; exit 1; }
"$B" train $F --backend cpu --output-dir "$T/cpu" >/dev/null 2>&1 || exit 1
PT_FAULT_KERNEL=rmsnorm_eps "$B" train $F --backend cpu --output-dir "$T/bad" >/dev/null 2>&1 || exit 1
"$B" train $F --backend cpu --learning-rate 1e-3 --output-dir "$T/lr" >/dev/null 2>&1 || exit 1

check 0 "verdict: ACCEPTED" -- "$B" compare "$T/ref" "$T/cpu" --json "$T/r.json"
grep -q '"verdict":.*"ACCEPTED"' "$T/r.json" || { echo "FAIL: --json"; fail=1; }
check 1 "step-0 (step 1) grad-norm rel diff" -- "$B" compare "$T/ref" "$T/bad"
check 2 "frozen input frozen.hyperparameters.learning_rate differs" -- "$B" compare "$T/ref" "$T/lr"
check 0 "verdict: ACCEPTED" -- "$B" compare "$T/ref" "$T/ref" --profile exact
check 1 "verdict: REJECTED" -- "$B" compare "$T/ref" "$T/cpu" --profile exact
check 0 "frozen inputs: unverified" -- "$B" compare "$S/tests/fixtures/compare/curve.csv" "$S/tests/fixtures/compare/curve.csv"
# curve.jsonl ends at step 2, curve.csv at step 3: a run that stopped early is never ACCEPTED
check 1 "curve.jsonl) stopped at step 2: its log ends there and run A's goes on to step 3" -- \
    "$B" compare "$S/tests/fixtures/compare/curve.csv" "$S/tests/fixtures/compare/curve.jsonl"
check 2 "bad.csv:3" -- "$B" compare "$S/tests/fixtures/compare/curve.csv" "$S/tests/fixtures/compare/bad.csv"
check 2 "$T/nope" -- "$B" compare "$T/nope" "$T/cpu"
echo '{"per_step_loss": "x"}' >"$T/tol.json"
check 2 "tol.json" -- "$B" compare "$T/ref" "$T/cpu" --profile custom --tolerances "$T/tol.json"
exit $fail
