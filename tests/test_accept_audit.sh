#!/usr/bin/env bash
# accept/report audit: what a user hits around the suite rather than inside it. A candidate backend with
# no device is refused before the baseline runs; a rerun into the same --output-dir never leaves an old
# report next to new runs. A recorded --baseline-run's loader semantics (epoch boundary, drop_last, shuffle) are
# the suite's. The recipe flags accept takes (--gradient-accumulation-steps, --lr-scheduler-type, AdamW's, the
# loader's) reach every run, are checked before any run, and may not contradict a recorded baseline.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cd "$S"
fail=0
. "$S/tests/cli_check.sh"
# The shortest suite: cpu vs cpu (exact), 8 steps of 2 x 16 tokens, about 5 s.
A="--steps 8 --checkpoint-step 4 --recovery-save-steps 2 --eval-batches 1 --seq-len 16 --per-device-train-batch-size 2 --quiet"

# 1. opencl built but no OpenCL platform (the ICD loader pointed at an empty dir): refused as a
#    cuda backend without a device is, before any run, not REJECTED after the baseline has trained.
if "$B" devices | grep -q "^opencl  *not built"; then echo "ok: no opencl backend in this build (nothing to check)"
else
    mkdir -p "$T/no-icd"
    OCL_ICD_VENDORS="$T/no-icd" check 2 "portatrain: error: platform SPEC 'opencl:fp32': backend 'opencl': no OpenCL platform found" -- \
      "$B" accept --baseline cpu:fp32 --candidate opencl:fp32 $A --output-dir "$T/ocl"
    [ ! -e "$T/ocl" ] && echo "ok: nothing ran for an opencl SPEC without a platform" || { echo "FAIL: ran with no OpenCL platform"; fail=1; }
fi

# a price table whose currency is not a code is refused before any run (was reported as USD)
python3 -c "import json,sys; p=json.load(open('configs/prices.json')); p['currency']=5; json.dump(p, open(sys.argv[1], 'w'))" "$T/p.json"
check 2 "portatrain: error: $T/p.json: currency: must be a non-empty string" -- \
  "$B" accept --baseline cpu:fp32 --candidate cpu:fp32 $A --output-dir "$T/cur" --price-table "$T/p.json"
[ ! -e "$T/cur" ] && echo "ok: nothing ran for a bad currency" || { echo "FAIL: ran with a bad currency"; fail=1; }

# a price no machine has (1e300 an hour: the cost would overflow to null, read as "no accepted outcome")
python3 -c "import json,sys; p=json.load(open('configs/prices.json')); [e.update(price_per_hour=1e300) for e in p['entries']]; json.dump(p, open(sys.argv[1], 'w'))" "$T/p2.json"
check 2 "price_per_hour 1e+300 is above 1e12" -- \
  "$B" accept --baseline cpu:fp32 --candidate cpu:fp32 $A --output-dir "$T/cur2" --price-table "$T/p2.json"

# 2. a rerun into the same --output-dir: first a full suite (ACCEPTED), kept in $T/a
check 0 "verdict: ACCEPTED" -- "$B" accept --baseline cpu:fp32 --candidate cpu:fp32 $A --output-dir "$T/a"
jcheck "$T/a/candidate/train_args.json" "r['lr_scheduler_type']=='cosine' and r['gradient_accumulation_steps']==1 and r['adam_beta1']==0.9 and not r['shuffle']" \
    "  without recipe flags: accept's cosine and train's defaults"
# an input inside a directory the suite empties is refused before it is deleted (was: the candidate
# "did not train", REJECTED, the user's model gone)
check 2 "portatrain: error: accept: --model $T/a/candidate: lies inside $T/a/candidate, which the suite empties" -- \
  "$B" accept --baseline cpu:fp32 --candidate cpu:fp32 $A --output-dir "$T/a" --model "$T/a/candidate"
