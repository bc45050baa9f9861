#!/usr/bin/env bash
# Crash safety: SIGKILL the trainer at every stage of a save (via the
# PT_CKPT_CRASH_AT switch: after the tensor file, after the manifest, between
# the rename and the `latest` update, after the update) and at 50+ random
# moments of a run that saves every step. After each kill, `latest` must name
# a complete checkpoint that verifies, and resuming must continue bit-exactly:
# the final losses and weights equal the uninterrupted run's.
set -uo pipefail
: "${PORTATRAIN:?}" "${PT_SOURCE_DIR:?}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0; checks=0
. "$PT_SOURCE_DIR/tests/cli_check.sh"
G="$PT_SOURCE_DIR/tests/fixtures/golden/tied"
# ASan+UBSan builds (the same code, ~2-3x slower a step) run shorter: 12 then 60 steps, 15 random kills
STEPS=40 LONG=150 KILLS=50; [ -n "${PT_SANITIZED:-}" ] && { STEPS=12 LONG=60 KILLS=15; echo "sanitized build: $KILLS random kills in $LONG steps"; }
run() { # out extra...
  local out=$1; shift
  "$PORTATRAIN" train --model "$G" --data "$G/data.bin" --output-dir "$out" --max-steps $STEPS --seq-len 16 \
    --per-device-train-batch-size 2 --gradient-accumulation-steps 2 --learning-rate 3e-3 --warmup-steps 5 \
    --lr-scheduler-type cosine --save-steps 1 --save-total-limit 3 --quiet "$@"
}
run_exec() { # like run, but the trainer replaces the shell (so kill hits it)
  local out=$1; shift
  exec "$PORTATRAIN" train --model "$G" --data "$G/data.bin" --output-dir "$out" --max-steps $STEPS --seq-len 16 \
    --per-device-train-batch-size 2 --gradient-accumulation-steps 2 --learning-rate 3e-3 --warmup-steps 5 \
    --lr-scheduler-type cosine --save-steps 1 --save-total-limit 3 --quiet "$@"
}
losses() { grep -o '"loss": [^,]*' "$1/metrics.jsonl"; }
latest_ok() { # the checkpoint latest names verifies (or there is none yet)
  [ ! -e "$1/latest" ] || "$PORTATRAIN" ckpt verify "$1" >/dev/null 2>&1
}
# no checkpoint yet (killed before the first save): start over, replacing the killed attempt's metrics
resume_arg() { if [ -e "$1/latest" ]; then echo "--resume-from-checkpoint latest"; else echo "--overwrite-output-dir"; fi; }

run "$tmp/ref" 2>/dev/null
expect '[ -f "$tmp/ref/model.safetensors" ]' "reference run failed"

# 1. deterministic kills at each stage of the save of step 7
for stage in tensors-written manifest-written renamed pointer-updated; do
  out="$tmp/stage-$stage"
  PT_CKPT_CRASH_AT=$stage run "$out" --max-steps 7 2>/dev/null   # dies during the first save
  expect 'latest_ok "$out"' "$stage: latest does not verify after the kill"
  # continue: saves at later steps crash no more
  run "$out" $(resume_arg "$out") 2>/dev/null
  expect '[ "$(losses "$out")" = "$(losses "$tmp/ref")" ]' "$stage: losses differ after resume"
  expect 'cmp -s "$out/model.safetensors" "$tmp/ref/model.safetensors"' "$stage: final weights differ"
done

# 2. random kills: at least 50 (15 sanitized), at random times, in a longer run that saves every step
STEPS=$LONG
run "$tmp/ref" --overwrite-output-dir 2>/dev/null
out="$tmp/random"; kills=0; attempts=0
RANDOM=20241202
while [ $kills -lt $KILLS ] && [ $attempts -lt 400 ]; do
  attempts=$((attempts+1))
  ( exec 2>/dev/null; run_exec "$out" $(resume_arg "$out") ) &
  pid=$!
  sleep "0.0$(( RANDOM % 9 + 1 ))$(( RANDOM % 10 ))"
  if kill -9 $pid 2>/dev/null; then kills=$((kills+1)); fi
  wait $pid 2>/dev/null
  if ! latest_ok "$out"; then
    expect 'false' "after kill $kills: latest does not verify: $("$PORTATRAIN" ckpt verify "$out" 2>&1)"
    break
  fi
  [ -f "$out/model.safetensors" ] && [ "$(wc -l < "$out/metrics.jsonl")" -eq $STEPS ] && rm -rf "$out"  # finished: start over
done
expect '[ $kills -ge $KILLS ]' "only $kills kills landed"
run "$out" $(resume_arg "$out") 2>/dev/null
expect '[ "$(losses "$out")" = "$(losses "$tmp/ref")" ]' "random kills: losses differ from the uninterrupted run: $(diff <(losses "$out") <(losses "$tmp/ref") | head -5)"
expect 'cmp -s "$out/model.safetensors" "$tmp/ref/model.safetensors"' "random kills: final weights differ"
echo "test_crash: $kills kills; $checks checks, $fails failed"
[ "$fails" -eq 0 ]
