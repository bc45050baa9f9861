#!/usr/bin/env bash
# HF model directories written and read by portatrain (src/io/hf_model.c, src/cli/cmd_export.c,
# src/cli/cmd_ckpt.c, src/model/config.c): 1. a save into a directory holding an earlier save leaves only
# the new weight files (as transformers' save_pretrained does), sharded <-> unsharded; 2. export and train's final save
# copy every tokenizer/generation sidecar; 3. checkpoints without model config or lacking a required tensor
# (export error, ckpt verify); 4. tied config + differing lm_head.weight refused,
# lm_head.weight as the only stored copy read as the embedding; 5. head_dim defaults to
# 128; 5b. num_key_value_heads absent (32) or null (= heads), attention_dropout kept,
# training with it refused; 6. eos_token_id lists, hidden_act swish and pad_token_id; 7. sliding-window keys;
# 8. rope_scaling beside rope_parameters; 9. null values Qwen3Config refuses; 10. export --dtype float16 and
# --max-shard-size units.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
. "$S/tests/cli_check.sh"
fail=0
expect() {  # description, then a test expression evaluated by the shell
    if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi
}
F=$S/tests/fixtures/golden/tied
loss() { "$B" eval --model "$1" --data "$F/data.bin" --seq-len 16 --max-batches 2 2>/dev/null | sed 's/.*"loss": *\([^,]*\),.*/\1/'; }
"$B" train --model "$F" --data "$F/data.bin" --output-dir "$T/run" --max-steps 2 --save-steps 1 --seq-len 16 \
    --per-device-train-batch-size 2 --learning-rate 1e-2 --quiet >"$T/train.log" 2>&1 || { cat "$T/train.log"; exit 1; }
C1=$T/run/checkpoint-1; C2=$T/run/checkpoint-2
"$B" export --checkpoint "$C1" --output-dir "$T/ref1" 2>/dev/null || exit 1
"$B" export --checkpoint "$C2" --output-dir "$T/ref2" 2>/dev/null || exit 1
L1=$(loss "$T/ref1"); L2=$(loss "$T/ref2")
expect "the two checkpoints differ ($L1 vs $L2)" '[ -n "$L1" ] && [ "$L1" != "$L2" ]'

# --- 1. stale weight files of an earlier save are removed ---
X=$T/x
check 0 "exported" -- "$B" export --checkpoint "$C1" --output-dir "$X"
check 0 "exported" -- "$B" export --checkpoint "$C2" --output-dir "$X" --max-shard-size 20000
expect "unsharded -> sharded: stale model.safetensors removed" '[ ! -e "$X/model.safetensors" ] && [ -e "$X/model.safetensors.index.json" ]'
expect "unsharded -> sharded: the new weights load ($(loss "$X") = $L2)" '[ "$(loss "$X")" = "$L2" ]'
python3 "$S/tests/py/st_index_matches.py" "$X" >"$T/idx"
expect "sharded index: weight_map names each tensor's file, metadata total_size (tensor bytes) and total_parameters as transformers 5 writes them" \
    '[ "$(cat "$T/idx")" = True ]'
n20=$(ls "$X" | grep -c -- '-of-00020\.safetensors$')
check 0 "exported" -- "$B" export --checkpoint "$C1" --output-dir "$X" --max-shard-size 40000
expect "sharded -> sharded: only the new shards remain ($n20 old)" \
    '[ "$n20" -gt 0 ] && ! ls "$X" | grep -q -- "-of-00020\.safetensors$" && ls "$X" | grep -q -- "-00001-of-"'
expect "sharded -> sharded: the new weights load" '[ "$(loss "$X")" = "$L1" ]'
check 0 "exported" -- "$B" export --checkpoint "$C2" --output-dir "$X"
expect "sharded -> unsharded: stale index and shards removed" \
    '[ -e "$X/model.safetensors" ] && [ -z "$(ls "$X" | grep -e "-of-" -e "index.json")" ]'
