#!/usr/bin/env bash
# portatrain accept end to end on short runs: cpu-ref baseline vs cpu candidate ACCEPTED with every
# section filled; a wrong kernel, a corrupted checkpoint and a changed frozen input each give the
# right verdict, exit code and reason; bad SPECs and price tables are refused before any run.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cd "$S"
fail=0
. "${PT_SOURCE_DIR:?}/tests/cli_check.sh"
# Under ASan/UBSan cpu-ref runs ~15 s/step and cpu ~1 s/step: the sanitized run checks the suite's
# own code with a cpu baseline (exact profile) and fewer steps; the release run checks the real
# cpu-ref vs cpu pair (fp32 profile).
N=12 M=6 RS=3 BASE=cpu-ref:fp32 PROFILE=fp32
[ -n "${PT_SANITIZED:-}" ] && { N=8 M=4 RS=2 BASE=cpu:fp32 PROFILE=exact; echo "sanitized build: baseline $BASE, $N steps"; }
A="--steps $N --checkpoint-step $M --recovery-save-steps $RS --eval-batches 2"

# 1. the real thing, short: ACCEPTED, every section present and consistent
check 0 "verdict: ACCEPTED" -- "$B" accept --baseline $BASE --candidate cpu:fp32 $A --output-dir "$T/a"
grep -q "report: $T/a/report.html" "$T/out" || { echo "FAIL: no report path line"; fail=1; }
grep -q "done in" "$T/out" || { echo "FAIL: no phase progress"; fail=1; }
R="$T/a/report.json"
for f in report.html report.md report.json; do [ -s "$T/a/$f" ] || { echo "FAIL: $f missing"; fail=1; }; done
jcheck "$R" "r['verdict']=='ACCEPTED' and r['convergence']['profile']=='$PROFILE'" "$PROFILE profile"
if [ "$PROFILE" = fp32 ]; then
    jcheck "$R" "0 < r['convergence']['per_step']['max_rel_diff'] < 1e-3" "cpu vs cpu-ref differ, within tolerance"
else
    jcheck "$R" "r['convergence']['per_step']['max_rel_diff'] == 0" "cpu vs cpu bitwise identical"
fi
jcheck "$R" "len(r['curves']['baseline'])==$N and len(r['curves']['candidate'])==$N" "both curves have $N steps"
jcheck "$R" "[p['ok'] for p in r['portability']]==[True,True] and all(p['restore_time_s']>0 and p['bytes']>0 for p in r['portability'])" "portability both ways, with restore time and bytes"
jcheck "$R" "r['recovery']['ok'] and r['recovery']['final_weights_identical'] and r['recovery']['fault_step'] % $RS != 0 and r['recovery']['steps_recomputed'] >= 1 and r['recovery']['total_s'] > 0" "recovery: kill between checkpoints, recomputed steps, bit-identical"
jcheck "$R" "{p['phase'] for p in r['phases']} >= {'start-up','training','checkpoint','eval','portability','recovery'}" "every phase timed"
jcheck "$R" "r['cost']['accepted_outcomes']==1 and r['cost']['total_cost']>0 and abs(r['cost']['cost_per_accepted_outcome']-r['cost']['total_cost'])<1e-12 and abs(sum(x['cost'] for x in r['cost']['rows'])-r['cost']['total_cost'])<1e-9 and all(x['source'] and x['date'] for x in r['cost']['rows'])" "cost rows add up, with sources"
jcheck "$R" "r['frozen_inputs']['initial_weights_sha256'] and len(r['frozen_inputs']['dataset_sha256'])==64" "frozen input hashes"
[ "$(sha256sum "$T/a/init/model.safetensors" | cut -d' ' -f1)" = "$(python3 -c "import json;print(json.load(open('$R'))['frozen_inputs']['initial_weights_sha256'])")" ] \
  && echo "ok: initial weights hash is the file's" || { echo "FAIL: initial weights hash"; fail=1; }

# the report portatrain accept wrote renders in headless Chromium (charts, no errors, not blank)
# (release build only: Chromium is not part of what the sanitizers check)
if [ -z "${PT_SANITIZED:-}" ]; then
    PT_REPORT_JSON="$R" PT_REPORT_RERUN=1 bash "$S/tests/test_report_chromium.sh" >"$T/chromium.log" 2>&1 \
      && echo "ok: accept's report.html renders in Chromium" || { echo "FAIL: chromium render"; cat "$T/chromium.log"; fail=1; }
fi

# 2. a wrong kernel in the candidate (test-only switch) is REJECTED with the right reason
PT_FAULT_KERNEL=rmsnorm_eps check 1 "convergence: step-0 (step 1) grad-norm rel diff" -- \
  "$B" accept --baseline $BASE --candidate cpu:fp32 $A --baseline-run "$T/a/baseline" --output-dir "$T/w"
