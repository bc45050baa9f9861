#!/usr/bin/env bash
# --weight-decay-params: hf (HF Trainer's groups, the default: no decay on norm weights) or all (TorchTitan's
# default AdamW: every parameter). One step at full lr from the same weights and batch: the gradients and the
# Adam update are the same, so every matrix comes out bit-identical and every norm weight differs by AdamW's
# decoupled decay alone, lr x wd x w0 (torch.optim.AdamW: p *= 1 - lr x wd, then the Adam step), to fp32
# rounding; the same on two FSDP ranks (the sharded AdamW). The choice is recorded (train_args.json, the manifest's frozen hyperparameters), so compare refuses
# to judge an hf run against an all run; a bad value is a usage error.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
. "$S/tests/cli_check.sh"
fail=0
G=$S/tests/fixtures/golden/tied
run() { "$B" train --model "$G" --data "$G/data.bin" --output-dir "$1" --seq-len 16 --per-device-train-batch-size 2 \
    --learning-rate 1e-2 --weight-decay 0.1 --lr-scheduler-type constant --quiet "${@:2}"; }

run "$T/hf" --max-steps 1 >"$T/log" 2>&1 || { echo "FAIL: hf run"; cat "$T/log"; fail=1; }
run "$T/all" --max-steps 1 --weight-decay-params all >"$T/log" 2>&1 || { echo "FAIL: all run"; cat "$T/log"; fail=1; }

if python3 "$S/tests/py/st_decay_all_vs_hf.py" "$G/model.safetensors" "$T/hf/model.safetensors" "$T/all/model.safetensors"
then echo "ok: all decays the norm weights too, and nothing else changes"
else echo "FAIL: --weight-decay-params all vs hf after one step"; fail=1; fi

# The same under FSDP2 (the sharded AdamW): two ranks each way, the same reduction order on both sides.
if command -v mpirun >/dev/null; then
    . "$S/tests/mpi_env.sh"
    M=(timeout -k 5 300 mpirun --oversubscribe -np 2)
    [ -n "${PT_SANITIZED:-}" ] && M=(env ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 "${M[@]}")
    run2() { "${M[@]}" "$B" train --model "$G" --data "$G/data.bin" --output-dir "$1" --seq-len 16 \
        --per-device-train-batch-size 1 --learning-rate 1e-2 --weight-decay 0.1 --lr-scheduler-type constant \
        --quiet --fsdp 2 --max-steps 1 "${@:2}"; }
    run2 "$T/hf2" >"$T/log" 2>&1 || { echo "FAIL: hf fsdp2 run"; cat "$T/log"; fail=1; }
    run2 "$T/all2" --weight-decay-params all >"$T/log" 2>&1 || { echo "FAIL: all fsdp2 run"; cat "$T/log"; fail=1; }
    if python3 "$S/tests/py/st_decay_all_vs_hf.py" "$G/model.safetensors" "$T/hf2/model.safetensors" \
        "$T/all2/model.safetensors"
    then echo "ok: under FSDP2 too, all decays the norm weights and nothing else changes"
    else echo "FAIL: --weight-decay-params all vs hf under FSDP2"; fail=1; fi
else echo "note: mpirun not found: the FSDP2 check is not run"; fi

jcheck "$T/hf/train_args.json" "r['weight_decay_params'] == 'hf'" "train_args.json records hf (the default)"
jcheck "$T/all/train_args.json" "r['weight_decay_params'] == 'all'" "train_args.json records all"
jcheck "$T/hf/manifest.json" "'weight_decay_params' not in r['frozen']['hyperparameters']" \
    "the manifest of an hf run is unchanged (no weight_decay_params)"
jcheck "$T/all/manifest.json" "r['frozen']['hyperparameters']['weight_decay_params'] == 'all'" \
    "the manifest's frozen hyperparameters record all"
check 2 "weight_decay_params" -- "$B" compare "$T/hf" "$T/all"
check 2 "--weight-decay-params must be hf or all" -- run "$T/x" --max-steps 1 --weight-decay-params none
[ ! -e "$T/x" ] && echo "ok: a refused value leaves no output dir" || { echo "FAIL: output dir written"; fail=1; }
exit $fail
