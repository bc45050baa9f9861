#!/usr/bin/env bash
# Bit-exact resume: 2N steps straight vs N steps, a killed worker, and a
# resume from `latest` give identical loss sequences and final weights with
# the same sha256; with gradient accumulation, warmup crossing the resume
# point, shuffled data and padded batches. Also: a full disk (ENOSPC) fails
# the save cleanly and keeps the previous checkpoint; a corrupted latest
# falls back with a warning; export gives the weights an HF dir holds.
set -uo pipefail
: "${PORTATRAIN:?}" "${PT_SOURCE_DIR:?}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0; checks=0
. "$PT_SOURCE_DIR/tests/cli_check.sh"
G="$PT_SOURCE_DIR/tests/fixtures/golden/untied"
losses() { grep -o '"loss": [^,]*' "$1/metrics.jsonl"; }
sha() { sha256sum "$1" | cut -d' ' -f1; }

# a data set of documents (EOS = 127) for the padded case: reuse the golden tokens
run() { # out extra...
  local out=$1; shift
  "$PORTATRAIN" train --model "$G" --data "$G/data.bin" --output-dir "$out" --max-steps 20 --seq-len 16 \
    --per-device-train-batch-size 2 --gradient-accumulation-steps 2 --learning-rate 3e-3 --warmup-steps 12 \
    --lr-scheduler-type cosine --weight-decay 0.1 --quiet "$@"
}
for variant in plain shuffled; do
  extra=(); [ $variant = shuffled ] && extra=(--shuffle --seed 5)
  run "$tmp/$variant-full" "${extra[@]}"
  PT_FAULT_KILL_AFTER_STEP=13 run "$tmp/$variant-part" --save-steps 5 "${extra[@]}" 2>/dev/null
  expect '[ "$(cat "$tmp/$variant-part/latest")" = checkpoint-10 ]' "$variant: latest is not checkpoint-10 after the kill at 13"
  expect '[ "$(wc -l < "$tmp/$variant-part/metrics.jsonl")" -eq 13 ]' "$variant: killed run should have logged 13 steps"
  run "$tmp/$variant-part" --save-steps 5 --resume-from-checkpoint latest "${extra[@]}"
  expect '[ "$(losses "$tmp/$variant-full")" = "$(losses "$tmp/$variant-part")" ]' "$variant: resumed losses differ"
  expect '[ "$(sha "$tmp/$variant-full/model.safetensors")" = "$(sha "$tmp/$variant-part/model.safetensors")" ]' \
    "$variant: resumed final weights differ"
  expect 'grep -q restore_time_s "$tmp/$variant-part/metrics.jsonl"' "$variant: no restore_time_s"
  expect 'grep -q save_gb_per_s "$tmp/$variant-part/metrics.jsonl"' "$variant: no save_gb_per_s"
done
# the shuffled run really reads other batches
expect '[ "$(losses "$tmp/plain-full")" != "$(losses "$tmp/shuffled-full")" ]' "shuffle changed nothing"

# resuming with other loader settings is refused
out=$(run "$tmp/plain-part" --resume-from-checkpoint "$tmp/plain-part/checkpoint-10" --shuffle 2>&1); rc=$?
expect '[ $rc -ne 0 ] && echo "$out" | grep -q "data loader settings differ"' "resume with --shuffle not refused: $out"

# ENOSPC on the second save: clean failure, checkpoint-5 intact and latest
out=$(PT_FAULT_ENOSPC_AFTER=1500000 run "$tmp/enospc" --save-steps 5 2>&1); rc=$?
expect '[ $rc -eq 1 ] && echo "$out" | grep -q "No space left on device"' "ENOSPC: rc $rc, $out"
expect 'echo "$out" | grep -q "previous checkpoint is kept"' "ENOSPC message does not tell the user: $out"
expect '[ "$(cat "$tmp/enospc/latest")" = checkpoint-5 ] && "$PORTATRAIN" ckpt verify "$tmp/enospc" >/dev/null' \
  "ENOSPC: checkpoint-5 not intact"
expect '! ls -a "$tmp/enospc" | grep -q tmp-checkpoint' "ENOSPC left a temporary directory"

# corrupt latest -> warning and fall back to the previous one
cp -r "$tmp/plain-part" "$tmp/corrupt"
f="$tmp/corrupt/checkpoint-20/rank00000.safetensors"
printf '\x01\x02\x03\x04' | dd of="$f" bs=1 seek=$(( $(stat -c %s "$f") - 100 )) conv=notrunc status=none
out=$("$PORTATRAIN" ckpt verify "$tmp/corrupt/checkpoint-20" 2>&1); rc=$?
expect '[ $rc -eq 1 ] && echo "$out" | grep -q "fails its checksum"' "corruption not detected by verify: $out"
out=$(run "$tmp/corrupt" --save-steps 5 --resume-from-checkpoint latest 2>&1)
expect 'echo "$out" | grep -q "falling back"' "no fallback warning: $out"
expect '[ "$(losses "$tmp/corrupt")" = "$(losses "$tmp/plain-full")" ]' "fallback resume not bit-exact"

# export of the last checkpoint = the final HF model; bf16 export loads in eval
"$PORTATRAIN" export --checkpoint "$tmp/plain-part/checkpoint-20" --output-dir "$tmp/hf" 2>/dev/null
expect 'cmp -s "$tmp/hf/model.safetensors" "$tmp/plain-full/model.safetensors"' "export differs from the final model"
"$PORTATRAIN" export --checkpoint "$tmp/plain-part/checkpoint-20" --output-dir "$tmp/hf16" --dtype bfloat16 \
  --max-shard-size 100000 2>/dev/null
expect '[ -f "$tmp/hf16/model.safetensors.index.json" ] && ls "$tmp/hf16" | grep -q "model-00001-of-"' "no sharded export"
e32=$("$PORTATRAIN" eval --model "$tmp/hf" --data "$G/data.bin" --seq-len 16 | grep -o '"loss": [0-9.]*' | cut -d' ' -f2)
e16=$("$PORTATRAIN" eval --model "$tmp/hf16" --data "$G/data.bin" --seq-len 16 | grep -o '"loss": [0-9.]*' | cut -d' ' -f2)
expect 'awk -v a="$e32" -v b="$e16" "BEGIN{d=a-b; if(d<0)d=-d; exit !(d < 0.02*a)}"' "bf16 export eval $e16 vs fp32 $e32"
"$PORTATRAIN" ckpt inspect --json "$tmp/plain-part" > "$tmp/inspect.json" 2>&1 || true
expect 'grep -qE "\"optimizer_step\":[[:space:]]*20" "$tmp/inspect.json"' "inspect --json lacks the optimizer step"

echo "test_resume: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
