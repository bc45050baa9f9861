#!/usr/bin/env bash
# A real Hugging Face Trainer run against portatrain: tests/fixtures/compare/hf_trainer/ holds the
# trainer_state.json of tools/hf_trainer_run.py (transformers.Trainer, fp32, eager) and the flags and
# input hashes it ran with (hf_run.json). portatrain trains the same model (portatrain init, seed 42:
# the same bytes, checked) on the same data with the same flags, and `compare` must say ACCEPTED with
# step-1 loss within 1e-6; a wrong kernel and a changed learning rate must be REJECTED for their reasons.
# Needs no Python ML stack (python3 stdlib only).
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
. "$S/tests/cli_check.sh"
F="$S/tests/fixtures/compare/hf_trainer"
DATA="$S/tests/fixtures/golden/untied/data.bin"
"$B" init --config "$S/tests/fixtures/golden/untied/config.json" --seed 42 --output-dir "$T/m" >/dev/null || exit 1

# The frozen inputs: an imported log carries no manifest, so check here that the model portatrain
# initialises and the data are the bytes the HF run trained on.
python3 - "$F/hf_run.json" "$T/m/config.json" "$T/m/model.safetensors" "$DATA" <<'PY' || { echo "FAIL: frozen inputs differ from the HF run's"; exit 1; }
import hashlib, json, sys
rec = json.load(open(sys.argv[1]))["sha256"]
for key, path in zip(("config.json", "model.safetensors", "data"), sys.argv[2:]):
    got = hashlib.sha256(open(path, "rb").read()).hexdigest()
    print(f"{key}: {'ok' if got == rec[key] else 'DIFFERS'} ({got[:16]}..., HF run {rec[key][:16]}...)")
    if got != rec[key]:
        sys.exit(1)
PY

# portatrain train's flags from the HF run's record (one source for both sides).
FLAGS=$(python3 - "$F/hf_run.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
keys = ["seq_len", "per_device_train_batch_size", "gradient_accumulation_steps", "max_steps", "learning_rate",
        "warmup_steps", "lr_scheduler_type", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon",
        "max_grad_norm", "seed"]
print(" ".join(f"--{k.replace('_', '-')} {r[k]!r}".replace("'", "") for k in keys))
PY
) || exit 1
echo "flags: $FLAGS"
# run OUT BACKEND [overriding flags...]
run() {
    local out=$1 be=$2; shift 2
    "$B" train --backend "$be" --model "$T/m" --data "$DATA" --output-dir "$out" $FLAGS --logging-steps 1 --quiet "$@"
}
run "$T/ref" cpu-ref >/dev/null 2>&1 || { echo "cpu-ref train failed"; exit 1; }

check 0 "verdict: ACCEPTED" -- "$B" compare "$F" "$T/ref" --format-a hf --json "$T/r.json"
cat "$T/out"
check 0 "verdict: ACCEPTED" -- "$B" compare "$F/trainer_state.json" "$T/ref"   # format detected
jcheck "$T/r.json" 'r["step0"]["step"] == 1 and r["step0"]["loss_rel_diff"] < 1e-6' "step-1 loss within 1e-6 of HF's"
jcheck "$T/r.json" 'r["step0"]["grad_norm_rel_diff"] < 1e-5' "step-1 grad norm (before clipping, as HF logs it) within 1e-5"
jcheck "$T/r.json" 'r["per_step"]["n"] == 30 and r["per_step"]["missing"] == 0' "all 30 HF steps compared"
jcheck "$T/r.json" 'r["per_step"]["max_rel_diff"] < 1e-5' "every step's loss within 1e-5 of HF's (fp32 profile allows 1e-2)"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('measured: step-1 loss rel diff %.3g, grad norm %.3g, per-step max %.3g, median %.3g' % (r['step0']['loss_rel_diff'], r['step0']['grad_norm_rel_diff'], r['per_step']['max_rel_diff'], r['per_step']['median_rel_diff']))" "$T/r.json"
# The learning rate of every step: HF's scheduler (warm-up, cosine) and portatrain's.
python3 - "$F/trainer_state.json" "$T/ref/metrics.jsonl" <<'PY' && echo "ok: lr of every step = HF's" || { echo "FAIL: lr differs from HF's"; fail=1; }
import json, sys
hf = {e["step"]: e["learning_rate"] for e in json.load(open(sys.argv[1]))["log_history"] if "loss" in e}
pt = {j["step"]: j["lr"] for j in map(json.loads, open(sys.argv[2]))}
bad = [(s, hf[s], pt.get(s)) for s in sorted(hf) if pt.get(s) is None or abs(pt[s] - hf[s]) > 1e-9 * max(abs(hf[s]), 1e-12)]
print("lr steps", len(hf), "differing:", bad[:3])
sys.exit(1 if bad or len(hf) != 30 else 0)
PY

