#!/usr/bin/env bash
# CLI guards from the CLI audit: a fresh train into a previous run's directory is refused unless
# --resume-from-checkpoint or --overwrite-output-dir (which removes only portatrain's files); resuming
# past --max-steps is refused; boolean flags honour or reject "=value"; numeric flags are range-checked
# before any narrowing; topo, ckpt bench, eval, --supervise and the exit codes / message prefixes.
set -uo pipefail
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
. "$S/tests/cli_check.sh"
G="$S/tests/fixtures/golden/tied"
tr() { # OUT [extra...]: 4 steps on the tied fixture
    local out=$1; shift
    "$B" train --model "$G" --data "$G/data.bin" --output-dir "$out" --max-steps 4 --seq-len 16 \
        --per-device-train-batch-size 2 --learning-rate 3e-3 --quiet "$@"
}
ok0() { if "$@" >"$T/out" 2>&1; then echo "ok: $*"; else echo "FAIL (rc $?, want 0): $*"; cat "$T/out"; fail=1; fi; }
yes_() { if eval "$1"; then echo "ok: $2"; else echo "FAIL: $2"; fail=1; fi; }

# 1. a previous run in --output-dir
ok0 tr "$T/run" --save-steps 2
check 2 "^portatrain: error: $T/run: holds a previous run.*--overwrite-output-dir" -- tr "$T/run"
yes_ '[ "$(wc -l < "$T/run/metrics.jsonl")" = 4 ] && [ -d "$T/run/checkpoint-4" ]' "a refused run leaves the old one intact"
echo mine > "$T/run/notes.txt"; mkdir -p "$T/run/heartbeats"; echo mine > "$T/run/heartbeats/keep.txt"
ok0 tr "$T/run" --overwrite-output-dir --save-steps 3 --max-steps 3
yes_ '[ ! -e "$T/run/checkpoint-2" ] && [ ! -e "$T/run/checkpoint-4" ] && [ -d "$T/run/checkpoint-3" ]' \
    "--overwrite-output-dir removes the old checkpoints"
yes_ '[ "$(cat "$T/run/latest")" = checkpoint-3 ] && [ "$(wc -l < "$T/run/metrics.jsonl")" = 3 ]' \
    "--overwrite-output-dir: latest and metrics are the new run's"
yes_ '[ "$(cat "$T/run/notes.txt")" = mine ] && [ -f "$T/run/heartbeats/keep.txt" ]' "user files are kept"
# a checkpoint directory without metrics (killed between rename and latest) also marks a run
mkdir -p "$T/ck/checkpoint-5"
check 2 "holds a previous run" -- tr "$T/ck"
# the run config records the model as an absolute path (export from elsewhere finds its tokenizer)
mkdir -p "$T/wd/mtok"; cp "$G/config.json" "$G/model.safetensors" "$T/wd/mtok/"; echo '{"tok": 1}' > "$T/wd/mtok/tokenizer.json"
(cd "$T/wd" && "$B" train --model mtok --data "$G/data.bin" --output-dir "$T/rel" --max-steps 1 --save-steps 1 \
    --seq-len 16 --per-device-train-batch-size 2 --quiet)
jcheck "$T/rel/train_args.json" "r['model'] == '$T/wd/mtok' or r['model'].endswith('/wd/mtok') and r['model'].startswith('/')" \
    "train_args.json: model is absolute"
(cd / && "$B" export --checkpoint "$T/rel/checkpoint-1" --output-dir "$T/rel_export" 2>/dev/null)
yes_ 'cmp -s "$T/wd/mtok/tokenizer.json" "$T/rel_export/tokenizer.json"' "export from another directory copies the tokenizer"

# 2. resuming past --max-steps
check 2 "past --max-steps 2" -- tr "$T/run" --resume-from-checkpoint latest --max-steps 2
yes_ '[ "$(wc -l < "$T/run/metrics.jsonl")" = 3 ]' "a refused resume keeps the newer metrics"

