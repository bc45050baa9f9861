#!/usr/bin/env bash
# Epoch boundaries and resume (docs/DATA.md, "Epoch boundaries"): 40 rows, batch 3 x accumulation 4 = 12 rows
# per step, so "hf" epochs are 4 steps with a short last one. A run killed after step 7 and resumed from
# checkpoint-6 (over the epoch end at step 8), or resumed from checkpoint-3 (over both), gives the losses and
# final weights of the uninterrupted run, bitwise: unshuffled, shuffled, drop_last. A resume takes the
# checkpoint's semantics when no flag is given (a checkpoint written before the option existed, field absent,
# is "wrap") and refuses a flag that differs. `compare` refuses runs of different semantics as a difference of
# frozen inputs and reads a manifest without the field as "wrap".
set -uo pipefail
: "${PORTATRAIN:?}" "${PT_SOURCE_DIR:?}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0; checks=0
. "$PT_SOURCE_DIR/tests/cli_check.sh"
G="$PT_SOURCE_DIR/tests/fixtures/golden/untied"
losses() { grep -o '"loss": [^,]*' "$1/metrics.jsonl"; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
run() { # out extra...
  local out=$1; shift
  "$PORTATRAIN" train --model "$G" --data "$G/data.bin" --output-dir "$out" --max-steps 11 --seq-len 16 \
    --per-device-train-batch-size 3 --gradient-accumulation-steps 4 --learning-rate 3e-3 --warmup-steps 5 \
    --lr-scheduler-type cosine --weight-decay 0.1 --quiet "$@"
}
# drops fields from a JSON file: strip FILE KEYPATH... (KEYPATH: a.b.c)
strip() {
  local f=$1; shift
  python3 "$PT_SOURCE_DIR/tests/py/json_edit.py" "$f" "$f" "${@/#/-}"
}

for variant in plain shuffled drop_last; do
  extra=()
  [ $variant = shuffled ] && extra=(--shuffle --seed 5)
  [ $variant = drop_last ] && extra=(--dataloader-drop-last)
  run "$tmp/$variant-full" "${extra[@]}" || { echo "FAIL: $variant: train failed"; fails=$((fails+1)); }
  expect '[ "$(wc -l < "$tmp/$variant-full/metrics.jsonl")" -eq 11 ]' "$variant: 11 steps"
  PT_FAULT_KILL_AFTER_STEP=7 run "$tmp/$variant-part" --save-steps 3 "${extra[@]}" 2>/dev/null
  expect '[ "$(cat "$tmp/$variant-part/latest")" = checkpoint-6 ]' "$variant: latest is not checkpoint-6 after the kill at 7"
  # drop_last: resumed without the flag, so the checkpoint's is taken
  resume_extra=("${extra[@]}"); [ $variant = drop_last ] && resume_extra=()
  run "$tmp/$variant-part" --save-steps 3 --resume-from-checkpoint latest "${resume_extra[@]}" \
    || { echo "FAIL: $variant: resume failed"; fails=$((fails+1)); }
  expect '[ "$(losses "$tmp/$variant-full")" = "$(losses "$tmp/$variant-part")" ]' "$variant: resumed losses differ"
  expect '[ "$(sha "$tmp/$variant-full/model.safetensors")" = "$(sha "$tmp/$variant-part/model.safetensors")" ]' \
    "$variant: resumed final weights differ"
  # from checkpoint-3: over both epoch ends (steps 4 and 8)
  cp -r "$tmp/$variant-part" "$tmp/$variant-c3"
  run "$tmp/$variant-c3" --resume-from-checkpoint "$tmp/$variant-c3/checkpoint-3" "${resume_extra[@]}" \
    || { echo "FAIL: $variant: resume from checkpoint-3 failed"; fails=$((fails+1)); }
  expect '[ "$(sha "$tmp/$variant-full/model.safetensors")" = "$(sha "$tmp/$variant-c3/model.safetensors")" ]' \
    "$variant: resumed from checkpoint-3, final weights differ"
done
expect 'grep -q "\"epoch_boundary\":.*\"hf\"" "$tmp/plain-full/train_args.json"' "train_args.json lacks epoch_boundary hf"
expect 'python3 -c "import json,sys; h=json.load(open(sys.argv[1]))[\"frozen\"][\"hyperparameters\"]; sys.exit(0 if h[\"epoch_boundary\"] == \"hf\" and h[\"dataloader_drop_last\"] is False else 1)" "$tmp/plain-full/manifest.json"' \
  "manifest lacks the epoch semantics"
expect 'python3 -c "import json,sys; d=json.load(open(sys.argv[1]))[\"state\"][\"data_loader\"]; sys.exit(0 if d[\"epoch_boundary\"] == \"hf\" and d[\"dataloader_drop_last\"] is True else 1)" "$tmp/drop_last-part/checkpoint-6/checkpoint.json"' \
  "checkpoint state lacks the epoch semantics"
# metrics: the short last step of an epoch counts its real rows only (4 rows x 16 tokens), epoch as HF logs it
expect 'grep "\"step\": 4," "$tmp/plain-full/metrics.jsonl" | grep -q "\"epoch\": 1.000000, \"tokens\": 64,"' \
  "step 4: epoch 1, 64 tokens: $(grep '"step": 4,' "$tmp/plain-full/metrics.jsonl" | cut -c1-200)"

# Resuming with other semantics is refused (the checkpoint's are hf without drop_last).
for flags in "--epoch-boundary wrap" "--dataloader-drop-last"; do
  out=$(run "$tmp/plain-part" --resume-from-checkpoint "$tmp/plain-part/checkpoint-6" $flags 2>&1); rc=$?
  expect '[ $rc -eq 2 ] && echo "$out" | grep -q "the checkpoint was trained with --epoch-boundary hf"' \
    "resume with $flags not refused (rc $rc): $out"
done
out=$(run "$tmp/bad" --epoch-boundary wrap --dataloader-drop-last 2>&1); rc=$?
expect '[ $rc -eq 2 ] && echo "$out" | grep -q "needs --epoch-boundary hf"' "drop_last with wrap not refused: $out"
out=$(run "$tmp/bad" --epoch-boundary nope 2>&1); rc=$?
expect '[ $rc -eq 2 ]' "--epoch-boundary nope not refused: $out"

# wrap: the old semantics, other batches from step 4 on; a checkpoint written before the option existed (the
# fields absent) resumes as wrap with no flag, and refuses hf.
run "$tmp/wrap-full" --epoch-boundary wrap
expect '[ "$(losses "$tmp/wrap-full" | head -3)" = "$(losses "$tmp/plain-full" | head -3)" ]' "wrap and hf differ before the epoch end"
expect '[ "$(losses "$tmp/wrap-full" | sed -n 4p)" != "$(losses "$tmp/plain-full" | sed -n 4p)" ]' "wrap and hf agree at the epoch end"
PT_FAULT_KILL_AFTER_STEP=7 run "$tmp/old" --save-steps 3 --epoch-boundary wrap 2>/dev/null
strip "$tmp/old/checkpoint-6/checkpoint.json" state.data_loader.epoch_boundary state.data_loader.dataloader_drop_last \
  state.run_config.epoch_boundary state.run_config.dataloader_drop_last
out=$(run "$tmp/old" --save-steps 3 --resume-from-checkpoint latest --epoch-boundary hf 2>&1); rc=$?
expect '[ $rc -eq 2 ] && echo "$out" | grep -q "trained with --epoch-boundary wrap"' "old checkpoint resumed as hf (rc $rc): $out"
run "$tmp/old" --save-steps 3 --resume-from-checkpoint latest || { echo "FAIL: old checkpoint: resume failed"; fails=$((fails+1)); }
expect '[ "$(losses "$tmp/wrap-full")" = "$(losses "$tmp/old")" ]' "old checkpoint: resumed losses differ from wrap's"
expect '[ "$(sha "$tmp/wrap-full/model.safetensors")" = "$(sha "$tmp/old/model.safetensors")" ]' \
  "old checkpoint: resumed weights differ from wrap's"

# compare: different semantics are different frozen inputs; a manifest without the field is wrap.
out=$("$PORTATRAIN" compare "$tmp/plain-full" "$tmp/wrap-full" 2>&1); rc=$?
expect '[ $rc -ne 0 ] && echo "$out" | grep -q "frozen input frozen.hyperparameters.epoch_boundary differs"' \
  "compare hf vs wrap not refused (rc $rc): $out"
cp -r "$tmp/wrap-full" "$tmp/wrap-old"
strip "$tmp/wrap-old/manifest.json" frozen.hyperparameters.epoch_boundary frozen.hyperparameters.dataloader_drop_last
strip "$tmp/wrap-old/train_args.json" epoch_boundary dataloader_drop_last
out=$("$PORTATRAIN" compare "$tmp/wrap-old" "$tmp/wrap-full" 2>&1); rc=$?
expect '[ $rc -eq 0 ] && echo "$out" | grep -q "verdict: ACCEPTED"' "compare old manifest vs wrap (rc $rc): $out"
out=$("$PORTATRAIN" compare "$tmp/wrap-old" "$tmp/plain-full" 2>&1); rc=$?
expect '[ $rc -ne 0 ] && echo "$out" | grep -q "epoch_boundary differs"' "compare old manifest vs hf not refused (rc $rc): $out"
# without manifests: train_args.json compared, absent = wrap
rm "$tmp/wrap-old/manifest.json"
out=$("$PORTATRAIN" compare "$tmp/wrap-old" "$tmp/wrap-full" 2>&1); rc=$?
expect '[ $rc -eq 0 ]' "compare old train_args vs wrap (rc $rc): $out"
out=$("$PORTATRAIN" compare "$tmp/wrap-old" "$tmp/plain-full" 2>&1); rc=$?
expect '[ $rc -ne 0 ] && echo "$out" | grep -q "epoch_boundary"' "compare old train_args vs hf not refused (rc $rc): $out"

# Where the boundaries change no row (8 rows per step divide the 40; or 12 rows per step for 3 steps, inside the
# first epoch), they are not frozen inputs: absent from the manifest, hf and wrap runs compare ACCEPTED at exact,
# and such a run compares with one recorded before the option existed.
short() { # out rows-per-device steps extra...
  local out=$1 b=$2 n=$3; shift 3
  "$PORTATRAIN" train --model "$G" --data "$G/data.bin" --output-dir "$out" --max-steps "$n" --seq-len 16 \
    --per-device-train-batch-size "$b" --gradient-accumulation-steps 4 --learning-rate 3e-3 --quiet "$@"
}
for c in "2 7" "3 3"; do
  set -- $c
  short "$tmp/same-hf-$1" "$1" "$2" && short "$tmp/same-wrap-$1" "$1" "$2" --epoch-boundary wrap || { echo "FAIL: short runs"; fails=$((fails+1)); }
  expect '! grep -q epoch_boundary "$tmp/same-hf-$1/manifest.json"' "rows per step $(( $1 * 4 )) x $2 steps: epoch_boundary recorded although no row changes"
  out=$("$PORTATRAIN" compare "$tmp/same-hf-$1" "$tmp/same-wrap-$1" --profile exact 2>&1); rc=$?
  expect '[ $rc -eq 0 ] && echo "$out" | grep -q "verdict: ACCEPTED"' "hf vs wrap reading the same rows (rc $rc): $out"
done
expect 'grep -q "\"epoch_boundary\":[[:space:]]*\"hf\"" "$tmp/plain-full/manifest.json"' "a run whose rows change does not record epoch_boundary"

echo "test_resume_epochs: $checks checks, $fails failed"
[ $fails -eq 0 ]
