#!/usr/bin/env bash
# accept on a correct but non-deterministic candidate (PT_FAULT_KERNEL=nondet_embedding_bwd: the embedding
# backward adds rows in a run-to-run varying order): its run-to-run noise is measured, it is ACCEPTED under
# the envelope rule (auto) and REJECTED when declared bitwise; a deterministic candidate keeps the bitwise
# rule under auto (forced to the envelope, it gets the fp32 floor); a recovered run that differs (an extra
# skipped batch) is REJECTED under either rule.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cd "$S"
fail=0
. "${PT_SOURCE_DIR:?}/tests/cli_check.sh"
# A same-SPEC pair is judged with the exact profile, which a non-deterministic candidate cannot meet: the
# nondet runs are compared with the fp32 profile.
A="--steps 8 --checkpoint-step 4 --recovery-save-steps 2 --eval-batches 1 --baseline cpu:fp32 --candidate cpu:fp32"

# 1. deterministic candidate, auto: the bitwise rule; a recovered run that skipped one batch is REJECTED
check 1 "recovery: the recovered run differs from the uninterrupted run" -- \
  "$B" accept $A --test-fault recovery-skip-batch --output-dir "$T/d"
jcheck "$T/d/report.json" "r['recovery']['determinism']['deterministic'] and r['recovery']['rule']=='bitwise' and r['recovery']['determinism']['final_weights_rel_l2']==0 and 'recovery judged bitwise' in r['recovery']['determinism']['why'] and not r['recovery']['final_weights_identical']" "deterministic candidate: bitwise rule under auto"
jcheck "$T/d/report.json" "any(p['run']=='rerun' and p['phase']=='training' and p['seconds']>0 for p in r['phases']) and any(x['item']=='rerun training' for x in r['cost']['rows'])" "the same-seed rerun is timed and billed"
BR="--baseline-run $T/d/baseline --profile fp32"
# ... and forced to the envelope it measures no spread, so the fp32 floor is its tolerance
check 0 "verdict: ACCEPTED.*envelope rule: cpu:fp32 is deterministic, but --determinism envelope" -- \
  "$B" accept $A $BR --determinism envelope --output-dir "$T/e"
jcheck "$T/e/report.json" "r['recovery']['rule']=='envelope' and r['recovery']['determinism']['deterministic'] and r['recovery']['determinism']['tolerance_loss_rel']==2**-23 and r['recovery']['final_weights_identical']" "deterministic, --determinism envelope: the floor, recovery still bitwise"
export PT_FAULT_KERNEL=nondet_embedding_bwd

# 2. non-deterministic candidate, auto: the envelope rule, ACCEPTED; the kernel really is non-deterministic
#    (the rerun differs) and correct (within fp32 noise of the deterministic baseline)
check 0 "verdict: ACCEPTED.*envelope rule: cpu:fp32 is not bitwise deterministic" -- "$B" accept $A $BR --output-dir "$T/n"
R="$T/n/report.json"
jcheck "$R" "not r['recovery']['determinism']['deterministic'] and r['recovery']['rule']=='envelope' and r['recovery']['ok']" "nondet candidate: envelope rule under auto, recovery ok"
jcheck "$R" "0 < r['recovery']['determinism']['loss_rel_max'] < 1e-6 and 0 < r['recovery']['determinism']['final_weights_rel_l2'] < 1e-6" "two same-seed runs differ in the last bits only"
jcheck "$R" "0 < r['convergence']['per_step']['max_rel_diff'] < 1e-6" "the nondet kernel is within fp32 noise of the deterministic one"
jcheck "$R" "r['recovery']['loss_rel_max'] <= r['recovery']['determinism']['tolerance_loss_rel'] and r['recovery']['final_weights_rel_l2'] <= r['recovery']['determinism']['tolerance_final_weights_rel_l2'] and not r['recovery']['final_weights_identical']" "recovered run within the envelope, not bitwise"
jcheck "$R" "'not deterministic (two same-seed runs differ by up to' in r['recovery']['determinism']['why'] and 'recovery judged within 10x that envelope' in r['recovery']['determinism']['why']" "report says which rule and why"
grep -q "envelope" "$T/n/report.md" && grep -q "Determinism" "$T/n/report.html" && echo "ok: report.md/html show the rule" \
  || { echo "FAIL: report.md/html do not show the rule"; fail=1; }

# 3. the same candidate declared bitwise: REJECTED, naming the measured difference
check 1 "recovery: --determinism bitwise; cpu:fp32: not deterministic (two same-seed runs differ by up to .* declared bitwise but is not" -- \
  "$B" accept $A $BR --determinism bitwise --output-dir "$T/b"
jcheck "$T/b/report.json" "r['recovery']['rule']=='bitwise' and r['recovery']['determinism']['mode']=='bitwise' and not r['recovery']['ok']" "declared bitwise: bitwise rule, rejected"

# 4. a recovered run that skipped a batch lies far outside a non-deterministic platform's envelope too
check 1 "recovery: the recovered run differs from the uninterrupted run beyond the platform's run-to-run envelope" -- \
  "$B" accept $A $BR --test-fault recovery-skip-batch --output-dir "$T/s"
jcheck "$T/s/report.json" "r['recovery']['rule']=='envelope' and r['recovery']['final_weights_rel_l2'] > 100 * r['recovery']['determinism']['tolerance_final_weights_rel_l2']" "skipped batch: beyond the envelope by orders of magnitude"
python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['recovery']; print('  skipped batch: loss %.2g, final weights %.2g vs tolerances %.2g, %.2g' % (r['loss_rel_max'], r['final_weights_rel_l2'], r['determinism']['tolerance_loss_rel'], r['determinism']['tolerance_final_weights_rel_l2']))" "$T/s/report.json"

# 5. a bad --determinism is refused before anything runs
check 2 "accept: --determinism sometimes: must be auto, bitwise or envelope" -- \
  "$B" accept $A --determinism sometimes --output-dir "$T/x"
[ ! -e "$T/x/baseline" ] && echo "ok: nothing ran for a bad --determinism" || { echo "FAIL: bad input ran something"; fail=1; }
exit $fail