# 3. boolean flags with =value
ok0 tr "$T/b1" --max-steps 1 --bf16=false
jcheck "$T/b1/train_args.json" "r['precision'] == 'fp32'" "--bf16=false is fp32"
ok0 tr "$T/b2" --max-steps 1 --bf16=YES --quiet=1
jcheck "$T/b2/train_args.json" "r['precision'] == 'bf16'" "--bf16=YES is bf16"
check 2 "option --bf16 takes no value or one of true/false" -- tr "$T/b3" --bf16=maybe
check 2 "option --shuffle takes no value or one of" -- tr "$T/b3" --shuffle=2
check 2 "option --json takes no value or one of" -- "$B" topo --world 1 --config "$G/config.json" --json=x
yes_ '[ ! -e "$T/b3" ]' "rejected flags create no output dir"

# 4. numeric ranges
check 2 "option --seq-len must be in \[1, " -- tr "$T/n" --seq-len 4294967312
check 2 "option --per-device-train-batch-size must be in" -- tr "$T/n" --per-device-train-batch-size -1
check 2 "rows per step, more than" -- tr "$T/n" --per-device-train-batch-size 1000 --gradient-accumulation-steps 3000000
check 2 "option --learning-rate expects a number" -- tr "$T/n" --learning-rate nan
check 2 "option --learning-rate expects a number" -- tr "$T/n" --learning-rate inf
check 2 "option --learning-rate must be >= 0" -- tr "$T/n" --learning-rate -1e-3
check 2 "option --tp must be in" -- tr "$T/n" --tp 0
check 2 "option --tp must be in" -- tr "$T/n" --tp=-2
check 2 "option --seq-len must be in" -- "$B" eval --model "$G" --data "$G/data.bin" --seq-len 4294967312
check 2 "option --max-batches must be in" -- "$B" eval --model "$G" --data "$G/data.bin" --seq-len 16 --max-batches -3
check 2 "--max-shard-size must be a positive number of bytes" -- "$B" export --checkpoint "$T/run/checkpoint-3" --output-dir "$T/ex" \
    --max-shard-size -1
check 2 "option --seq-len must be in" -- "$B" accept --baseline cpu-ref:fp32 --candidate cpu:fp32 --output-dir "$T/n" \
    --seq-len 4294967312
yes_ '[ ! -e "$T/n" ] && [ ! -e "$T/ex" ]' "range errors create no output dir"

# 5. topo --tp 0 (was SIGFPE)
check 2 "option --tp must be in" -- "$B" topo --world 4 --tp 0 --config "$G/config.json"
check 1 "tp 65536 x fsdp 65536 x dp 1 = 4294967296 ranks" -- "$B" topo --world 4 --tp 65536 --fsdp 65536 \
    --config "$G/config.json"

# 6. ckpt bench into a run's directory
check 2 "ckpt bench needs an empty or new scratch directory" -- "$B" ckpt bench --config "$G/config.json" \
    --output-dir "$T/run" --reps 1
yes_ '[ -d "$T/run/checkpoint-3" ] && [ "$(cat "$T/run/latest")" = checkpoint-3 ]' "ckpt bench left the run alone"

# 7. eval: --max-batches 0, a non-finite loss
check 2 "option --max-batches must be in" -- "$B" eval --model "$G" --data "$G/data.bin" --seq-len 16 --max-batches 0
mkdir -p "$T/nanmodel"; cp "$G/config.json" "$T/nanmodel/"
python3 "$PT_SOURCE_DIR/tests/py/st_nan_weights.py" "$G/model.safetensors" "$T/nanmodel/model.safetensors"
check 3 "portatrain: error: .*non-finite eval loss" -- "$B" eval --model "$T/nanmodel" --data "$G/data.bin" --seq-len 16
"$B" eval --model "$T/nanmodel" --data "$G/data.bin" --seq-len 16 2>/dev/null >"$T/nan.json"
jcheck "$T/nan.json" "r['loss'] is None and r['perplexity'] is None" "eval prints valid JSON (null) for a NaN loss"

