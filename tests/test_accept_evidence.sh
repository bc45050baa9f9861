#!/usr/bin/env bash
# accept of platforms portatrain does not run, from evidence directories (docs/ACCEPT.md, "Platforms portatrain does
# not run"): tests/fixtures/evidence/ holds real TorchTitan 0.3.0 and HF Trainer runs of one recipe (make.sh there).
# - the pair is ACCEPTED; the report has the referee, the continuation, the restart's times and the cost from the
#   logs' times;
# - TorchTitan's step-3 checkpoint replaced by its step-6 one (its log unchanged): REJECTED, the referee names it;
# - HF's continuation of TorchTitan's step-3 checkpoint replaced by one at 10x the learning rate: REJECTED;
# - no restart evidence: REJECTED unless --waive recovery, which the ACCEPTED report states;
# - a bad evidence directory: one line naming the file and field, exit 2.
# The expected values are read from the fixtures' logs, not written here.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
. "$S/tests/cli_check.sh"
F=$S/tests/fixtures/evidence
cp -r "$F" "$T/ev"
E=$T/ev
J="python3 $S/tests/py/json_edit.py"
acc() {  # acc OUT BASE CAND [flags]
    local out=$1 b=$2 c=$3; shift 3
    "$B" accept --baseline "evidence:$b" --candidate "evidence:$c" --eval-data "$E/val.bin" --seq-len 64 \
        --output-dir "$T/$out" --quiet "$@"
}

check 0 "verdict: ACCEPTED" -- acc ok "$E/hf" "$E/titan"
R=$T/ok/report.json
jcheck "$R" "len(r['evidence']['referee']) == 2 and all(x['ok'] for x in r['evidence']['referee'])" "referee at steps 3 and 6"
# TorchTitan's validation losses are the claims: the referee's eval of its checkpoints equals them as printed
for s in 3 6; do
    want=$(python3 "$S/tests/py/titan_log.py" "$E/titan/run.log" validate $s)
    jcheck "$R" "[x for x in r['evidence']['referee'] if x['step'] == $s][0]['claim_candidate'] == $want and \
[x for x in r['evidence']['referee'] if x['step'] == $s][0]['claim_candidate_kind'] == 'validation'" "step $s claim: validate $want"
done
jcheck "$R" "r['evidence']['recipe']['differences'] == [] and len(r['evidence']['recipe']['fields']) == 9" "recipe fields"
jcheck "$R" "r['portability'][0]['ok'] and r['portability'][0]['checkpoint_step'] == 3" "continuation from step 3"
# the killed attempt's last step line comes before the second "Training starts"; the restart loads step-3
killed=$(python3 -c "import re,sys; t=open(sys.argv[1]).read().split('Training starts at step')[1]
print(re.findall(r' step: +([0-9]+) ', t)[-1])" "$E/titan/restart.log")
jcheck "$R" "r['recovery']['ok'] and r['recovery']['fault_step'] == $killed and r['recovery']['restored_step'] == 3 and \
r['recovery']['steps_recomputed'] == $killed - 3 and r['recovery']['restart_s'] > 0 and r['recovery']['replay_s'] > 0" "recovery from the restart's stamps"
jcheck "$R" "all(x['seconds'] > 0 and x['cost'] > 0 for x in r['cost']['rows']) and len(r['cost']['rows']) == 3 and \
r['cost']['cost_per_accepted_outcome'] == r['cost']['total_cost']" "cost from the logs' times"
# the TorchTitan row's seconds are its log's stamps: first line to the last step line
python3 - "$R" "$E/titan/run.log" <<'PY' && echo "ok: TorchTitan's wall time from its stamps" || { echo "FAIL: TorchTitan wall time"; fail=1; }
import json, re, sys, datetime
r = json.load(open(sys.argv[1]))
st = [datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f") for m in
      (re.search(r"\[titan\] (\S+ \S+) ", l) for l in open(sys.argv[2])) if m]
last = [datetime.datetime.strptime(re.search(r"\[titan\] (\S+ \S+) ", l).group(1), "%Y-%m-%d %H:%M:%S,%f")
        for l in open(sys.argv[2]) if "step:" in l and "validate" not in l][-1]
row = [x for x in r["cost"]["rows"] if x["phase"] == "training" and "TorchTitan" in x["item"]][0]
sys.exit(0 if abs(row["seconds"] - (last - st[0]).total_seconds()) < 1e-3 else 1)
PY
[ -s "$T/ok/report.html" ] && grep -q "Referee" "$T/ok/report.md" && echo "ok: report rendered" || { echo "FAIL: report.md has no referee"; fail=1; }

# a checkpoint from another step, its log unchanged
cp -r "$E/titan" "$E/swap" && cp "$E/titan/ckpt/step-6/model.safetensors" "$E/swap/ckpt/step-3/"
check 1 "referee: the candidate TorchTitan 0.3.0 (CPU)'s checkpoint at step 3 .*not that step's weights" -- acc swap "$E/hf" "$E/swap"

# a continuation that diverges
cp -r "$E/hf" "$T/lr" && $J "$T/lr/evidence.json" "$T/lr/evidence.json" 'continuation.log="cont_lr/trainer_state.json"'
check 1 "portability: HF Trainer (CPU) from TorchTitan 0.3.0 (CPU)'s step-3 checkpoint: diverges" -- acc lr "$T/lr" "$E/titan"

# no restart evidence: not shown; waived
cp -r "$E/titan" "$E/norestart" && $J "$E/norestart/evidence.json" "$E/norestart/evidence.json" -restart
check 1 "recovery: not shown" -- acc nr "$E/hf" "$E/norestart"
check 0 "verdict: ACCEPTED.*recovery: not shown.*waived by --waive" -- acc nrw "$E/hf" "$E/norestart" --waive recovery
jcheck "$T/nrw/report.json" "r['evidence']['not_shown'][0]['section'] == 'recovery' and r['evidence']['not_shown'][0]['waived']" "waiver in report.json"
check 2 "--waive nope: unknown section 'nope'" -- acc bad "$E/hf" "$E/norestart" --waive nope

# bad evidence: one line naming the file and field, exit 2
bad() {  # bad PATTERN EDIT...
    local pat=$1; shift
    rm -rf "$E/b" && cp -r "$E/titan" "$E/b" && $J "$E/b/evidence.json" "$E/b/evidence.json" "$@"
    check 2 "$pat" -- acc bad "$E/hf" "$E/b"
    [ "$(grep -c . "$T/out")" = 1 ] || { echo "FAIL: more than one line"; fail=1; }
}
bad 'evidence.json: "format": must be "portatrain-evidence"' 'format="x"'
bad 'evidence.json: "log": missing' -log
bad 'evidence.json: "config": .*nope.toml: no such file' 'config="nope.toml"'
bad 'evidence.json: "checkpoints\[1\].step": missing or not a whole number' 'checkpoints=[{"step": 3, "path": "ckpt/step-3"}, {"step": "six", "path": "ckpt/step-6"}]'
bad 'evidence.json: "checkpoints\[0\].path": .*has no model.safetensors' 'checkpoints=[{"step": 3, "path": "."}]'
bad 'evidence.json: "continuation.from_step": missing' 'continuation={"log": "run.log"}'
rm -rf "$T/b" && mkdir -p "$T/b"
check 2 "evidence.json: missing" -- acc bad "$E/hf" "$T/b"
check 2 "evidence:DIR needs evidence on both sides" -- "$B" accept --baseline cpu:fp32 --candidate "evidence:$E/titan"
exit $fail
