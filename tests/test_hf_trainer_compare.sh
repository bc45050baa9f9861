#!/usr/bin/env bash
# A real Hugging Face Trainer run against portatrain: tests/fixtures/compare/hf_trainer/ holds the
# trainer_state.json of tools/hf_trainer_run.py (transformers.Trainer, fp32, eager) and the flags and
# input hashes it ran with (hf_run.json). portatrain trains the same model (portatrain init, seed 42:
# the same bytes, checked) on the same data with the same flags, and `compare` must say ACCEPTED with
# step-1 loss within 1e-6; a wrong kernel and a changed learning rate must be REJECTED for their reasons.
# Needs no Python ML stack (python3 stdlib only).
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
. "$S/tests/cli_check.sh"
F="$S/tests/fixtures/compare/hf_trainer"
DATA="$S/tests/fixtures/golden/untied/data.bin"
"$B" init --config "$S/tests/fixtures/golden/untied/config.json" --seed 42 --output-dir "$T/m" >/dev/null || exit 1

# The frozen inputs: an imported log carries no manifest, so check here that the model portatrain
# initialises and the data are the bytes the HF run trained on.
python3 "$S/tests/py/hf_frozen_inputs.py" "$F/hf_run.json" "$T/m/config.json" "$T/m/model.safetensors" "$DATA" || { echo "FAIL: frozen inputs differ from the HF run's"; exit 1; }

# portatrain train's flags from the HF run's record (one source for both sides).
FLAGS=$(python3 "$S/tests/py/hf_run_flags.py" "$F/hf_run.json") || exit 1
echo "flags: $FLAGS"
# run OUT BACKEND [overriding flags...]
run() {
    local out=$1 be=$2; shift 2
    "$B" train --backend "$be" --model "$T/m" --data "$DATA" --output-dir "$out" $FLAGS --logging-steps 1 --quiet "$@"
}
run "$T/ref" cpu-ref >/dev/null 2>&1 || { echo "cpu-ref train failed"; exit 1; }

check 0 "verdict: ACCEPTED" -- "$B" compare "$F" "$T/ref" --format-a hf --json "$T/r.json"
cat "$T/out"
check 0 "verdict: ACCEPTED" -- "$B" compare "$F/trainer_state.json" "$T/ref"   # format detected
jcheck "$T/r.json" 'r["step0"]["step"] == 1 and r["step0"]["loss_rel_diff"] < 1e-6' "step-1 loss within 1e-6 of HF's"
jcheck "$T/r.json" 'r["step0"]["grad_norm_rel_diff"] < 1e-5' "step-1 grad norm (before clipping, as HF logs it) within 1e-5"
jcheck "$T/r.json" 'r["per_step"]["n"] == 30 and r["per_step"]["missing"] == 0' "all 30 HF steps compared"
jcheck "$T/r.json" 'r["per_step"]["max_rel_diff"] < 1e-5' "every step's loss within 1e-5 of HF's (fp32 profile allows 1e-2)"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('measured: step-1 loss rel diff %.3g, grad norm %.3g, per-step max %.3g, median %.3g' % (r['step0']['loss_rel_diff'], r['step0']['grad_norm_rel_diff'], r['per_step']['max_rel_diff'], r['per_step']['median_rel_diff']))" "$T/r.json"
# The learning rate of every step: HF's scheduler (warm-up, cosine) and portatrain's.
python3 "$S/tests/py/hf_lr_match.py" "$F/trainer_state.json" "$T/ref/metrics.jsonl" && echo "ok: lr of every step = HF's" || { echo "FAIL: lr differs from HF's"; fail=1; }

# Wrong runs: a wrong RMSNorm epsilon in the fast backend, and a 20% higher learning rate.
PT_FAULT_KERNEL=rmsnorm_eps run "$T/bad" cpu >/dev/null 2>&1 || { echo "faulty train failed"; exit 1; }
check 1 "step-0 (step 1) grad-norm rel diff" -- "$B" compare "$F" "$T/bad" --format-a hf
grep -q "verdict: REJECTED" "$T/out" || { echo "FAIL: wrong kernel not REJECTED"; fail=1; }
LR=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['learning_rate'] * 1.2)" "$F/hf_run.json")
run "$T/lr" cpu-ref --learning-rate "$LR" >/dev/null 2>&1 || { echo "lr train failed"; exit 1; }
check 1 "early-step (first 10) loss rel diff" -- "$B" compare "$F" "$T/lr" --format-a hf