# 8. --supervise
check 2 "^portatrain: error: $T/run: holds a previous run" -- tr "$T/run" --supervise
yes_ '[ ! -e "$T/run/events.jsonl" ]' "--supervise refuses before writing events.jsonl"
check 2 "option --max-restarts expects an integer" -- tr "$T/sv" --supervise --max-restarts abc
check 2 "option --hang-timeout must be >= 0" -- tr "$T/sv" --supervise --hang-timeout -1
ok0 "$B" train --model "$G" --data "$G/data.bin" --output-dir="$T/sv_eq2" --max-steps 2 --seq-len 16 \
    --per-device-train-batch-size 2 --quiet --supervise
yes_ '[ -f "$T/sv_eq2/recovery.json" ] && [ -f "$T/sv_eq2/model.safetensors" ]' "--supervise --output-dir=X is honoured"
# a worker usage error (exit 2) is passed through at once, not retried
check 2 "must be fp32 or bf16" -- tr "$T/sv2" --supervise --precision fp16 --max-restarts 3 --restart-backoff 5
yes_ '[ "$(grep -c "must be fp32 or bf16" "$T/out")" = 1 ]' "no restart after a usage error (one worker ran)"
yes_ '[ ! -e "$T/sv2" ]' "a supervised usage error leaves no output dir (no events.jsonl)"
mkdir -p "$T/sv4"; echo mine > "$T/sv4/notes.txt"
check 2 "must be fp32 or bf16" -- tr "$T/sv4" --supervise --precision fp16
yes_ '[ "$(ls "$T/sv4")" = notes.txt ]' "  in an existing dir: only the user's file is left"
# a worker killed before its first checkpoint restarts from scratch (no checkpoint to resume)
ok0 tr "$T/sv3" --supervise --max-steps 6 --save-steps 4 --inject kill:step=2
jcheck "$T/sv3/recovery.json" "r['completed'] and r['restarts'] == 1" "supervised restart before the first checkpoint"
yes_ '[ -f "$T/sv3/events.jsonl" ] && [ "$(wc -l < "$T/sv3/metrics.jsonl")" = 6 ]' \
    "the restart kept events.jsonl and rewrote metrics"

# resuming where there is no valid checkpoint cannot succeed on a retry: exit 2, passed through by --supervise
# at once (was exit 1, retried 3 times with back-off)
mkdir -p "$T/nock"
check 2 "no valid checkpoint to resume from" -- tr "$T/nock" --resume-from-checkpoint latest
check 2 "no valid checkpoint to resume from" -- tr "$T/nock" --supervise --resume-from-checkpoint latest --restart-backoff 5
yes_ '[ "$(grep -c "no valid checkpoint to resume from" "$T/out")" = 1 ]' "  supervised: one worker ran, no retry"
# data that cannot be read as asked fails the same way on a retry: exit 2, passed through by --supervise (was
# exit 1, retried); the message says how to get an end-of-document id (there was no way to "set eos_id")
check 2 "padded mode needs the end-of-document id, which a bare shard does not record: use the data set directory" \
    -- tr "$T/pad" --data-mode padded
check 2 "a bare shard does not record" -- tr "$T/pad2" --data-mode padded --supervise --restart-backoff 5
yes_ '[ "$(grep -c "a bare shard does not record" "$T/out")" = 1 ]' "  supervised: one worker ran, no retry"
printf 'not a shard\0' > "$T/bad.bin"  # binary junk: text there is refused as raw text (test_first_hour)
check 2 "truncated shard header" -- "$B" train --model "$G" --data "$T/bad.bin" --output-dir "$T/pad3" \
    --max-steps 2 --seq-len 16 --quiet --supervise --restart-backoff 5
yes_ '[ "$(grep -c "truncated shard header" "$T/out")" = 1 ]' "  a malformed shard: one worker ran, no retry"

# 9. exit codes and message prefixes
check 2 "portatrain: error: --data is required" -- "$B" train --model "$G" --output-dir "$T/e1" --max-steps 1 --seq-len 16
check 2 "portatrain: error: --model is required" -- "$B" train --data "$G/data.bin" --output-dir "$T/e1" --max-steps 1 \
    --seq-len 16
