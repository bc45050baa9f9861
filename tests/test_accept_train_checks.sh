#!/usr/bin/env bash
# accept checks its training flags with train's checks: every value train refuses, accept refuses too, with
# train's message (after the "train: " / "accept: " command prefix) and exit 2, before any run starts.
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cd "$S"
fail=0
G="$S/tests/fixtures/golden/untied"
"$B" init --config "$G/config.json" --seed 7 --output-dir "$T/init" >/dev/null 2>&1 || { echo "FAIL: init"; exit 1; }
A="--steps 8 --checkpoint-step 4 --recovery-save-steps 2 --eval-batches 1 --seq-len 16 --per-device-train-batch-size 2 --quiet"

# The refusal's message without "portatrain: error: " and the command's own prefix.
message() { sed -e 's/^portatrain: error: //' -e 's/^\(train\|accept\): //' "$1" | head -1; }

n=0
while IFS= read -r flags; do
    [ -z "$flags" ] && continue
    n=$((n + 1))
    # shellcheck disable=SC2086 # the flags are words
    "$B" train --model "$T/init" --data "$G/data.bin" --output-dir "$T/t$n" --max-steps 8 --seq-len 16 $flags \
        >"$T/train.out" 2>&1
    trc=$?
    # shellcheck disable=SC2086
    "$B" accept --baseline cpu:fp32 --candidate cpu:fp32 $A --model "$T/init" --train-data "$G/data.bin" \
        --eval-data "$G/data.bin" --output-dir "$T/a$n" $flags >"$T/accept.out" 2>&1
    arc=$?
    want=$(message "$T/train.out"); got=$(message "$T/accept.out")
    if [ "$trc" != 2 ]; then echo "FAIL: train $flags: exit $trc, want 2 (the table holds a value train takes)"; fail=1
    elif [ "$arc" != 2 ] || [ "$got" != "$want" ]; then
        echo "FAIL: accept $flags: exit $arc, '$got'; train refuses it (exit 2) with '$want'"; fail=1
    elif [ -e "$T/a$n" ]; then echo "FAIL: accept $flags: a run started ($T/a$n exists)"; fail=1
    else echo "ok: $flags: both refuse it: $want"; fi
done <<'FLAGS'
--learning-rate -1
--learning-rate nan
--learning_rate=x
--weight-decay -0.1
--max-grad-norm -1
--warmup-steps -2
--seed 1.5
--seq-len 0
--per-device-train-batch-size 0
--gradient-accumulation-steps 0
--gradient_accumulation_steps=2.5
--adam-beta1 1
--adam-beta1 -0.1
--adam-beta2 1.5
--adam-epsilon 0
--adam-epsilon -1e-8
--lr-scheduler-type foo
--lr-scheduler-type warmup_stable_decay
--lr-scheduler-type cosine_with_min_lr
--lr-scheduler-kwargs [1]
--lr-scheduler-type polynomial --lr-scheduler-kwargs {"power":"x"}
--epoch-boundary edge
--data-mode ragged
--shuffle=maybe
--dataloader-drop-last=2
--epoch-boundary wrap --dataloader-drop-last
FLAGS
[ "$n" -ge 20 ] || { echo "FAIL: only $n cases ran"; fail=1; }

# The exact case: --learning-rate -1, as train refuses it.
"$B" accept --baseline cpu:fp32 --candidate cpu:fp32 $A --model "$T/init" --train-data "$G/data.bin" \
    --eval-data "$G/data.bin" --output-dir "$T/lr" --learning-rate -1 >"$T/out" 2>&1
rc=$?
if [ "$rc" = 2 ] && grep -qx "portatrain: error: accept: option --learning-rate must be >= 0, got '-1'" "$T/out"; then
    echo "ok: accept --learning-rate -1 refused with train's message"
else echo "FAIL: accept --learning-rate -1: exit $rc: $(cat "$T/out")"; fail=1; fi

# And a recipe train takes, accept takes (parsed, checked, passed on): the suite runs and says so.
"$B" accept --baseline cpu:fp32 --candidate cpu:fp32 $A --model "$T/init" --train-data "$G/data.bin" \
    --eval-data "$G/data.bin" --output-dir "$T/good" --adam_beta1=0.85 --dataloader-drop-last=yes --shuffle \
    --learning-rate 2e-3 >"$T/out" 2>&1
rc=$?
if [ "$rc" -le 1 ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r['adam_beta1']==0.85 and r['dataloader_drop_last'] and r['shuffle'] and r['learning_rate']==2e-3 else 1)" "$T/good/baseline/train_args.json"; then
    echo "ok: accept passed the recipe train takes on to its runs"
else echo "FAIL: accept with a valid recipe: exit $rc: $(tail -3 "$T/out")"; fail=1; fi
exit $fail
