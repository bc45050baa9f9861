#!/usr/bin/env bash
# portatrain compare on real TorchTitan 0.3.0 console logs (tests/fixtures/torchtitan/, made on CPU by
# tools/torchtitan_run.py; the commands are in its header and docs/COMPARE.md): each is recognised without
# --format although its first step line follows many start-up lines; the same seed twice is ACCEPTED, a changed
# lr REJECTED; a run that stopped (non-finite loss, a log cut after a few steps) is never ACCEPTED and the
# reason names the side, the step and why; an unknown file is refused in one line; a grad-norm check that the
# printed digits limit does not reject equal runs. No torch needed.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
. "$S/tests/cli_check.sh"
F=$S/tests/fixtures/torchtitan
A=$F/seed42_a.log

# Recognised wherever the first step line is (none in the first 4 KiB of these logs).
for f in "$F"/*.log; do
    first=$(grep -b -m1 'step: ' "$f" | cut -d: -f1)
    [ "${first:-0}" -gt 4096 ] || { echo "FAIL: $f: first step line at byte ${first:-none}, expected past 4 KiB"; fail=1; }
    "$B" compare "$f" "$A" --json "$T/r.json" >"$T/out" 2>&1
    rc=$?
    if [ $rc = 2 ]; then echo "FAIL: $f not read without --format"; cat "$T/out"; fail=1
    else jcheck "$T/r.json" "r['completion']['a']['last_step'] > 0" "$(basename "$f") recognised as a TorchTitan log"; fi
done

check 0 "verdict: ACCEPTED" -- "$B" compare "$A" "$F/seed42_b.log" --json "$T/same.json"
jcheck "$T/same.json" "r['completion']['a']['end']=='finished' and r['completion']['b']['end']=='finished'" "both runs finished"
jcheck "$T/same.json" "r['precision']['a']['loss_resolution']==5e-06 and r['precision']['a']['grad_norm_resolution']==5e-05" \
    "print resolution from the printed digits (5 and 4 decimals)"
check 1 "verdict: REJECTED" -- "$B" compare "$A" "$F/lr_changed.log"
check 1 "step-0 (step 1) grad-norm\|early-step\|per-step loss" -- "$B" compare "$A" "$F/lr_changed.log"

# The non-finite stop: REJECTED against the complete run, naming the side, the step and the reason.
nf=$(sed -n 's/.*Loss is not finite.* at step \([0-9]*\)\. Stopping training\..*/\1/p' "$F/nonfinite.log" | head -1)
[ -n "$nf" ] || { echo "FAIL: nonfinite.log has no non-finite stop"; fail=1; }
check 1 "run B ($F/nonfinite.log) stopped at step $nf: loss is not finite" -- "$B" compare "$A" "$F/nonfinite.log"
check 1 "run A ($F/nonfinite.log) stopped at step $nf: loss is not finite" -- "$B" compare "$F/nonfinite.log" "$A" --profile exact

# A log cut after its fifth step line (a killed run, or one still running): REJECTED, on either side.
n5=$(grep -n 'step:  5 ' "$A" | head -1 | cut -d: -f1)
head -n "$n5" "$A" > "$T/cut.log"
check 1 "run B ($T/cut.log) stopped at step 5: the log ends without TorchTitan's \"Training completed\"" -- "$B" compare "$A" "$T/cut.log"
check 1 "run A ($T/cut.log) stopped at step 5" -- "$B" compare "$T/cut.log" "$F/seed42_b.log"

# An unknown file: one line naming the formats tried and the flags.
printf 'hello\nworld\n' > "$T/notes.txt"
check 2 "notes.txt: not a run log compare recognises (tried: portatrain run dir, HF trainer_state.json, TorchTitan console log, CSV with a step,loss header, JSON Lines); name its format with --format-a/--format-b" -- \
    "$B" compare "$A" "$T/notes.txt"
[ "$(wc -l < "$T/out")" = 1 ] || { echo "FAIL: the refusal is not one line"; cat "$T/out"; fail=1; }

# Print precision: a step-1 grad norm below 0.05 printed with 4 decimals carries +-5e-5 on each side, more than
# the fp32 profile's 1e-3; two prints one last digit apart are within what the rounding can produce.
sed 's/grad_norm:  [0-9.]*/grad_norm:  0.0123/' "$A" > "$T/gn_a.log"
sed 's/grad_norm:  [0-9.]*/grad_norm:  0.0124/' "$F/seed42_b.log" > "$T/gn_b.log"
check 0 "step-0 grad norm: the logs' print precision (+-half a unit of the last printed digit), not the platform, limits this check" -- \
    "$B" compare "$T/gn_a.log" "$T/gn_b.log" --json "$T/gn.json"
jcheck "$T/gn.json" "r['verdict']=='ACCEPTED' and r['step0']['grad_norm_limited_by_rounding'] and r['step0']['grad_norm_rel_diff'] > 1e-3" \
    "grad-norm check limited by print precision, not rejected"
sed 's/grad_norm:  [0-9.]*/grad_norm:  0.0126/' "$F/seed42_b.log" > "$T/gn_c.log"   # three last digits apart: beyond it
check 1 "step-0 (step 1) grad-norm rel diff" -- "$B" compare "$T/gn_a.log" "$T/gn_c.log"

# log_freq > 1 with validation lines, the same seed: compared on the common steps.
check 0 "verdict: ACCEPTED" -- "$B" compare "$A" "$F/logfreq_val.log" --json "$T/lf.json"
jcheck "$T/lf.json" "r['gaps']['b']['interval'] > 1 and r['per_step']['n'] >= 3" "log_freq > 1 compared on common steps"

# A resumed run (an attempt stopped after step 6, a second resuming from the step-4 checkpoint, in one log): the
# replayed steps' last lines are kept, and the run finished.
check 0 "verdict: ACCEPTED" -- "$B" compare "$A" "$F/resumed.log" --json "$T/res.json"
jcheck "$T/res.json" "r['completion']['b']['attempts']==2 and r['completion']['b']['resumed_from']==4 and r['completion']['b']['checkpoint_loads']==1 and r['per_step']['repeated_b']==2 and r['completion']['b']['end']=='finished'" \
    "resumed run: two attempts, resumed from step 4, replayed steps deduplicated"
exit $fail