check 2 "portatrain: error: --max-steps must be positive" -- "$B" train --model "$G" --data "$G/data.bin" \
    --output-dir "$T/e1" --seq-len 16
check 2 "lr-scheduler-type 'nope' unknown" -- tr "$T/e1" --lr-scheduler-type nope
check 2 "seq-len 100000 exceeds" -- tr "$T/e1" --seq-len 100000
check 2 "activation-checkpointing 'bogus'" -- tr "$T/e1" --activation-checkpointing bogus
yes_ '[ ! -e "$T/e1" ]' "validation failures leave no output dir"
check 2 "^portatrain: error: --profile: unknown profile" -- "$B" compare --profile nope "$T/run" "$T/run"
yes_ '! grep -q "compare: compare:" "$T/out"' "compare: no doubled prefix"
check 2 "^portatrain: error: " -- "$B" accept --baseline nope:fp32 --candidate cpu:fp32 --output-dir "$T/acc"
# 11. HF TrainingArguments spellings: "--learning_rate" is "--learning-rate" (as HfArgumentParser takes both),
# the same run bit for bit; errors name the option; a misspelling is reported as typed
ok0 tr "$T/u1" --max-steps 2 --learning-rate 1e-3 --warmup-steps 1 --activation-checkpointing full
ok0 "$B" train --model "$G" --data "$G/data.bin" --output_dir "$T/u2" --max_steps=2 --seq_len 16 \
    --per_device_train_batch_size 2 --learning_rate 1e-3 --warmup_steps=1 --gradient_checkpointing --quiet