expect "sharded -> unsharded: the new weights load" '[ "$(loss "$X")" = "$L2" ]'
expect "no staging directory left behind" '[ -z "$(ls -A "$X" | grep tmp)" ]'
# init into a directory holding a sharded export: the init weights are the ones loaded
"$B" export --checkpoint "$C2" --output-dir "$T/i" --max-shard-size 20000 2>/dev/null
check 0 "" -- "$B" init --config "$F/config.json" --output-dir "$T/i" --seed 1
expect "init over a sharded dir: stale index and shards removed" '[ -z "$(ls "$T/i" | grep -e "-of-" -e "index.json")" ]'
# other files in the directory are kept
expect "other files kept" 'touch "$T/i/README.md" "$T/i/model-notes.safetensors"; "$B" export --checkpoint "$C1" --output-dir "$T/i" >/dev/null 2>&1 && [ -e "$T/i/README.md" ] && [ -e "$T/i/model-notes.safetensors" ]'

# --- 2. export copies every tokenizer / generation sidecar of the source model dir ---
M=$T/src; mkdir -p "$M"; cp "$F/config.json" "$F/model.safetensors" "$F/generation_config.json" "$M/"
SIDE="tokenizer.json tokenizer_config.json special_tokens_map.json chat_template.jinja generation_config.json vocab.json merges.txt added_tokens.json"
for f in $SIDE; do [ -e "$M/$f" ] || echo "{\"sidecar\": \"$f\"}" >"$M/$f"; done
"$B" train --model "$M" --data "$F/data.bin" --output-dir "$T/srun" --max-steps 1 --save-steps 1 --seq-len 16 \
    --per-device-train-batch-size 2 --quiet >"$T/train.log" 2>&1 || { cat "$T/train.log"; exit 1; }
check 0 "exported" -- "$B" export --checkpoint "$T/srun/checkpoint-1" --output-dir "$T/side"
ok=1; for f in $SIDE; do cmp -s "$M/$f" "$T/side/$f" || { echo "  not copied: $f"; ok=0; }; done
expect "every sidecar copied from the run's model dir" '[ $ok = 1 ]'
ok=1; for f in $SIDE; do cmp -s "$M/$f" "$T/srun/$f" || { echo "  not in the final model dir: $f"; ok=0; }; done
expect "train's final model dir (OUT) carries every sidecar of --model too" '[ $ok = 1 ]'
rm "$M/vocab.json" "$M/merges.txt"
check 0 "exported" -- "$B" export --checkpoint "$T/srun/checkpoint-1" --output-dir "$T/side2"
expect "only the sidecars present are copied" '[ ! -e "$T/side2/vocab.json" ] && [ ! -e "$T/side2/merges.txt" ] && [ -e "$T/side2/chat_template.jinja" ]'
mv "$M" "$T/src-moved"
check 0 "source model directory $M not found; no tokenizer or generation files copied" -- \
    "$B" export --checkpoint "$T/srun/checkpoint-1" --output-dir "$T/side3"
check 0 "exported" -- "$B" export --checkpoint "$T/srun/checkpoint-1" --output-dir "$T/side4" --tokenizer "$T/src-moved"
expect "--tokenizer DIR: sidecars copied from it" 'cmp -s "$T/src-moved/chat_template.jinja" "$T/side4/chat_template.jinja"'

# --- 3. checkpoints without a model config, or lacking a tensor the config requires ---
mut() {  # mut NAME PYTHON: a copy of checkpoint-1 whose checkpoint.json d is edited by PYTHON
    cp -r "$C1" "$T/$1"
    python3 -c "import json,sys; p=sys.argv[1]; d=json.load(open(p)); $2; json.dump(d, open(p, 'w'))" "$T/$1/checkpoint.json"
}
mut nocfg "del d['state']['model_config']"
check 1 "portatrain: error: $T/nocfg/checkpoint.json: state.model_config is missing" -- \
    "$B" export --checkpoint "$T/nocfg" --output-dir "$T/e1"
expect "no 'unknown error'" '! grep -q "unknown error" "$T/out"'
check 0 "not resumable or exportable: checkpoint.json has no state.model_config" -- "$B" ckpt verify "$T/nocfg"
mut nostate "d['state'] = {'model_config': d['state']['model_config']}"
check 0 "exportable but not resumable: checkpoint.json has no training state" -- "$B" ckpt verify "$T/nostate"
mut droptensor "del d['tensors']['model/model.layers.1.mlp.up_proj.weight']"
check 1 'portatrain: error: .*tensor "model/model.layers.1.mlp.up_proj.weight" that state.model_config requires is missing' -- \
    "$B" ckpt verify "$T/droptensor"
