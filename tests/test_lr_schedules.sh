#!/usr/bin/env bash
# Learning-rate schedules against Hugging Face transformers' get_scheduler (fixture written by
# tools/hf_lr_schedules.py with transformers 5.25) and TorchTitan's LRSchedulersContainer (--lr-scheduler-type
# torchtitan; fixture written by tools/tt_lr_schedules.py with torchtitan 0.3.0): for every schedule and keyword
# argument case, the "lr" of each step of portatrain's metrics.jsonl equals the rate their LambdaLR applies at
# that step, to 1e-15 relative (both compute it in double; the JSON carries 17 significant digits). Bad names
# and keyword arguments are refused before anything is written; the kwargs are a frozen input.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
. "$S/tests/cli_check.sh"
fail=0
G=$S/tests/fixtures/golden/tied
run() { "$B" train --model "$G" --data "$G/data.bin" --output-dir "$1" --seq-len 16 --per-device-train-batch-size 2 \
    --quiet "${@:2}"; }

for FIX in "$S/tests/fixtures/lr/hf_schedules.json" "$S/tests/fixtures/lr/tt_schedules.json"; do
who=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['source'].split()[0])" "$FIX")
n=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['cases']))" "$FIX")
for i in $(seq 0 $((n - 1))); do
    # shellcheck disable=SC2046
    eval set -- $(python3 -c "import json,shlex,sys; c=json.load(open(sys.argv[1]))['cases'][int(sys.argv[2])]
print(' '.join(shlex.quote(x) for x in ['--lr-scheduler-type', c['name'], '--learning-rate', repr(c['lr']),
      '--warmup-steps', str(c['warmup_steps']), '--max-steps', str(c['max_steps'])]
      + (['--lr-scheduler-kwargs', json.dumps(c['kwargs'])] if c['kwargs'] else [])))" "$FIX" "$i")
    label="$*"
    rm -rf "$T/r"
    if ! run "$T/r" "$@" >"$T/log" 2>&1; then echo "FAIL: $label: train failed"; cat "$T/log"; fail=1; continue; fi
    if python3 "$S/tests/py/lr_matches.py" "$FIX" "$i" "$T/r/metrics.jsonl" "$who"
    then echo "ok: $label"; else echo "FAIL: $label: lr differs from $who's"; fail=1; fi
done
done

# refusals: one line naming the problem, exit 2, no output dir
check 2 "takes no argument 'min_lr_rate' (it takes: num_cycles)" -- run "$T/x" --max-steps 2 --lr-scheduler-type cosine \
    --lr-scheduler-kwargs '{"min_lr_rate": 0.1}'
check 2 "linear takes no argument 'num_cycles'" -- run "$T/x" --max-steps 2 --lr-scheduler-kwargs '{"num_cycles": 1}'
# an empty key looped forever (strstr finds "" everywhere; found by fuzz/fuzz_lr_schedule.c)
check 2 "cosine takes no argument '' (it takes: num_cycles)" -- timeout 20 "$B" train --model "$G" --data "$G/data.bin" \
    --output-dir "$T/x" --max-steps 2 --seq-len 16 --lr-scheduler-type cosine --lr-scheduler-kwargs '{"": 1}'
check 2 "cosine_with_min_lr needs min_lr or min_lr_rate" -- run "$T/x" --max-steps 2 --lr-scheduler-type cosine_with_min_lr
check 2 "only one of min_lr or min_lr_rate" -- run "$T/x" --max-steps 2 --lr-scheduler-type cosine_with_min_lr \
    --lr-scheduler-kwargs '{"min_lr": 1e-5, "min_lr_rate": 0.1}'
check 2 "warmup_stable_decay needs num_decay_steps" -- run "$T/x" --max-steps 2 --lr-scheduler-type warmup_stable_decay
check 2 "decay_type must be \"linear\", \"cosine\" or \"1-sqrt\"" -- run "$T/x" --max-steps 2 \
    --lr-scheduler-type warmup_stable_decay --lr-scheduler-kwargs '{"num_decay_steps": 1, "decay_type": "exp"}'
check 2 "num_decay_steps must be a whole number >= 0" -- run "$T/x" --max-steps 2 \
    --lr-scheduler-type warmup_stable_decay --lr-scheduler-kwargs '{"num_decay_steps": 1.5}'
check 2 "lr_end (0.1) must be smaller than the learning rate" -- run "$T/x" --max-steps 2 --lr-scheduler-type polynomial \
    --lr-scheduler-kwargs '{"lr_end": 0.1}' --learning-rate 1e-3
# kwargs HF accepts whose rate is not a number (Python: ZeroDivisionError) or negative, refused before training
check 2 "inverse_sqrt: the learning rate of step 3 would be inf" -- run "$T/x" --max-steps 4 --warmup-steps 2 \
    --lr-scheduler-type inverse_sqrt --lr-scheduler-kwargs '{"timescale": 1e-50}'
check 2 "polynomial: the learning rate of step 2 would be -" -- run "$T/x" --max-steps 4 \
    --lr-scheduler-type polynomial --lr-scheduler-kwargs '{"lr_end": -1e-3}'
check 2 "not a JSON object" -- run "$T/x" --max-steps 2 --lr-scheduler-type cosine --lr-scheduler-kwargs '[1]'
check 2 "reduce_lr_on_plateau' follows evaluation metrics" -- run "$T/x" --max-steps 2 --lr-scheduler-type reduce_lr_on_plateau
check 2 "'bogus' unknown" -- run "$T/x" --max-steps 2 --lr-scheduler-type bogus
# torchtitan: its decay names, its fields only (the warmup is --warmup-steps), a schedule that would fail in
# TorchTitan (no decay phase, run past total_steps: an assertion) or go negative, refused before training
check 2 "decay_type must be \"linear\", \"cosine\" or \"sqrt\"" -- run "$T/x" --max-steps 2 \
    --lr-scheduler-type torchtitan --lr-scheduler-kwargs '{"decay_type": "1-sqrt"}'
check 2 "torchtitan takes no argument 'warmup_steps' (it takes: decay_type min_lr_factor decay_ratio total_steps)" \
    -- run "$T/x" --max-steps 2 --lr-scheduler-type torchtitan --lr-scheduler-kwargs '{"warmup_steps": 2}'
check 2 "decay_ratio must be in \[0, 1\], got 1.5" -- run "$T/x" --max-steps 2 --lr-scheduler-type torchtitan \
    --lr-scheduler-kwargs '{"decay_ratio": 1.5}'
check 2 "total_steps must be a whole number >= 1, got 0" -- run "$T/x" --max-steps 2 --lr-scheduler-type torchtitan \
    --lr-scheduler-kwargs '{"total_steps": 0}'
check 2 "torchtitan: the learning rate of step 6 would be nan" -- run "$T/x" --max-steps 6 --warmup-steps 1 \
    --lr-scheduler-type torchtitan --lr-scheduler-kwargs '{"decay_ratio": 0, "total_steps": 4}'
check 2 "torchtitan: the learning rate of step 4 would be -" -- run "$T/x" --max-steps 4 \
    --lr-scheduler-type torchtitan --lr-scheduler-kwargs '{"min_lr_factor": -1}'
[ ! -e "$T/x" ] && echo "ok: refused schedules leave no output dir" || { echo "FAIL: output dir written"; fail=1; }

# the kwargs are recorded and frozen: another min_lr_rate is another experiment (compare REFUSES it)
run "$T/m1" --max-steps 4 --lr-scheduler-type cosine_with_min_lr --lr-scheduler-kwargs '{"min_lr_rate": 0.1}' >/dev/null 2>&1
run "$T/m2" --max-steps 4 --lr-scheduler-type cosine_with_min_lr --lr-scheduler-kwargs '{"min_lr_rate": 0.2}' >/dev/null 2>&1
jcheck "$T/m1/train_args.json" "r['lr_scheduler_kwargs'] == {'min_lr_rate': 0.1}" "train_args.json records lr_scheduler_kwargs"
check 2 "frozen input frozen.hyperparameters.lr_scheduler_kwargs.min_lr_rate differs: 0.1 vs 0.2" -- "$B" compare "$T/m1" "$T/m2"
exit $fail
