#!/usr/bin/env bash
# The acceptance suite's bf16 profile (issue 11): a correct bf16 candidate against the fp32 baseline
# on the same frozen inputs is ACCEPTED (convergence, checkpoints restored both ways across precisions,
# recovery bit-identical); the same candidate with a deliberately broken bf16 cast (test-only switch
# PT_FAULT_KERNEL=bf16_cast) is REJECTED, naming the check that failed.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cd "$S"
fail=0
. "${PT_SOURCE_DIR:?}/tests/cli_check.sh"
"$B" devices | grep -q "^cpu " || { echo "skip: the cpu backend is not built"; exit 77; }
# Under ASan/UBSan cpu-ref is ~15x slower: the baseline is the cpu backend's fp32 run there.
N=12 M=6 RS=3 BASE=cpu-ref:fp32
[ -n "${PT_SANITIZED:-}" ] && { N=8 M=4 RS=2 BASE=cpu:fp32; echo "sanitized build: baseline $BASE, $N steps"; }
A="--steps $N --checkpoint-step $M --recovery-save-steps $RS --eval-batches 2"

check 0 "verdict: ACCEPTED" -- "$B" accept --baseline $BASE --candidate cpu:bf16 $A --output-dir "$T/a"
R="$T/a/report.json"
jcheck "$R" "r['verdict']=='ACCEPTED' and r['convergence']['profile']=='bf16'" "bf16 candidate accepted under the bf16 profile"
jcheck "$R" "0 < r['convergence']['per_step']['max_rel_diff'] < 8e-2" "bf16 differs from fp32, within the profile"
python3 -c "import json;m=json.load(open('$T/a/candidate/manifest.json'));assert m['platform']['precision']=='bf16'" \
  && echo "ok: the candidate's manifest says bf16" || { echo "FAIL: manifest precision"; fail=1; }
jcheck "$R" "[p['ok'] for p in r['portability']]==[True,True]" "fp32 checkpoint resumed in bf16 and bf16 in fp32"
jcheck "$R" "r['recovery']['ok'] and r['recovery']['final_weights_identical']" "bf16 recovery bit-identical (deterministic bf16)"

PT_FAULT_KERNEL=bf16_cast check 1 "verdict: REJECTED" -- \
  "$B" accept --baseline $BASE --candidate cpu:bf16 $A --baseline-run "$T/a/baseline" --output-dir "$T/w"
jcheck "$T/w/report.json" "r['verdict']=='REJECTED' and r['convergence']['verdict']=='REJECTED' and any('step-0' in x or 'early' in x for x in r['reasons'])" "broken bf16 cast rejected by the convergence checks"
exit $fail
