#!/usr/bin/env bash
# TorchTitan 0.3.0's checkpoints in portatrain, on real output (tests/fixtures/torchtitan_ckpt/, made on CPU by
# tools/torchtitan_run.py and tools/dcp_to_hf.py; the commands are in docs/CHECKPOINTS.md, "TorchTitan
# checkpoints"). No torch needed:
# - its HF export (no config.json, no lm_head.weight: tied) evaluates with --config to the loss TorchTitan's own
#   validator printed for the same windows, within the print precision (4 decimals); without --config the
#   error names --config;
# - a DCP checkpoint is refused in one line naming the converter, exit 2 (eval, ckpt verify, ckpt inspect);
# - a DCP checkpoint converted by tools/dcp_to_hf.py continues training: the first step's loss and grad norm
#   are TorchTitan's next step's (the same batch, the same weights), within the print precision.
# The expected values are read from TorchTitan's console log, not written here.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
. "$S/tests/cli_check.sh"
F=$S/tests/fixtures/torchtitan_ckpt

# "validate step:  6  loss:  6.0643" -> 6.0643; "step:  4  loss:  6.27862  grad_norm:  0.9380" -> field
titan() {  # titan validate|loss|grad_norm STEP
    python3 "$S/tests/py/titan_log.py" "$F/run.log" "$1" "$2"
}
# within A B TOL LABEL: |A - B| <= TOL
within() {
    if python3 -c "import sys; a,b,t=map(float,sys.argv[1:4]); sys.exit(0 if abs(a-b)<=t else 1)" "$1" "$2" "$3"; then
        echo "ok: $4: $1 vs $2 (tolerance $3)"
    else echo "FAIL: $4: $1 vs $2 differ by more than $3"; fail=1; fi
}
json_loss() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['loss'])" "$1"; }

# TorchTitan's validator: its data set from the start, seq_len 64, local batch 4, --validator.steps 2 (windows
# 0..7 of one document; val.bin is their 513 tokens). It prints the loss with 4 decimals: +-5e-5.
want=$(titan validate 6) || fail=1
E=(--data "$F/val.bin" --seq-len 64 --per-device-eval-batch-size 4)
"$B" eval --model "$F/export" --config "$F/config.json" "${E[@]}" >"$T/e.json" 2>"$T/err" || { cat "$T/err"; fail=1; }
within "$(json_loss "$T/e.json")" "${want:-nan}" 5e-5 "eval of TorchTitan's step-6 HF export vs its validate step 6"
jcheck "$T/e.json" "r['tokens']==512 and r['batches']==2" "the validator's 2 batches of 4 x 64 tokens"
check 1 "export: no config.json.*--config CONFIG.json" -- "$B" eval --model "$F/export" "${E[@]}"
check 1 "nope.json: cannot open" -- "$B" eval --model "$F/export" --config "$T/nope.json" "${E[@]}"

# DCP: refused in one line, naming the converter, exit 2.
msg="dcp: a TorchTitan/PyTorch DCP checkpoint (.metadata + \*.distcp); convert it first: python3 tools/dcp_to_hf.py"
check 2 "$msg" -- "$B" eval --model "$F/dcp" "${E[@]}"
check 2 "$msg" -- "$B" ckpt verify "$F/dcp"
check 2 "$msg" -- "$B" ckpt inspect "$F/dcp"
[ "$(grep -c . "$T/out")" = 1 ] && echo "ok: one line" || { echo "FAIL: more than one line"; cat "$T/out"; fail=1; }
# A directory with .metadata but no *.distcp is not taken for one.
mkdir -p "$T/meta_only" && cp "$F/dcp/.metadata" "$T/meta_only/"
check 1 "incomplete checkpoint (no checkpoint.json)" -- "$B" ckpt verify "$T/meta_only"

# Continuation from the converted step-3 DCP checkpoint: cont.bin holds TorchTitan's step-4 batch (windows
# 12..15) first, so step 1's loss and grad norm (before any update) are TorchTitan's step 4's (5 and 4 decimals).
"$B" train --model "$F/converted" --data "$F/cont.bin" --output-dir "$T/cont" --max-steps 1 --seq-len 64 \
    --per-device-train-batch-size 4 --learning-rate 3e-3 --quiet >"$T/err" 2>&1 || { cat "$T/err"; fail=1; }
m=$(python3 -c "import json,sys; j=json.loads(open(sys.argv[1]).readline()); print(j['loss'], j['grad_norm'])" \
    "$T/cont/metrics.jsonl") || fail=1
within "${m% *}" "$(titan loss 4)" 5e-6 "continuation step 1 loss vs TorchTitan step 4"
within "${m#* }" "$(titan grad_norm 4)" 5e-5 "continuation step 1 grad norm vs TorchTitan step 4"
exit $fail
