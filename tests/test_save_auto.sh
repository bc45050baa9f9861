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
python3 - "$T/o/metrics.jsonl" "$T/o" <<'PY' || fail=1
import json, math, os, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
saves = [r for r in rows if "save_time_s" in r]
assert saves and saves[0]["step"] == 5, f"probe save at step 5, got {[r['step'] for r in saves]}"
assert len(saves) >= 2, f"more than the probe: {[r['step'] for r in saves]}"
M = 0.0001 * 3600
for i, r in enumerate(saves):
    C = r["save_time_s"]
    times = [x["step_time_s"] for x in rows if 1 < x["step"] <= r["step"]]
    st = sum(times) / len(times)
    t = M if C >= 2 * M else math.sqrt(2 * C * M) * (1 + math.sqrt(C / (2 * M)) / 3 + C / (2 * M) / 9) - C
    want = max(1, int(math.floor(t / st + 0.5)))
    assert r["save_interval_steps"] == want, f"step {r['step']}: interval {r['save_interval_steps']}, Daly gives {want}"
    if i + 1 < len(saves):
        assert saves[i + 1]["step"] == r["step"] + want, f"next save at {saves[i+1]['step']}, want {r['step'] + want}"
    assert os.path.isdir(os.path.join(sys.argv[2], f"checkpoint-{r['step']}")), f"checkpoint-{r['step']} missing"
print("ok: probe at 5, then Daly intervals", [(r["step"], r["save_interval_steps"]) for r in saves])
PY
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