[ -s "$T/a/candidate/model.safetensors" ] && echo "ok: the --model dir is untouched" || { echo "FAIL: --model dir deleted"; fail=1; }
cp -r "$T/a" "$T/b"
# a candidate killed after step 6 of 8 (every child inherits the fault; the recorded baseline does not
# train again): REJECTED with the signal named, and the 6 steps it trained are billed and drawn
# (were: no candidate phase, cost or curve, and the reason was the command line)
PT_FAULT_KILL_AFTER_STEP=6 check 1 "candidate cpu:fp32 did not train: killed by signal 9 (Killed): no output (log:" -- \
  "$B" accept --baseline cpu:fp32 --candidate cpu:fp32 $A --output-dir "$T/k" --baseline-run "$T/b/baseline"
jcheck "$T/k/report.json" "len(r['curves']['candidate'])==6 and r['candidate']['steps']==6" "the crashed candidate's 6 steps are in the report"
jcheck "$T/k/report.json" "r['cost']['tokens']==6*2*16 and any(x['item']=='candidate training' and x['hours']>0 and x['cost']>0 for x in r['cost']['rows']) and abs(sum(x['cost'] for x in r['cost']['rows'])-r['cost']['total_cost'])<1e-12" "the crashed candidate's run is billed"
# a recorded baseline whose metrics.jsonl ends in a torn line (killed while writing it) is read without it
cp -r "$T/b/baseline" "$T/torn"; printf '{"step": 9, "loss": 1' >> "$T/torn/metrics.jsonl"
check 0 "metrics.jsonl:9: ignoring a torn last line" -- \
  "$B" accept --baseline cpu:fp32 --candidate cpu:fp32 $A --output-dir "$T/t" --baseline-run "$T/torn"
jcheck "$T/t/report.json" "r['verdict']=='ACCEPTED' and len(r['curves']['baseline'])==8" "  its 8 steps are the baseline's curve"
# a recorded baseline trained at another thread count (7 here): what the suite runs now (the baseline's
# portability continuation) is priced at this suite's threads, as the candidate's training is; its own
# recorded training is not billed again (was: the continuation priced at the recorded run's 7 threads)
cp -r "$T/b/baseline" "$T/thr"; rm -f "$T/thr/eval.json"
python3 -c "import json,sys; a=json.load(open(sys.argv[1])); a['omp_threads']=7; json.dump(a, open(sys.argv[1], 'w'))" "$T/thr/train_args.json"
check 0 "verdict: ACCEPTED" -- "$B" accept --baseline cpu:fp32 --candidate cpu:fp32 $A --output-dir "$T/th" --baseline-run "$T/thr"
jcheck "$T/th/report.json" "(lambda rows: rows['candidate training']['price_per_hour'] == rows['baseline_from_candidate portability']['price_per_hour'] == rows['eval_baseline eval']['price_per_hour'] if 'eval_baseline eval' in rows else rows['candidate training']['price_per_hour'] == rows['baseline_from_candidate portability']['price_per_hour'])({x['item']: x for x in r['cost']['rows']})" \
    "a recorded baseline's runs now are priced at this suite's threads"
jcheck "$T/th/report.json" "not any(x['item'].startswith('baseline training') for x in r['cost']['rows'])" "  its recorded training is not billed again"
# a rerun whose baseline cannot run (exit 2, no report) leaves no old ACCEPTED report or old runs behind
mkdir -p "$T/empty"
check 2 "empty/config.json" -- "$B" accept --baseline cpu:fp32 --candidate cpu:fp32 $A --output-dir "$T/a" --model "$T/empty"
for f in report.json report.html report.md candidate portability recovery logs/recovery.log; do
    [ ! -e "$T/a/$f" ] && echo "ok: no stale $f after a failed rerun" || { echo "FAIL: stale $f from the earlier run"; fail=1; }
done
# a rerun killed mid-suite (SIGTERM during the baseline) leaves no old report either
( exec "$B" accept --baseline cpu:fp32 --candidate cpu:fp32 $A --steps 400 --output-dir "$T/b" ) >/dev/null 2>&1 &
apid=$!
# (the old run's files are there from the start: wait for this run's baseline to be training)
for _ in $(seq 1 300); do grep -q -- "--max-steps 400" "$T/b/logs/baseline.log" 2>/dev/null && [ -s "$T/b/baseline/metrics.jsonl" ] && break; sleep 0.1; done
kill -TERM "$apid"; wait "$apid" 2>/dev/null
[ ! -e "$T/b/report.json" ] && [ ! -e "$T/b/report.html" ] && [ ! -e "$T/b/recovery" ] \
  && echo "ok: an interrupted rerun leaves no old report" || { echo "FAIL: old report/runs next to an interrupted rerun"; fail=1; }

