#!/usr/bin/env bash
# `train --model` on TorchTitan's HF export (tests/fixtures/torchtitan_ckpt/export: weights and index, no
# config.json, no lm_head.weight since tied) with `--config`, as eval takes it. No torch needed:
# - 2 steps train; step 1's loss (before any update) is eval's loss of the same weights on the same batch;
# - the manifest hashes the config the model was built from (--config), train_args.json records its path;
# - the trained model is a complete HF dir (its own config.json): eval reads it without --config;
# - without --config the missing MODEL/config.json is named, as before the flag; a --config that is not there too.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
. "$S/tests/cli_check.sh"
fail=0
F=$S/tests/fixtures/torchtitan_ckpt
# cont.bin: TorchTitan's step 4-6 batches, 4 windows of 64 tokens a step
A=(--data "$F/cont.bin" --seq-len 64 --per-device-train-batch-size 4 --learning-rate 3e-3 --weight-decay 0.1
   --weight-decay-params all --lr-scheduler-type torchtitan --warmup-steps 1 --quiet)

"$B" train --model "$F/export" --config "$F/config.json" --output-dir "$T/run" --max-steps 2 "${A[@]}" >"$T/log" 2>&1 ||
    { echo "FAIL: train on TorchTitan's export with --config"; cat "$T/log"; fail=1; }
[ "$(grep -c . "$T/run/metrics.jsonl" 2>/dev/null)" = 2 ] && echo "ok: 2 steps from TorchTitan's export" ||
    { echo "FAIL: metrics.jsonl has no 2 steps"; fail=1; }

"$B" eval --model "$F/export" --config "$F/config.json" --data "$F/cont.bin" --seq-len 64 \
    --per-device-eval-batch-size 4 --max-batches 1 >"$T/e.json" 2>"$T/err" || { cat "$T/err"; fail=1; }
if python3 "$S/tests/py/step1_eval_loss.py" "$T/run/metrics.jsonl" "$T/e.json"
then echo "ok: step 1's loss is eval's of the export on the same batch"
else echo "FAIL: step 1's loss differs from eval's of the same weights and batch"; fail=1; fi

sha=$(sha256sum "$F/config.json" | cut -d' ' -f1)
jcheck "$T/run/manifest.json" "r['frozen']['config']['sha256'] == '$sha'" "the manifest hashes the --config file"
jcheck "$T/run/train_args.json" "r['config'] == '$(realpath "$F/config.json")'" "train_args.json records --config"
"$B" eval --model "$T/run" --data "$F/cont.bin" --seq-len 64 --per-device-eval-batch-size 4 --max-batches 1 \
    >"$T/e2.json" 2>"$T/err" && echo "ok: the trained model evaluates without --config" ||
    { echo "FAIL: eval of the trained model"; cat "$T/err"; fail=1; }

check 1 "export/config.json: cannot open" -- "$B" train --model "$F/export" --output-dir "$T/x" \
    --max-steps 1 "${A[@]}"
check 1 "nope.json: cannot open" -- "$B" train --model "$F/export" --config "$T/nope.json" --output-dir "$T/x" \
    --max-steps 1 "${A[@]}"
[ ! -e "$T/x" ] && echo "ok: a model that cannot load leaves no output dir" || { echo "FAIL: output dir written"; fail=1; }
exit $fail