mut dropmoment "del d['tensors']['optim/exp_avg_sq/model.norm.weight']"
check 1 'tensor "optim/exp_avg_sq/model.norm.weight" that state.model_config requires is missing' -- \
    "$B" ckpt verify "$T/dropmoment"
mut morelayers "d['state']['model_config']['num_hidden_layers'] = 3"
check 1 'tensor "model/model.layers.2.input_layernorm.weight" that state.model_config requires is missing' -- \
    "$B" ckpt verify "$T/morelayers"
check 0 "tensors of state.model_config verified" -- "$B" ckpt verify "$C1"
check 0 '"save_s_median"' -- "$B" ckpt bench --config "$F/config.json" --output-dir "$T/bench" --reps 1
check 0 "not resumable or exportable" -- "$B" ckpt verify "$T/bench"

# --- 4. tied config with an lm_head.weight in the file: equal is accepted, different refused ---
with_lm_head() {  # with_lm_head DIR FLIP: the tied fixture plus lm_head.weight = embed_tokens (one byte flipped if FLIP=1)
    mkdir -p "$1"; cp "$F/config.json" "$1/"
    python3 "$S/tests/py/st_add_lm_head.py" "$F/model.safetensors" "$1/model.safetensors" "$2"
}
with_lm_head "$T/tied_eq" 0; with_lm_head "$T/tied_ne" 1
# tied, only lm_head.weight stored (no model.embed_tokens.weight): transformers loads the embedding from it
mkdir -p "$T/tied_lmonly"; cp "$F/config.json" "$T/tied_lmonly/"
python3 "$S/tests/py/st_rename.py" "$F/model.safetensors" "$T/tied_lmonly/model.safetensors" model.embed_tokens.weight lm_head.weight
L0=$(loss "$F")
expect "tied, lm_head.weight equal to embed_tokens: accepted, same loss" '[ -n "$L0" ] && [ "$(loss "$T/tied_eq")" = "$L0" ]'
check 0 '"loss"' -- "$B" eval --model "$T/tied_eq" --data "$F/data.bin" --seq-len 16 --max-batches 1
expect "  without a warning" '! grep -q "warning" "$T/out"'
expect "tied, only lm_head.weight stored: the embedding is read from it, same loss" '[ "$(loss "$T/tied_lmonly")" = "$L0" ]'
check 1 "portatrain: error: $T/tied_ne/model.safetensors: lm_head.weight differs from model.embed_tokens.weight but config.json has tie_word_embeddings true; set tie_word_embeddings to false" -- \
    "$B" eval --model "$T/tied_ne" --data "$F/data.bin" --seq-len 16 --max-batches 1

# --- 5. a config.json without head_dim: 128, Qwen3Config's default (not hidden_size / heads = 16) ---
mkdir -p "$T/nohd"
cat >"$T/nohd/config.json" <<'EOF'
{"model_type": "qwen3", "vocab_size": 128, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 1,
 "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": true}
EOF
check 0 "" -- "$B" init --config "$T/nohd/config.json" --output-dir "$T/nohd/m"
jcheck "$T/nohd/m/config.json" 'r["head_dim"] == 128' "head_dim absent -> 128 written"
python3 "$S/tests/py/st_shape.py" "$T/nohd/m/model.safetensors" model.layers.0.self_attn.q_proj.weight >"$T/shape"
expect "q_proj is [heads*128, hidden]" '[ "$(cat "$T/shape")" = "[512, 64]" ]'

# --- 5b. num_key_value_heads: absent -> 32 (Qwen3Config's default), null -> num_attention_heads ---
for kv in absent null; do
    kv_edit=(); [ $kv = null ] && kv_edit=(num_key_value_heads=null)
    python3 "$S/tests/py/json_edit.py" - "$T/kv_$kv.json" model_type='"qwen3"' vocab_size=128 hidden_size=64 \
        intermediate_size=96 num_hidden_layers=1 num_attention_heads=32 head_dim=8 tie_word_embeddings=true "${kv_edit[@]}"
    check 0 "" -- "$B" init --config "$T/kv_$kv.json" --output-dir "$T/kv_$kv"