# 3. a recorded baseline whose data ends within the run (40 rows of the golden fixture, 3 a step: an epoch
#    boundary at step 13 of 16) trained with --epoch-boundary wrap, with the field absent (a run from before the
#    option: wrap), or with hf --dataloader-drop-last --shuffle: the suite trains every run with the baseline's
#    loader semantics, so the pair compares (was: REFUSED, "frozen input frozen.hyperparameters.epoch_boundary
#    differs", and accept has no flag to match it)
G="$S/tests/fixtures/golden/untied"
E="--steps 16 --checkpoint-step 8 --recovery-save-steps 4 --eval-batches 1 --seq-len 16 --per-device-train-batch-size 3 --warmup-steps 2 --quiet --model $G --train-data $G/data.bin --eval-data $G/data.bin"
rec() { "$B" train --model "$G" --data "$G/data.bin" --output-dir "$1" --backend cpu --max-steps 16 --seq-len 16 \
          --per-device-train-batch-size 3 --learning-rate 3e-3 --warmup-steps 2 --lr-scheduler-type cosine \
          --weight-decay 0.1 --max-grad-norm 1 --seed 42 --save-steps 8 --quiet "${@:2}" || { echo "FAIL: train $*"; fail=1; }; }
cases="wrap:wrap:False:False pre:wrap:False:False hfdl:hf:True:True"
if [ -n "${PT_SANITIZED:-}" ]; then cases="pre:wrap:False:False hfdl:hf:True:True"; echo "sanitized build: 2 of the 3 baselines (the same code)"
else rec "$T/wrap" --epoch-boundary wrap; fi
rec "$T/pre" --epoch-boundary wrap
python3 -c "import json,sys; a=json.load(open(sys.argv[1])); [a.pop(k) for k in ('epoch_boundary','dataloader_drop_last')]; json.dump(a, open(sys.argv[1], 'w'))" "$T/pre/train_args.json"
#    The third also ran with a schedule, accumulation and AdamW settings accept has no flags for (was: REFUSED,
#    accept always trained with cosine and the defaults): the suite's runs inherit them too.
rec "$T/hfdl" --dataloader-drop-last --shuffle --lr-scheduler-type cosine_with_min_lr --lr-scheduler-kwargs '{"min_lr_rate": 0.1}' \
    --gradient-accumulation-steps 2 --adam-beta2 0.95 --adam-epsilon 1e-7
for v in $cases; do
    IFS=: read -r run eb dl sh <<<"$v"
    check 0 "verdict: ACCEPTED" -- "$B" accept --baseline cpu:fp32 --candidate cpu:fp32 $E --output-dir "$T/e-$run" --baseline-run "$T/$run"
    jcheck "$T/e-$run/report.json" "r['settings']['epoch_boundary']=='$eb' and r['settings']['dataloader_drop_last']==$dl and r['settings']['shuffle']==$sh" \
        "  $run: the suite ran with the baseline's --epoch-boundary $eb, drop_last $dl, shuffle $sh"
done
jcheck "$T/e-hfdl/report.json" "(s:=r['settings'])['lr_scheduler_type']=='cosine_with_min_lr' and s['lr_scheduler_kwargs']=={'min_lr_rate': 0.1} and s['gradient_accumulation_steps']==2 and s['adam_beta2']==0.95 and s['adam_epsilon']==1e-7" \
    "  hfdl: the report names the baseline's schedule, accumulation and AdamW settings"
for run in candidate recovery; do
    jcheck "$T/e-hfdl/$run/train_args.json" "r['lr_scheduler_type']=='cosine_with_min_lr' and r['lr_scheduler_kwargs']=={'min_lr_rate': 0.1} and r['gradient_accumulation_steps']==2 and r['adam_beta1']==0.9 and r['adam_beta2']==0.95 and r['adam_epsilon']==1e-7 and r['shuffle'] and r['dataloader_drop_last']" \
        "  hfdl: the $run run trained with them"