# Wrong runs: a wrong RMSNorm epsilon in the fast backend, and a 20% higher learning rate.
PT_FAULT_KERNEL=rmsnorm_eps run "$T/bad" cpu >/dev/null 2>&1 || { echo "faulty train failed"; exit 1; }
check 1 "step-0 (step 1) grad-norm rel diff" -- "$B" compare "$F" "$T/bad" --format-a hf
grep -q "verdict: REJECTED" "$T/out" || { echo "FAIL: wrong kernel not REJECTED"; fail=1; }
LR=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['learning_rate'] * 1.2)" "$F/hf_run.json")
run "$T/lr" cpu-ref --learning-rate "$LR" >/dev/null 2>&1 || { echo "lr train failed"; exit 1; }
check 1 "early-step (first 10) loss rel diff" -- "$B" compare "$F" "$T/lr" --format-a hf

# More HF Trainer runs of the same model and data (fixtures README.md): other flags, each checked the same way
# (frozen inputs, ACCEPTED, every step's loss, grad norm and lr).
#   hf_trainer_padded:   --data-mode padded (EOS 33: one document per row, labels -100 on the padding), batch
#                        2 x accumulation 2, so the micro-batches of a step have different numbers of targets and
#                        the loss must be weighted by them (HF: num_items_in_batch); warm-up 3 + linear, wd 0.1.
#   hf_trainer_windowed: HF logging_steps 3 (its loss is the mean over the steps since its previous log; compare
#                        averages portatrain's per-step losses over the same steps); batch 1 x accumulation 4,
#                        warm-up 4 + constant_with_warmup, betas 0.8/0.95, epsilon 1e-6, no clipping
#                        (--max-grad-norm 0), wd 0.01.
#   hf_trainer_epochs:   HF's own DataLoader (tools/hf_trainer_run.py --epoch-boundary hf): 40 rows, batch 3 x
#                        accumulation 4, so rows per step (12) do not divide the rows, an epoch ends with a short
#                        micro-batch and a step of 2 micro-batches, 10 steps over 2.5 epochs; portatrain's default
#                        epoch boundaries (hf) must match, `--epoch-boundary wrap` must be REJECTED.
#   hf_trainer_drop_last: the same with dataloader_drop_last and num_train_epochs 2.5 (HF resolves max_steps).
#   hf_trainer_padded_epochs: padded mode, 50 rows, batch 3 x accumulation 2 (9 steps per epoch, the last one
#                        micro-batch of 2 rows), 20 steps.
# The first three ran on an IterableDataset in portatrain's wrap order; their rows per step divide the rows
# (or the run ends within the first epoch), where wrap and hf give the same batches.
extra() {
    local name=$1 X="$S/tests/fixtures/compare/$1"
    python3 - "$X/hf_run.json" "$T/m/config.json" "$T/m/model.safetensors" "$DATA" <<'PY' || { echo "FAIL: $name: frozen inputs differ from the HF run's"; fail=1; return; }
import hashlib, json, sys
rec = json.load(open(sys.argv[1]))["sha256"]
for key, path in zip(("config.json", "model.safetensors", "data"), sys.argv[2:]):
    if hashlib.sha256(open(path, "rb").read()).hexdigest() != rec[key]:
        sys.exit(1)
PY
    local flags
    flags=$(python3 - "$X/hf_run.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
keys = ["seq_len", "per_device_train_batch_size", "gradient_accumulation_steps", "max_steps", "learning_rate",
        "warmup_steps", "lr_scheduler_type", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon",
        "max_grad_norm", "seed", "data_mode", "epoch_boundary"]
if r["max_steps"] <= 0:  # HF resolved it from num_train_epochs: so must portatrain
    keys[keys.index("max_steps")] = "num_train_epochs"
flags = " ".join(f"--{k.replace('_', '-')} {r[k]!r}".replace("'", "") for k in keys if k in r)
print(flags + (" --dataloader-drop-last" if r.get("dataloader_drop_last") else ""))
PY
) || { fail=1; return; }
    local data=$DATA
    if grep -q '"data_mode": "padded"' "$X/hf_run.json"; then
        # a one-shard data set over the same bytes, whose dataset.json gives padded mode its EOS id
        data="$T/ds_$name"
        mkdir -p "$data" && cp "$DATA" "$data/shard-00000.bin"
        python3 - "$X/hf_run.json" "$data" <<'PY' || { fail=1; return; }
import hashlib, json, sys
r, d = json.load(open(sys.argv[1])), sys.argv[2]
body = open(d + "/shard-00000.bin", "rb").read()[1024:]
json.dump({"format": "portatrain-dataset", "version": 1, "tokenizer_sha256": "", "vocab_size": 128,
           "eos_id": r["eos_id"], "num_tokens": r["num_tokens"],
           "shards": [{"file": "shard-00000.bin", "num_tokens": r["num_tokens"],
                       "sha256": hashlib.sha256(body).hexdigest()}]}, open(d + "/dataset.json", "w"))
PY
    fi
    echo "$name flags: $flags"
    LAST_FLAGS=$flags
    "$B" train --backend cpu-ref --model "$T/m" --data "$data" --output-dir "$T/x_$name" $flags --quiet \
        >"$T/x_$name.log" 2>&1 || { echo "FAIL: $name: train failed"; cat "$T/x_$name.log"; fail=1; return; }
    check 0 "verdict: ACCEPTED" -- "$B" compare "$X" "$T/x_$name" --format-a hf --json "$T/x_$name.json"
    cat "$T/out"
    python3 - "$X/trainer_state.json" "$T/x_$name/metrics.jsonl" "$T/x_$name.json" "$name" <<'PY' || { echo "FAIL: $name: differs from HF"; fail=1; }
import json, sys
hf = [e for e in json.load(open(sys.argv[1]))["log_history"] if "loss" in e]
pt = {j["step"]: j for j in map(json.loads, open(sys.argv[2]))}
r = json.load(open(sys.argv[3]))
rel = lambda a, b: abs(a - b) / max(abs(b), 1e-12)
gn = max(rel(pt[e["step"]]["grad_norm"], e["grad_norm"]) for e in hf)
lr = max(rel(pt[e["step"]]["lr"], e["learning_rate"]) if e["learning_rate"] else pt[e["step"]]["lr"] for e in hf)
ps = r["per_step"]
print(f"measured ({sys.argv[4]}): steps {ps['n']}, loss max rel {ps['max_rel_diff']:.3g} (windowed {ps['windowed_a']}),"
      f" step-1 loss {r['step0']['loss_rel_diff']:.3g}, grad norm max rel {gn:.3g}, lr max rel {lr:.3g}")
ok = (ps["n"] == len(hf) and r["step0"]["loss_rel_diff"] < 1e-6 and ps["max_rel_diff"] < 1e-5 and gn < 1e-4
      and lr <= 1e-12)
run = json.load(open(sys.argv[1].replace("trainer_state.json", "hf_run.json")))
if run.get("epoch_boundary") == "hf":
    # HF's own epochs: as many steps as HF made (num_train_epochs resolved the same way), the same "epoch" field
    n_pt, n_hf = len(pt), json.load(open(sys.argv[1]))["max_steps"]
    ep = max(abs(pt[e["step"]]["epoch"] - e["epoch"]) for e in hf)
    print(f"measured ({sys.argv[4]}): portatrain steps {n_pt}, HF steps {n_hf}, epoch field max abs diff {ep:.3g}")
    ok = ok and n_pt == n_hf and ep < 1e-6
sys.exit(0 if ok else 1)
PY
}
extra hf_trainer_padded
extra hf_trainer_windowed
extra hf_trainer_epochs
EPOCH_FLAGS=$LAST_FLAGS
extra hf_trainer_drop_last
extra hf_trainer_padded_epochs
# The same run with the old semantics (full steps straddling epochs) reads other rows from step 4 on: REJECTED.
"$B" train --backend cpu-ref --model "$T/m" --data "$DATA" --output-dir "$T/wrap" --quiet ${EPOCH_FLAGS/--epoch-boundary hf/} \
    --epoch-boundary wrap >/dev/null 2>&1 || { echo "FAIL: wrap train failed"; fail=1; }
check 1 "first at step 4" -- "$B" compare "$S/tests/fixtures/compare/hf_trainer_epochs" "$T/wrap" --format-a hf
exit $fail