done
jcheck "$T/kv_absent/config.json" 'r["num_key_value_heads"] == 32' "num_key_value_heads absent -> 32"
jcheck "$T/kv_null/config.json" 'r["num_key_value_heads"] == 32' "num_key_value_heads null -> num_attention_heads"
python3 "$S/tests/py/json_edit.py" "$T/kv_null.json" "$T/kv_16.json" num_attention_heads=16 num_key_value_heads=null
python3 "$S/tests/py/json_edit.py" "$T/kv_16.json" "$T/kv_16.json.absent" -num_key_value_heads
check 0 "" -- "$B" init --config "$T/kv_16.json" --output-dir "$T/kv_16"
jcheck "$T/kv_16/config.json" 'r["num_key_value_heads"] == 16' "num_key_value_heads null, 16 heads -> 16"
check 1 "no num_key_value_heads: Qwen3Config's default 32 does not divide num_attention_heads (16)" -- \
    "$B" init --config "$T/kv_16.json.absent" --output-dir "$T/kv_16a"

python3 "$S/tests/py/json_edit.py" "$T/kv_null.json" "$T/drop.json" attention_dropout=0.1
check 0 "" -- "$B" init --config "$T/drop.json" --output-dir "$T/drop"
jcheck "$T/drop/config.json" 'r["attention_dropout"] == 0.1' "attention_dropout kept"
check 0 '"loss"' -- "$B" eval --model "$T/drop" --data "$F/data.bin" --seq-len 16 --max-batches 1
check 1 "attention_dropout 0.1: training with attention dropout is not supported" -- "$B" train --model "$T/drop" \
    --data "$F/data.bin" --output-dir "$T/drop_run" --max-steps 1 --seq-len 16 --per-device-train-batch-size 2 --quiet

# --- 6. eos_token_id as a list, hidden_act "swish" (= silu in transformers' ACT2FN), pad_token_id: accepted and kept ---
mkdir -p "$T/ids"
python3 "$S/tests/py/json_edit.py" "$F/config.json" "$T/ids/config.json" eos_token_id='[5, 6]' pad_token_id=3 bos_token_id=4 \
    hidden_act='"swish"'
check 0 "" -- "$B" init --config "$T/ids/config.json" --output-dir "$T/ids/m"
jcheck "$T/ids/m/config.json" 'r["eos_token_id"] == [5, 6] and r["pad_token_id"] == 3 and r["bos_token_id"] == 4' \
    "init keeps the eos_token_id list and pad_token_id"
"$B" train --model "$T/ids/m" --data "$F/data.bin" --output-dir "$T/ids/run" --max-steps 1 --save-steps 1 --seq-len 16 \
    --per-device-train-batch-size 2 --quiet >"$T/train.log" 2>&1 || { echo "FAIL: train"; cat "$T/train.log"; fail=1; }
check 0 "exported" -- "$B" export --checkpoint "$T/ids/run/checkpoint-1" --output-dir "$T/ids/exp"
jcheck "$T/ids/exp/config.json" 'r["eos_token_id"] == [5, 6] and r["pad_token_id"] == 3 and r["hidden_act"] == "silu"' \
    "export keeps the eos_token_id list and pad_token_id"
python3 "$S/tests/py/json_edit.py" "$F/config.json" "$T/ids/config.json" eos_token_id=7 pad_token_id=null
check 0 "" -- "$B" init --config "$T/ids/config.json" --output-dir "$T/ids/m2"
jcheck "$T/ids/m2/config.json" 'r["eos_token_id"] == 7 and "pad_token_id" not in r' "an integer eos_token_id stays an integer"
for bad in '"eos_token_id": []' '"eos_token_id": [1, "x"]' '"hidden_act": "gelu"'; do
    python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c.update(json.loads('{'+sys.argv[3]+'}')); json.dump(c, open(sys.argv[2],'w'))" \
        "$F/config.json" "$T/ids/bad.json" "$bad"
    check 1 "portatrain: error: $T/ids/bad.json: " -- "$B" init --config "$T/ids/bad.json" --output-dir "$T/ids/bad"
