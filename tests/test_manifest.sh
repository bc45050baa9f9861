#!/usr/bin/env bash
# OUTPUT/manifest.json (src/train/manifest.c) and its use by `portatrain compare`:
# the manifest holds the sha256 (checked with sha256sum) and size of the config,
# weights, tokenizer and data shard; runs from another init seed, other data or
# a model dir without tokenizer are REFUSED naming the field; cpu vs cpu-ref
# with identical inputs is accepted with the backend as an allowed difference;
# a resumed run is compared with an uninterrupted one (exact); a run dir without
# manifest.json falls back to train_args.json (verified false); an unhashable
# frozen input fails the run with one line naming the file.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
fail=0
. "$PT_SOURCE_DIR/tests/cli_check.sh"
sha() { sha256sum "$1" | cut -d' ' -f1; }
TOK=$S/data/demo/qwen3-tokenizer/tokenizer.json
DATA=$S/data/demo/shards/train
"$B" init --config "$S/configs/tiny.json" --output-dir "$T/m" --seed 42 >/dev/null 2>&1 || exit 1
"$B" init --config "$S/configs/tiny.json" --output-dir "$T/m43" --seed 43 >/dev/null 2>&1 || exit 1
cp -r "$T/m" "$T/m-notok"
cp "$TOK" "$T/m/"; cp "$TOK" "$T/m43/"
# ASan+UBSan builds: 2 rows a step (the cpu-ref run is ~15 s a step there at 4; the same code paths)
MB=4; [ -n "${PT_SANITIZED:-}" ] && MB=2
F="--data $DATA --max-steps 3 --seq-len 64 --per-device-train-batch-size $MB --learning-rate 3e-3 --warmup-steps 2
   --lr-scheduler-type cosine --weight-decay 0.1 --max-grad-norm 1.0 --seed 42 --quiet"
train() { "$B" train $F "$@" >"$T/train.log" 2>&1 || { echo "FAIL: train $*"; cat "$T/train.log"; exit 1; }; }
train --model "$T/m" --backend cpu --output-dir "$T/a"
train --model "$T/m" --backend cpu-ref --output-dir "$T/ref"
train --model "$T/m43" --backend cpu --output-dir "$T/seed43"
train --model "$T/m" --backend cpu --output-dir "$T/eval" --data "$S/data/demo/shards/eval"
train --model "$T/m-notok" --backend cpu --output-dir "$T/notok"

