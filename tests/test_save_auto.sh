#!/usr/bin/env bash
# train --save-steps auto --mtbf-hours H: a probe checkpoint at step 5, then Daly's interval from the
# measured save cost and mean step time (recomputed here from metrics.jsonl), re-estimated per save;
# without --mtbf-hours it is a usage error.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=1
fail=0
"$B" init --config "$S/configs/tiny.json" --output-dir "$T/m" --seed 42 >/dev/null 2>&1 || exit 1
F="--model $T/m --data $S/data/demo/shards/train --max-steps 24 --seq-len 32 --per-device-train-batch-size 2
   --learning-rate 1e-3 --backend cpu --quiet"
# MTBF 0.0001 h = 0.36 s: Daly's interval is then at most 0.36 s (about 0.23 s for a 0.13 s save), a few steps
# of ~0.03 s, so several saves happen in 24 steps. (Was 0.001 h: on a machine that saves in 0.12 s and steps
# in 0.029 s the interval came to 29 steps, after the end of the run.)
"$B" train $F --output-dir "$T/o" --save-steps auto --mtbf-hours 0.0001 2>"$T/err" || { echo "FAIL: train"; cat "$T/err"; exit 1; }
python3 "$PT_SOURCE_DIR/tests/py/daly_intervals.py" "$T/o/metrics.jsonl" "$T/o" || fail=1
grep -q "checkpoint interval: .* steps (Daly: save" "$T/err" && echo "ok: interval printed" || { echo "FAIL: no interval line"; cat "$T/err"; fail=1; }
"$B" train $F --output-dir "$T/p" --save-steps auto >"$T/out" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "needs --mtbf-hours" "$T/out" && echo "ok: auto without MTBF refused" || { echo "FAIL: rc $rc"; cat "$T/out"; fail=1; }
"$B" train $F --output-dir "$T/q" --save-steps often >"$T/out" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "got 'often'" "$T/out" && echo "ok: bad --save-steps refused" || { echo "FAIL: rc $rc"; cat "$T/out"; fail=1; }
# the supervisor prints the same advice from the run's measurements and records it
"$B" train $F --output-dir "$T/s" --save-steps 6 --mtbf-hours 0.001 --supervise --inject kill:step=9 2>"$T/err" || { echo "FAIL: supervised"; cat "$T/err"; fail=1; }
grep -q "supervisor: checkpoint interval advice for MTBF 0.001 h: every" "$T/err" && echo "ok: supervisor advice printed" || { echo "FAIL: no supervisor advice"; fail=1; }
python3 -c "
import json,sys; a=json.load(open('$T/s/recovery.json'))['checkpoint_interval']
assert a['daly_steps'] >= 1 and 0 < a['daly_s'] < a['young_s'], a
print('ok: recovery.json checkpoint_interval', a['daly_steps'], 'steps')" || fail=1
exit $fail