done

# --- 7. sliding-window keys (transformers 5.25 Qwen3Config): accepted when every layer is full attention (same
# loss as the plain config; transformers gives identical losses for these, docs/CHECKPOINTS.md), refused when a
# layer would slide (transformers applies the window, or fails on a sliding layer without one) ---
sw() {  # sw NAME JSON-UPDATE: the tied fixture with its config.json updated
    mkdir -p "$T/sw/$1"; cp "$F/model.safetensors" "$T/sw/$1/"
    python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c.update(json.loads(sys.argv[3])); [c.pop(k) for k in [k for k, v in c.items() if v == 'DROP']]; json.dump(c, open(sys.argv[2], 'w'))" \
        "$F/config.json" "$T/sw/$1/config.json" "$2"
}
sw maxwin '{"use_sliding_window": true, "sliding_window": 4, "max_window_layers": 28, "layer_types": "DROP"}'
sw nullwin '{"use_sliding_window": true, "sliding_window": null, "max_window_layers": 0, "layer_types": "DROP"}'
sw fulltypes '{"use_sliding_window": true, "sliding_window": 4, "max_window_layers": 0}'
for n in maxwin nullwin fulltypes; do
    expect "use_sliding_window true, every layer full attention ($n): accepted, same loss" '[ "$(loss "$T/sw/$n")" = "$L0" ]'
done
sw slidetypes '{"layer_types": ["full_attention", "sliding_attention"]}'
check 1 "portatrain: error: $T/sw/slidetypes/config.json: layer_types\[1\] is \"sliding_attention\"; only \"full_attention\" layers are supported" -- \
    "$B" eval --model "$T/sw/slidetypes" --data "$F/data.bin" --seq-len 16 --max-batches 1
sw mwl1 '{"use_sliding_window": true, "sliding_window": 4, "max_window_layers": 1, "layer_types": "DROP"}'
check 1 "use_sliding_window true with sliding_window 4 makes layers 1 to 1 sliding-window layers" -- \
    "$B" eval --model "$T/sw/mwl1" --data "$F/data.bin" --seq-len 16 --max-batches 1
sw absentwin '{"use_sliding_window": true, "sliding_window": "DROP", "max_window_layers": 0, "layer_types": "DROP"}'
check 1 "use_sliding_window true with sliding_window 4096 makes layers 0 to 1" -- \
    "$B" init --config "$T/sw/absentwin/config.json" --output-dir "$T/sw/o1"
sw shorttypes '{"layer_types": ["full_attention"]}'
check 1 'field "layer_types" must be a list of num_hidden_layers (2) strings' -- \
    "$B" init --config "$T/sw/shorttypes/config.json" --output-dir "$T/sw/o2"

# --- 8. a legacy rope_scaling beside rope_parameters: transformers 5 takes a non-empty rope_scaling instead of
# rope_parameters (its rope_theta, else the top-level one); measured in transformers, docs/CHECKPOINTS.md ---
sw rs_linear '{"rope_scaling": {"rope_type": "linear", "factor": 2.0}}'
check 1 "portatrain: error: $T/sw/rs_linear/config.json: rope_scaling.rope_type \"linear\" is not supported" -- \
    "$B" eval --model "$T/sw/rs_linear" --data "$F/data.bin" --seq-len 16 --max-batches 1
sw rp_500 '{"rope_parameters": {"rope_type": "default", "rope_theta": 500.0}}'
sw rs_500 '{"rope_scaling": {"rope_type": "default", "rope_theta": 500.0}}'
sw rs_top500 '{"rope_scaling": {"type": "default"}, "rope_theta": 500.0}'
sw rs_empty '{"rope_scaling": {}, "rope_theta": 500.0}'
L500=$(loss "$T/sw/rp_500")
expect "rope_theta 500 changes the loss ($L500 vs $L0)" '[ -n "$L500" ] && [ "$L500" != "$L0" ]'
expect "rope_scaling's rope_theta wins over rope_parameters'" '[ "$(loss "$T/sw/rs_500")" = "$L500" ]'
expect "rope_scaling without rope_theta: the top-level rope_theta, not rope_parameters'" '[ "$(loss "$T/sw/rs_top500")" = "$L500" ]'
expect "an empty rope_scaling leaves rope_parameters in force" '[ "$(loss "$T/sw/rs_empty")" = "$L0" ]'

