#!/usr/bin/env bash
# accept's step-1 audit locates a defect the curves let through: the two porting slips whose 60-step curves
# stay inside the fp32 profile (rmsnorm eps after the square root, swiglu backward without the sigmoid
# derivative) and an optimizer slip (weight decay on the norm weights) are REJECTED naming where they enter: the first forward statistic that differs, else the first
# gradient to differ in backward order; two correct controls (cpu at 1 thread vs cpu-ref, and the cross-entropy
# softmax without max-subtraction) pass the audit with differences that are not zero; a platform whose dump is missing is REJECTED,
# never ACCEPTED. Tiny config, 8 steps of 2 x 16 tokens.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cd "$S"
fail=0
. "$S/tests/cli_check.sh"
A="--steps 8 --checkpoint-step 4 --recovery-save-steps 2 --eval-batches 1 --seq-len 16 --per-device-train-batch-size 2 --quiet"
BASE=cpu-ref:fp32
# Under ASan/UBSan cpu-ref is ~15x slower: the sanitized run audits cpu against itself (identical dumps) and
# leaves out the wrong kernels, which a cpu baseline would share.
[ -n "${PT_SANITIZED:-}" ] && { BASE=cpu:fp32; echo "sanitized build: baseline $BASE, no wrong-kernel cases"; }

# 1. the correct control: ACCEPTED, the audit compared every tensor and found each within tolerance
OMP_NUM_THREADS=1 check 0 "verdict: ACCEPTED" -- "$B" accept --baseline $BASE --candidate cpu:fp32 $A --output-dir "$T/ok"
R="$T/ok/report.json"
jcheck "$R" "(a:=r['audit'])['status']=='compared' and a['verdict']=='pass' and a['steps']==3 and 'constant learning rate' in a['schedule']" \
    "the control's audit compared 3 steps at a constant learning rate and passed"
jcheck "$R" "len(r['audit']['tensors'])==24 and all(t['ok'] for t in r['audit']['tensors']) and all(f['ok'] for f in r['audit']['forward'])" \
    "  every tensor and forward statistic within tolerance"
if [ "$BASE" = cpu-ref:fp32 ]; then
    jcheck "$R" "0 < max(t['grad_diff'] for t in r['audit']['tensors']) < r['audit']['tolerances']['grad_full']" \
        "  cpu vs cpu-ref gradients differ, within tolerance (the audit is not comparing a platform with itself)"
fi
# 1b. a second correct control: the cross-entropy softmax without the max subtraction (only the rounding moves)
PT_FAULT_KERNEL=softmax_no_max check 0 "verdict: ACCEPTED" -- \
    "$B" accept --baseline $BASE --candidate cpu:fp32 $A --output-dir "$T/nomax"
jcheck "$T/nomax/report.json" "r['audit']['verdict']=='pass'" "  the softmax-without-max control passes the audit"
for f in report.html report.md; do
    grep -q "Step-1 audit: per tensor" "$T/ok/$f" && echo "ok: $f has the per-tensor audit table" || { echo "FAIL: no audit table in $f"; fail=1; }
done

# 2. the two slips, against the recorded baseline: REJECTED, the reason names the first differing tensor
if [ "$BASE" = cpu-ref:fp32 ]; then
PT_FAULT_KERNEL=rmsnorm_eps_after_sqrt check 1 "audit: forward statistics differ first at layers.0.input_layernorm by" -- \
  "$B" accept --baseline $BASE --candidate cpu:fp32 $A --output-dir "$T/eps" --baseline-run "$T/ok/baseline"
jcheck "$T/eps/report.json" "r['audit']['first_forward']=='layers.0.input_layernorm' and r['audit']['verdict']=='fail'" "  eps after sqrt: the forward differs first at layers.0's input norm"
PT_FAULT_KERNEL=swiglu_bwd_no_sigmoid_deriv check 1 "audit: model.layers.1.mlp.gate_proj.weight gradient differs by .* the first to differ in backward order; forward statistics identical" -- \
  "$B" accept --baseline $BASE --candidate cpu:fp32 $A --output-dir "$T/swi" --baseline-run "$T/ok/baseline"
jcheck "$T/swi/report.json" "(a:=r['audit'])['first_gradient']=='model.layers.1.mlp.gate_proj.weight' and 'first_forward' not in a and (t:={x['name']: x['grad_diff'] <= x['grad_tolerance'] for x in a['tensors']})['model.layers.1.mlp.up_proj.weight'] and t['model.layers.1.mlp.down_proj.weight'] and not t['model.layers.0.mlp.gate_proj.weight']" \
    "  swiglu: forward identical; in backward order the last layer's down and up agree, its gate_proj is the first to differ"
# an optimizer slip, weight decay on the norm weights: step 1 and its gradients agree, the first update does not
PT_FAULT_KERNEL=adamw_decay_norms check 1 "audit: model.layers.0.input_layernorm.weight update at step 1 differs by .*; step-1 forward and gradients identical" -- \
  "$B" accept --baseline $BASE --candidate cpu:fp32 $A --output-dir "$T/wd" --baseline-run "$T/ok/baseline"
jcheck "$T/wd/report.json" "sorted(t['name'] for t in r['audit']['tensors'] if not t['ok'])==sorted(t['name'] for t in r['audit']['tensors'] if 'norm' in t['name'])" \
    "  weight decay on norms: exactly the norm weights' updates differ"
fi

# 3. a candidate whose dump never appears: REJECTED as not shown, never ACCEPTED, even in an OUT that holds an
#    earlier run's passing dumps (a copy of the control's)
cp -r "$T/ok" "$T/miss"
PT_FAULT_NO_AUDIT_DUMP=cpu check 1 "audit: the [a-z]* cpu:fp32's dump is not shown: .*audit.json: missing" -- \
  "$B" accept --baseline $BASE --candidate cpu:fp32 $A --output-dir "$T/miss" --baseline-run "$T/ok/baseline"
jcheck "$T/miss/report.json" "r['audit']['status']=='not shown' and r['verdict']=='REJECTED'" "  the report says the audit was not shown"

exit $fail