M=$T/a/manifest.json
expect '[ -s "$M" ]' "manifest.json written"
flat=$(tr -d ' \n\t' <"$M")
expect '[[ "$flat" == *"\"format\":\"portatrain-manifest\",\"version\":1"* ]]' "format/version"
expect '[[ "$flat" == *"\"config\":{\"name\":\"config.json\",\"bytes\":$(stat -c %s "$T/m/config.json"),\"sha256\":\"$(sha "$T/m/config.json")\"}"* ]]' "config sha256"
expect '[[ "$flat" == *"\"weights\":[{\"name\":\"model.safetensors\",\"bytes\":$(stat -c %s "$T/m/model.safetensors"),\"sha256\":\"$(sha "$T/m/model.safetensors")\"}]"* ]]' "weights sha256"
expect '[[ "$flat" == *"\"tokenizer\":{\"name\":\"tokenizer.json\",\"bytes\":$(stat -c %s "$TOK"),\"sha256\":\"$(sha "$TOK")\"}"* ]]' "tokenizer sha256"
expect '[[ "$flat" == *"\"data\":[{\"name\":\"shard-00000.bin\",\"bytes\":$(stat -c %s "$DATA/shard-00000.bin"),\"sha256\":\"$(sha "$DATA/shard-00000.bin")\"}]"* ]]' "data shard sha256"
expect '[[ "$flat" == *"\"seed\":42,\"hyperparameters\":{\"learning_rate\":0.003,\"lr_scheduler_type\":\"cosine\",\"warmup_steps\":2,\"max_steps\":3,"* ]]' "seed and hyper-parameters"
expect '[[ "$flat" == *"\"backend\":\"cpu\","*"\"precision\":\"fp32\",\"parallel\":{\"tp\":1,\"dp\":1,\"fsdp\":1},\"world_size\":1,\"ranks\":[{\"rank\":0,\"hostname\":"* ]]' "platform"
expect '[[ "$flat" == *"\"software\":{\"portatrain_version\":"*"\"git_commit\":"*"\"cjson\":"*"\"openssl\":\"OpenSSL"* ]]' "software"
expect '[[ "$flat" == *"\"run\":{\"output_dir\":\"$T/a\","*"\"resume_from_checkpoint\":null}"* ]]' "run"
expect 'tr -d " \n\t" <"$T/notok/manifest.json" | grep -qF "\"tokenizer\":null"' "no tokenizer: null"
check_fixed 0 "frozen inputs: match (manifest.json)" -- "$B" compare "$T/ref" "$T/a" --json "$T/r.json"
grep -q "allowed difference: platform.backend" "$T/out" || { echo "FAIL: backend not listed as allowed"; fail=1; }
r=$(tr -d ' \n\t' <"$T/r.json")
expect '[[ "$r" == *"\"verified\":true,\"source\":\"manifest.json\",\"match\":true,\"differences\":[]"* ]]' "json: verified, source"
check_fixed 2 "frozen input frozen.weights[0].sha256 differs" -- "$B" compare "$T/a" "$T/seed43" --json "$T/r.json"
r=$(tr -d ' \n\t' <"$T/r.json")
expect '[[ "$r" == *"\"verdict\":\"REFUSED\""* && "$r" == *"{\"field\":\"frozen.weights[0].sha256\",\"a\":\"\\\"$(sha "$T/m/model.safetensors")\\\"\""* ]]' "json: weights difference listed"
check_fixed 2 "frozen input frozen.data[0].sha256 differs" -- "$B" compare "$T/a" "$T/eval"
grep -qF "frozen.data[0].bytes" "$T/out" || { echo "FAIL: data bytes difference not listed"; fail=1; }
check_fixed 2 'frozen input frozen.tokenizer differs: {"name":"tokenizer.json"' -- "$B" compare "$T/a" "$T/notok"

# a frozen input that cannot be hashed fails the run with one line naming it
cp -r "$T/m-notok" "$T/m-bad"; mkdir "$T/m-bad/tokenizer.json"
check_fixed 1 "error: manifest: $T/m-bad/tokenizer.json: not a readable file" -- "$B" train $F --model "$T/m-bad" --backend cpu --output-dir "$T/bad"

# a resumed continuation (killed after step 2, resumed from checkpoint-2) vs the uninterrupted run
(PT_FAULT_KILL_AFTER_STEP=2 "$B" train $F --model "$T/m" --backend cpu --output-dir "$T/res" --save-steps 2; true) >/dev/null 2>&1
expect '[ "$(cat "$T/res/latest" 2>/dev/null)" = checkpoint-2 ]' "killed after step 2 with checkpoint-2"
train --model "$T/m" --backend cpu --output-dir "$T/res" --save-steps 2 --resume-from-checkpoint latest
expect 'grep -q restore_time_s "$T/res/metrics.jsonl"' "the continuation really resumed"
expect 'tr -d " \n\t" <"$T/res/manifest.json" | grep -qF "\"resume_from_checkpoint\":\"latest\""' "resumed manifest names the checkpoint"
check_fixed 0 "allowed difference: run.resume_from_checkpoint" -- "$B" compare "$T/a" "$T/res" --profile exact

# fallback: no manifest.json on one side -> train_args.json, unverified
cp -r "$T/a" "$T/old"; rm "$T/old/manifest.json"
check_fixed 0 "frozen inputs: match (train_args.json only, unverified: frozen inputs partly verified: $T/old has no manifest.json" \
    -- "$B" compare "$T/old" "$T/ref" --json "$T/r.json"
r=$(tr -d ' \n\t' <"$T/r.json")
expect '[[ "$r" == *"\"verified\":false,\"source\":\"train_args.json\""* ]]' "json: fallback verified false"
cp -r "$T/seed43" "$T/old43"; rm "$T/old43/manifest.json"
"$B" compare "$T/old" "$T/old43" >"$T/out" 2>&1; rc=$?
expect '[ $rc != 2 ]' "fallback does not see other init weights (rc $rc, not 2): that is what the manifest adds"
exit $fail