same_run() { python3 -c "import json,sys
a, b = ([json.loads(l) for l in open(f)] for f in sys.argv[1:])
keys = ('step', 'loss', 'grad_norm', 'lr')
sys.exit(0 if len(a) == 2 and [[r[k] for k in keys] for r in a] == [[r[k] for k in keys] for r in b] else 1)" "$1" "$2"; }
yes_ 'same_run "$T/u1/metrics.jsonl" "$T/u2/metrics.jsonl" && cmp -s "$T/u1/model.safetensors" "$T/u2/model.safetensors"' \
    "underscore flags: the same run"
jcheck "$T/u2/train_args.json" "r['activation_checkpointing'] == 'full' and r['warmup_steps'] == 1" \
    "--gradient_checkpointing is full recompute, --warmup_steps=1 honoured"
check 2 "option --max-steps expects an integer, got 'x'" -- tr "$T/u3" --max_steps=x
check 2 "unknown option or argument '--learning_rat'" -- tr "$T/u3" --learning_rat 1
check 2 "option --supervise takes no value or one of" -- tr "$T/u3" --supervise=maybe
ok0 tr "$T/u4" --max-steps 1 --supervise=false
yes_ '[ ! -e "$T/u4/recovery.json" ] && [ -f "$T/u4/model.safetensors" ]' "--supervise=false: an unsupervised run"
ok0 tr "$T/u5" --max-steps 1 --supervise --max_restarts 0
jcheck "$T/u5/recovery.json" "r['completed']" "--supervise takes the supervisor's flags with underscores"
yes_ '[ ! -e "$T/u3" ]' "rejected underscore flags create no output dir"

# 12. --num-train-epochs (HF's num_train_epochs): ceil(E x steps per epoch) steps when --max-steps is not
# given; an epoch of the tied fixture at 2 x 16 tokens is 40 windows = 20 steps; --max-steps wins
ep() { "$B" train --model "$G" --data "$G/data.bin" --output-dir "$1" --seq-len 16 --per-device-train-batch-size 2 \
    --learning-rate 3e-3 --quiet "${@:2}"; }
ok0 ep "$T/ep1" --num-train-epochs 1
ok0 ep "$T/ep2" --num_train_epochs 2.5
ok0 ep "$T/ep3" --num-train-epochs 5 --max-steps 3
yes_ '[ "$(wc -l < "$T/ep1/metrics.jsonl")" = 20 ] && [ "$(wc -l < "$T/ep2/metrics.jsonl")" = 50 ] &&
      [ "$(wc -l < "$T/ep3/metrics.jsonl")" = 3 ]' "1 and 2.5 epochs are 20 and 50 steps; --max-steps 3 overrides"
jcheck "$T/ep2/train_args.json" "r['max_steps'] == 50 and r['num_train_epochs'] == 2.5" "train_args.json: resolved max_steps and the epochs"
python3 -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; sys.exit(0 if abs(r[-1]['lr'] - 3e-3 / 50) < 1e-12 else 1)" \
    "$T/ep2/metrics.jsonl" && echo "ok: the linear schedule ends at the resolved last step" || { echo "FAIL: schedule length"; fail=1; }
python3 -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; sys.exit(0 if [x['epoch'] for x in r][::10] == [0.05, 0.55, 1.05, 1.55, 2.05] and r[19]['epoch'] == 1 and r[-1]['epoch'] == 2.5 else 1)" \
    "$T/ep2/metrics.jsonl" && echo "ok: metrics.jsonl epoch (HF's): 1 after 20 steps, 2.5 at the end" || { echo "FAIL: epoch field"; fail=1; }
ok0 ep "$T/ep4" --num-train-epochs 1 --max-steps 20
yes_ 'cmp -s "$T/ep1/model.safetensors" "$T/ep4/model.safetensors"' "1 epoch = --max-steps 20, bit for bit"
ep "$T/ep5" --num-train-epochs 1 --save-steps 8 --inject kill:step=10 >/dev/null 2>&1  # killed after checkpoint-8
yes_ '[ -d "$T/ep5/checkpoint-8" ] && [ ! -e "$T/ep5/model.safetensors" ]' "  a 1-epoch run killed at step 10"
ok0 ep "$T/ep8" --max-steps 20
check 0 "verdict: ACCEPTED" -- "$B" compare "$T/ep1" "$T/ep8" --profile exact
cp -r "$T/ep1" "$T/ep1old"; rm "$T/ep1old/manifest.json"
check 0 "verdict: ACCEPTED" -- "$B" compare "$T/ep1old" "$T/ep8" --profile exact
yes_ 'grep -q "allowed difference: num_train_epochs" "$T/out"' "  1 epoch vs --max-steps 20: the same frozen inputs (manifest, and train_args.json)"
ok0 ep "$T/ep5" --num-train-epochs 1 --resume-from-checkpoint latest
yes_ 'cmp -s "$T/ep1/model.safetensors" "$T/ep5/model.safetensors"' "  resumed with --num-train-epochs: the same run"
ok0 ep "$T/ep6" --num-train-epochs 0.5 --supervise --save-steps 4
jcheck "$T/ep6/recovery.json" "r['completed'] and r['productive_s'] > 0" "  supervised: goodput counts the resolved steps"
check 2 "must be positive (or give --num-train-epochs)" -- "$B" train --model "$G" --data "$G/data.bin" --output-dir "$T/ep7" --seq-len 16
check 2 "num-train-epochs must be > 0" -- ep "$T/ep7" --num-train-epochs 0
check 2 "step=random needs --max-steps" -- ep "$T/ep7" --num-train-epochs 1 --inject kill:step=random
check 2 "step=random needs --max-steps" -- ep "$T/ep7" --num-train-epochs 1 --supervise --inject kill:step=random
yes_ '[ ! -e "$T/ep7" ]' "  refused epoch runs leave no output dir"
# warmup as a ratio of the resolved total (transformers 5: --warmup-steps below 1; transformers 4: --warmup-ratio):
# ceil(0.25 x 20) = 5 warmup steps, the same run as --warmup-steps 5
ok0 ep "$T/wr1" --num-train-epochs 1 --warmup-steps 0.25
ok0 ep "$T/wr2" --num-train-epochs 1 --warmup_ratio 0.25
ok0 ep "$T/wr3" --max-steps 20 --warmup-steps 5
yes_ 'cmp -s "$T/wr1/model.safetensors" "$T/wr3/model.safetensors" && cmp -s "$T/wr2/model.safetensors" "$T/wr3/model.safetensors"' \
    "--warmup-steps 0.25 and --warmup-ratio 0.25 of 20 steps = --warmup-steps 5"
jcheck "$T/wr1/train_args.json" "r['warmup_steps'] == 5 and r['warmup_ratio'] == 0.25" "  train_args.json: resolved warmup_steps and the ratio"
python3 -c "import json,sys; r=[json.loads(l)['lr'] for l in open(sys.argv[1])]; sys.exit(0 if r[0] == 0 and r[4] < 3e-3 and r[5] == 3e-3 else 1)" \
    "$T/wr1/metrics.jsonl" && echo "ok:   the lr peaks after 5 warmup steps" || { echo "FAIL: warmup ratio schedule"; fail=1; }
ok0 ep "$T/wr4" --max-steps 20 --warmup-ratio 0.9 --warmup-steps 5
yes_ 'cmp -s "$T/wr4/model.safetensors" "$T/wr3/model.safetensors"' "  a --warmup-steps >= 1 wins over --warmup-ratio (as HF)"
check 0 "verdict: ACCEPTED" -- "$B" compare "$T/wr1" "$T/wr3" --profile exact
check 2 "warmup-ratio must be in \[0, 1\]" -- ep "$T/wr5" --max-steps 2 --warmup-ratio 1.5

# the progress line's loss at --logging-steps 3 is the mean of the steps since the previous line (HF's logged
# loss); metrics.jsonl keeps every step's
"$B" train --model "$G" --data "$G/data.bin" --output-dir "$T/lg" --max-steps 6 --seq-len 16 --per-device-train-batch-size 2 \
    --logging-steps 3 2>"$T/lg.err" >/dev/null
python3 "$PT_SOURCE_DIR/tests/py/progress_loss.py" "$T/lg/metrics.jsonl" "$T/lg.err" && echo "ok: progress line loss = mean since the previous line" || { echo "FAIL: progress line loss"; fail=1; }

# 13. more HF TrainingArguments: --save-strategy no|steps|epoch, --optim (AdamW names), --report-to none
ok0 ep "$T/ss1" --num-train-epochs 1.5 --save-strategy epoch --optim adamw_torch_fused --report_to none
yes_ '[ -d "$T/ss1/checkpoint-20" ] && [ "$(ls -d "$T/ss1"/checkpoint-* | wc -l)" = 1 ]' \
    "--save-strategy epoch: a checkpoint at the end of the 20-step epoch only"
yes_ '[ -f "$T/ss1/model.safetensors" ] && [ "$(wc -l < "$T/ss1/metrics.jsonl")" = 30 ]' "  30 steps and the final model"
ok0 ep "$T/ss2" --max-steps 4 --save-steps 2 --save_strategy no
yes_ '! ls -d "$T/ss2"/checkpoint-* >/dev/null 2>&1' "--save-strategy no: no checkpoint despite --save-steps"
ok0 ep "$T/ss3" --max-steps 2 --save-strategy steps
jcheck "$T/ss3/train_args.json" "r['save_steps'] == 500" "--save-strategy steps without --save-steps: HF's 500"
check 2 "best needs evaluation during training" -- ep "$T/ss4" --max-steps 2 --save-strategy best
check 2 "only AdamW is implemented" -- ep "$T/ss4" --max-steps 2 --optim sgd
check 2 "report-to wandb: no trackers here" -- ep "$T/ss4" --max-steps 2 --report-to wandb
yes_ '[ ! -e "$T/ss4" ]' "  refused: no output dir"

# 10. --help anywhere prints the command's help on stdout and exits 0 (a subcommand's --help too)
for c in init train eval tokenizer tokenize ckpt "ckpt inspect" "ckpt verify" "ckpt bench" export compare accept topo \
         report devices; do
    # shellcheck disable=SC2086
    "$B" $c --help >"$T/help" 2>"$T/help.err"; rc=$?
    yes_ '[ $rc = 0 ] && grep -q "usage: portatrain" "$T/help" && [ ! -s "$T/help.err" ]' "$c --help: usage on stdout, exit 0"
done
exit $fail