jcheck "$T/w/report.json" "r['verdict']=='REJECTED' and r['cost']['accepted_outcomes']==0 and r['cost']['cost_per_accepted_outcome'] is None" "rejected: no accepted outcome, no cost per outcome"

# 3. a corrupted checkpoint fails the portability step
check 1 "portability: cpu:fp32 could not restore $BASE's checkpoint-$M: .*fails its checksum" -- \
  "$B" accept --baseline $BASE --candidate cpu:fp32 $A --baseline-run "$T/a/baseline" --output-dir "$T/c" --test-fault corrupt-checkpoint
jcheck "$T/c/report.json" "r['verdict']=='REJECTED' and not r['portability'][0]['ok'] and r['convergence']['verdict']=='ACCEPTED'" "only portability failed"
cmp -s "$T/a/baseline/checkpoint-$M/rank00000.safetensors" "$T/c/baseline/checkpoint-$M/rank00000.safetensors" \
  && echo "ok: the baseline's own checkpoint is untouched" || { echo "FAIL: baseline checkpoint changed"; fail=1; }
"$B" ckpt verify "$T/a/baseline/checkpoint-$M" >/dev/null 2>&1 && echo "ok: baseline checkpoint still verifies" || { echo "FAIL: ckpt verify"; fail=1; }

# 4. mismatched frozen inputs are refused (exit 2), naming the field
check 2 "verdict: REFUSED (frozen input frozen.hyperparameters.learning_rate differs" -- \
  "$B" accept --baseline $BASE --candidate cpu:fp32 $A --baseline-run "$T/a/baseline" --output-dir "$T/r" --learning-rate 1e-3
jcheck "$T/r/report.json" "r['verdict']=='REFUSED' and 'portability' in r and r['portability']==[]" "refused before portability"

# 5. unusable input: one line naming what is wrong, exit 2, nothing run
# cuda: not built, built without a device (refused before the baseline runs), or a GPU (nothing to refuse)
"$B" devices >"$T/devices"
if grep -q "^cuda  *not built" "$T/devices"; then
    check 2 "backend 'cuda' is not built" -- "$B" accept --baseline cpu-ref --candidate cuda:fp32 --output-dir "$T/x"
elif grep -q "^cuda  *no CUDA device" "$T/devices"; then
    check 2 "platform SPEC 'cuda:fp32': backend 'cuda': no CUDA device (" -- \
      "$B" accept --baseline cpu-ref --candidate cuda:fp32 --output-dir "$T/x"
else echo "ok: a CUDA device is present (no no-device refusal to check)"; fi
check 2 "tpu: unknown backend; did you mean cpu? (known: cpu-ref, cpu, opencl, cuda, cuda-sim)" -- \
  "$B" accept --baseline cpu-ref --candidate tpu:fp32 --output-dir "$T/x"
check 2 "unknown part 'fp16'" -- "$B" accept --baseline cpu-ref --candidate cpu:fp16 --output-dir "$T/x"
check 2 "platform cpu:fsdp=3 splits each batch over 3 data ranks" -- "$B" accept --baseline cpu-ref --candidate cpu:fsdp=3 --output-dir "$T/x"
check 2 "unknown part 'zz=1'" -- "$B" accept --baseline cpu-ref --candidate cpu:zz=1 --output-dir "$T/x"
check 2 "nope.json" -- "$B" accept --baseline cpu-ref --candidate cpu --price-table "$T/nope.json" --output-dir "$T/x"
echo '{"entries":[{"id":"x","unit":"core-hour","price_per_hour":1}],"backends":{"cpu-ref":{"entry":"x","units":"threads"},"cpu":{"entry":"x","units":"threads"}}}' >"$T/p.json"
check 2 "p.json: entries\[id=x\]: needs .* a source and a date" -- "$B" accept --baseline cpu-ref --candidate cpu --price-table "$T/p.json" --output-dir "$T/x"
check 2 "no metrics.jsonl" -- "$B" accept --baseline cpu-ref --candidate cpu --baseline-run "$T" --output-dir "$T/x"
[ ! -e "$T/x/baseline" ] && echo "ok: nothing ran for bad input" || { echo "FAIL: bad input ran something"; fail=1; }

# 6. killing the suite kills its runs: no orphan training process survives accept
( exec "$B" accept --baseline cpu:fp32 --candidate cpu:fp32 --steps 400 --output-dir "$T/k" --quiet ) >/dev/null 2>&1 &
apid=$!
for _ in $(seq 1 600); do [ -s "$T/k/baseline/metrics.jsonl" ] && break; sleep 0.1; done
kill -KILL "$apid"; wait "$apid" 2>/dev/null
sleep 1
if pgrep -f -- "--output-dir $T/k/" >/dev/null; then
    echo "FAIL: orphan runs after accept was killed:"; pgrep -af -- "--output-dir $T/k/"; pkill -f -- "--output-dir $T/k/"; fail=1
else echo "ok: no orphan runs after accept was killed"; fi
exit $fail