# More HF Trainer runs of the same model and data (fixtures README.md): other flags, each checked the same way
# (frozen inputs, ACCEPTED, every step's loss, grad norm and lr).
#   hf_trainer_padded:   --data-mode padded (EOS 33: one document per row, labels -100 on the padding), batch
#                        2 x accumulation 2, so the micro-batches of a step have different numbers of targets and
#                        the loss must be weighted by them (HF: num_items_in_batch); warm-up 3 + linear, wd 0.1.
#   hf_trainer_windowed: HF logging_steps 3 (its loss is the mean over the steps since its previous log; compare
#                        averages portatrain's per-step losses over the same steps); batch 1 x accumulation 4,
#                        warm-up 4 + constant_with_warmup, betas 0.8/0.95, epsilon 1e-6, no clipping
#                        (--max-grad-norm 0), wd 0.01.
#   hf_trainer_epochs:   HF's own DataLoader (tools/hf_trainer_run.py --epoch-boundary hf): 40 rows, batch 3 x
#                        accumulation 4, so rows per step (12) do not divide the rows, an epoch ends with a short
#                        micro-batch and a step of 2 micro-batches, 10 steps over 2.5 epochs; portatrain's default
#                        epoch boundaries (hf) must match, `--epoch-boundary wrap` must be REJECTED.
#   hf_trainer_drop_last: the same with dataloader_drop_last and num_train_epochs 2.5 (HF resolves max_steps).
#   hf_trainer_padded_epochs: padded mode, 50 rows, batch 3 x accumulation 2 (9 steps per epoch, the last one
#                        micro-batch of 2 rows), 20 steps.
# The first three ran on an IterableDataset in portatrain's wrap order; their rows per step divide the rows
# (or the run ends within the first epoch), where wrap and hf give the same batches.
extra() {
    local name=$1 X="$S/tests/fixtures/compare/$1"
    python3 "$S/tests/py/hf_frozen_inputs.py" "$X/hf_run.json" "$T/m/config.json" "$T/m/model.safetensors" "$DATA" || { echo "FAIL: $name: frozen inputs differ from the HF run's"; fail=1; return; }
    local flags
    flags=$(python3 "$S/tests/py/hf_run_flags.py" "$X/hf_run.json" extended) || { fail=1; return; }
    local data=$DATA
    if grep -q '"data_mode": "padded"' "$X/hf_run.json"; then
        # a one-shard data set over the same bytes, whose dataset.json gives padded mode its EOS id
        data="$T/ds_$name"
        mkdir -p "$data" && cp "$DATA" "$data/shard-00000.bin"
        python3 "$S/tests/py/hf_dataset_json.py" "$X/hf_run.json" "$data" || { fail=1; return; }
    fi
    echo "$name flags: $flags"
    LAST_FLAGS=$flags
    "$B" train --backend cpu-ref --model "$T/m" --data "$data" --output-dir "$T/x_$name" $flags --quiet \
        >"$T/x_$name.log" 2>&1 || { echo "FAIL: $name: train failed"; cat "$T/x_$name.log"; fail=1; return; }
    check 0 "verdict: ACCEPTED" -- "$B" compare "$X" "$T/x_$name" --format-a hf --json "$T/x_$name.json"
    cat "$T/out"
    python3 "$S/tests/py/hf_trainer_match.py" "$X/trainer_state.json" "$T/x_$name/metrics.jsonl" "$T/x_$name.json" "$name" || { echo "FAIL: $name: differs from HF"; fail=1; }
}
extra hf_trainer_padded
extra hf_trainer_windowed
extra hf_trainer_epochs
EPOCH_FLAGS=$LAST_FLAGS
extra hf_trainer_drop_last
extra hf_trainer_padded_epochs
# The same run with the old semantics (full steps straddling epochs) reads other rows from step 4 on: REJECTED.
"$B" train --backend cpu-ref --model "$T/m" --data "$DATA" --output-dir "$T/wrap" --quiet ${EPOCH_FLAGS/--epoch-boundary hf/} \
    --epoch-boundary wrap >/dev/null 2>&1 || { echo "FAIL: wrap train failed"; fail=1; }
check 1 "first at step 4" -- "$B" compare "$S/tests/fixtures/compare/hf_trainer_epochs" "$T/wrap" --format-a hf
exit $fail
