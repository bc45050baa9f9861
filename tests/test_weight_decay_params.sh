#!/usr/bin/env bash
# --weight-decay-params: hf (HF Trainer's groups, the default: no decay on norm weights) or all (TorchTitan's
# default AdamW: every parameter). One step at full lr from the same weights and batch: the gradients and the
# Adam update are the same, so every matrix comes out bit-identical and every norm weight differs by AdamW's
# decoupled decay alone, lr x wd x w0 (torch.optim.AdamW: p *= 1 - lr x wd, then the Adam step), to fp32
# rounding. The choice is recorded (train_args.json, the manifest's frozen hyperparameters), so compare refuses
# to judge an hf run against an all run; a bad value is a usage error.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
. "$S/tests/cli_check.sh"
fail=0
G=$S/tests/fixtures/golden/tied
run() { "$B" train --model "$G" --data "$G/data.bin" --output-dir "$1" --seq-len 16 --per-device-train-batch-size 2 \
    --learning-rate 1e-2 --weight-decay 0.1 --lr-scheduler-type constant --quiet "${@:2}"; }

run "$T/hf" --max-steps 1 >"$T/log" 2>&1 || { echo "FAIL: hf run"; cat "$T/log"; fail=1; }
run "$T/all" --max-steps 1 --weight-decay-params all >"$T/log" 2>&1 || { echo "FAIL: all run"; cat "$T/log"; fail=1; }

if python3 "$S/tests/py/st_decay_all_vs_hf.py" "$G/model.safetensors" "$T/hf/model.safetensors" "$T/all/model.safetensors"
then echo "ok: all decays the norm weights too, and nothing else changes"
else echo "FAIL: --weight-decay-params all vs hf after one step"; fail=1; fi

jcheck "$T/hf/train_args.json" "r['weight_decay_params'] == 'hf'" "train_args.json records hf (the default)"
jcheck "$T/all/train_args.json" "r['weight_decay_params'] == 'all'" "train_args.json records all"
jcheck "$T/hf/manifest.json" "'weight_decay_params' not in r['frozen']['hyperparameters']" \
    "the manifest of an hf run is unchanged (no weight_decay_params)"
jcheck "$T/all/manifest.json" "r['frozen']['hyperparameters']['weight_decay_params'] == 'all'" \
    "the manifest's frozen hyperparameters record all"
check 2 "weight_decay_params" -- "$B" compare "$T/hf" "$T/all"
check 2 "--weight-decay-params must be hf or all" -- run "$T/x" --max-steps 1 --weight-decay-params none
[ ! -e "$T/x" ] && echo "ok: a refused value leaves no output dir" || { echo "FAIL: output dir written"; fail=1; }
exit $fail