# --- 9. null where transformers' Qwen3Config refuses null (it fails validation): refused, not read as the default ---
for k in head_dim rms_norm_eps rope_theta hidden_act tie_word_embeddings attention_bias use_sliding_window \
         max_window_layers max_position_embeddings attention_dropout initializer_range vocab_size model_type; do
    sw "null_$k" "{\"$k\": null}"
    check 1 "portatrain: error: $T/sw/null_$k/config.json: field \"$k\" is null, which transformers' Qwen3Config refuses" -- \
        "$B" eval --model "$T/sw/null_$k" --data "$F/data.bin" --seq-len 16 --max-batches 1
done
sw null_ok '{"bos_token_id": null, "eos_token_id": null, "pad_token_id": null, "sliding_window": null, "rope_scaling": null}'
expect "null token ids, sliding_window and rope_scaling: accepted, same loss" '[ "$(loss "$T/sw/null_ok")" = "$L0" ]'

# --- 10. export --dtype float16 and transformers' --max-shard-size units ---
check 0 "exported" -- "$B" export --checkpoint "$C2" --output-dir "$T/h16" --dtype float16 --max-shard-size 20KB
check 0 "exported" -- "$B" export --checkpoint "$C2" --output-dir "$T/s20" --dtype float16 --max-shard-size 20000
expect "--max-shard-size 20KB = 20000 bytes (the same shards)" 'diff -rq "$T/h16" "$T/s20" >/dev/null && [ -e "$T/h16/model.safetensors.index.json" ]'
check 0 "exported" -- "$B" export --checkpoint "$C2" --output-dir "$T/g1" --max-shard-size 1GiB
expect "--max-shard-size 1GiB: one file" '[ -e "$T/g1/model.safetensors" ] && [ ! -e "$T/g1/model.safetensors.index.json" ]'
check 2 "max-shard-size must be a positive number of bytes or one with a unit.*got '1.5GB'" -- \
    "$B" export --checkpoint "$C2" --output-dir "$T/g2" --max-shard-size 1.5GB
check 2 "dtype must be float32, bfloat16 or float16 (got 'fp8')" -- "$B" export --checkpoint "$C2" --output-dir "$T/g2" --dtype fp8
# every float16 value is Python's round-to-nearest-even half of the fp32 export's (struct 'e'), dtype F16 in the
# headers and float16 in config.json
python3 "$S/tests/py/st_f16_matches.py" "$T/h16" "$T/ref2" >"$T/f16"
expect "float16 export: every weight is the fp32 weight rounded to nearest even half; config says float16" '[ "$(cat "$T/f16")" = True ]'
L16=$(loss "$T/h16")
expect "float16 export loads: loss $L16 near fp32's $L2" "python3 -c 'import sys; sys.exit(abs($L16 - $L2) > 1e-3 * abs($L2))'"
# a weight float16 cannot hold (|w| >= 65520) refuses the export, naming it; nothing is written
mkdir -p "$T/big"; cp "$F/config.json" "$T/big/"
python3 "$S/tests/py/st_set_f32.py" "$F/model.safetensors" "$T/big/model.safetensors" model.norm.weight 3 70000
"$B" train --model "$T/big" --data "$F/data.bin" --output-dir "$T/bigrun" --max-steps 1 --save-steps 1 --seq-len 16 \
    --per-device-train-batch-size 2 --learning-rate 0 --quiet >/dev/null 2>&1
check 1 "model.norm.weight\[3\] = 70000 is beyond float16's range" -- \
    "$B" export --checkpoint "$T/bigrun/checkpoint-1" --output-dir "$T/big16" --dtype float16
expect "  the refused float16 export wrote nothing" '[ ! -e "$T/big16" ]'
check 0 "exported" -- "$B" export --checkpoint "$T/bigrun/checkpoint-1" --output-dir "$T/big16" --dtype bfloat16

exit $fail