done

# 4. the recipe flags: every run of the suite trains with them and the report names them (was: no such flags;
#    a recipe other than accept's cosine and train's defaults could only come from a recorded baseline)
check 0 "verdict: ACCEPTED" -- "$B" accept --baseline cpu:fp32 --candidate cpu:fp32 $E --output-dir "$T/flags" \
  --gradient-accumulation-steps 2 --lr-scheduler-type linear --adam-beta1 0.8 --adam-epsilon 1e-6 --shuffle --data-mode packed
for run in baseline candidate recovery; do
    jcheck "$T/flags/$run/train_args.json" "r['gradient_accumulation_steps']==2 and r['lr_scheduler_type']=='linear' and r['adam_beta1']==0.8 and r['adam_beta2']==0.999 and r['adam_epsilon']==1e-6 and r['shuffle'] and r['data_mode']=='packed'" \
        "  the $run run trained with the recipe flags"
done
jcheck "$T/flags/report.json" "(s:=r['settings'])['gradient_accumulation_steps']==2 and s['lr_scheduler_type']=='linear' and s['adam_beta1']==0.8 and s['shuffle']" \
    "  the report names them"
#    a flag that agrees with the recorded baseline is taken; one that contradicts it is refused before anything
#    under OUT is emptied (the earlier report stays)
check 0 "verdict: ACCEPTED" -- "$B" accept --baseline cpu:fp32 --candidate cpu:fp32 $E --output-dir "$T/agree" --baseline-run "$T/hfdl" \
  --adam-beta2 0.95 --gradient-accumulation-steps 2 --shuffle
check 2 "portatrain: error: accept: --adam-beta2 0.999: the --baseline-run $T/hfdl trained with 0.95; every run of the suite must train as the baseline did" -- \
  "$B" accept --baseline cpu:fp32 --candidate cpu:fp32 $E --output-dir "$T/agree" --baseline-run "$T/hfdl" --adam-beta2 0.999
check 2 "portatrain: error: accept: --lr-scheduler-type linear: the --baseline-run $T/hfdl trained with cosine_with_min_lr" -- \
  "$B" accept --baseline cpu:fp32 --candidate cpu:fp32 $E --output-dir "$T/agree" --baseline-run "$T/hfdl" --lr-scheduler-type linear
check 2 "portatrain: error: accept: --shuffle false: the --baseline-run $T/hfdl trained with true" -- \
  "$B" accept --baseline cpu:fp32 --candidate cpu:fp32 $E --output-dir "$T/agree" --baseline-run "$T/hfdl" --shuffle=false
jcheck "$T/agree/report.json" "r['verdict']=='ACCEPTED'" "  the refused reruns left the earlier report"
#    values train would refuse are refused before any run, naming the flag
#    (train's messages: tests/test_accept_train_checks.sh holds accept to each)
for bad in "--adam-beta2 1:invalid optimizer hyperparameters" "--adam-epsilon 0:invalid optimizer hyperparameters" \
           "--lr-scheduler-type foo:--lr-scheduler-type 'foo' unknown" "--epoch-boundary edge:--epoch-boundary must be hf or wrap" \
           "--data-mode ragged:--data-mode must be packed, padded or documents" \
           "--epoch-boundary wrap --dataloader-drop-last:--dataloader-drop-last needs --epoch-boundary hf" \
           "--lr-scheduler-type warmup_stable_decay:warmup_stable_decay" "--lr-scheduler-kwargs [1]:--lr-scheduler-kwargs: not a JSON object"; do
    check 2 "portatrain: error: .*${bad#*:}" -- "$B" accept --baseline cpu:fp32 --candidate cpu:fp32 $E --output-dir "$T/bad" ${bad%%:*}
done
[ ! -e "$T/bad" ] && echo "ok: nothing ran for a bad recipe flag" || { echo "FAIL: ran with a bad recipe flag"; fail=1; }

exit $fail
