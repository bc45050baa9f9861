#!/usr/bin/env bash
# portatrain compare on synthetic logs: a NaN/inf loss or grad norm, or a step a portatrain run logged as
# skipped (--nan-policy skip), is REJECTED under every profile (exact included); a hole in a log's own
# logging rhythm is REJECTED, while logs that simply log at different intervals (HF logging_steps,
# TorchTitan log_freq) are compared on their common steps and can be ACCEPTED, but a log that ends a logging
# interval or more before the other's is a run that stopped early: REJECTED. A torn last line is ignored.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
. "$S/tests/cli_check.sh"
loss() { awk -v s="$1" 'BEGIN { printf "%.17g\n", 10 * exp(-0.01 * s) }'; }
csv() {  # FILE FIRST LAST STRIDE [SKIP_STEP]
    { echo "step,loss,grad_norm"; for s in $(seq "$2" "$4" "$3"); do [ "$s" = "${5:-}" ] || echo "$s,$(loss "$s"),1.5"; done; } > "$1"
}
run() {  # DIR [SKIPPED_STEP]: a portatrain run dir; the skipped step as --nan-policy skip writes it
    mkdir -p "$1"
    for s in $(seq 1 30); do
        if [ "$s" = "${2:-}" ]; then echo "{\"step\": $s, \"loss\": null, \"grad_norm\": null, \"skipped\": true, \"reason\": \"nonfinite_loss\"}"
        else echo "{\"step\": $s, \"loss\": $(loss "$s"), \"grad_norm\": 1.5}"; fi
    done > "$1/metrics.jsonl"
}
csv "$T/a.csv" 1 30 1
check 0 "verdict: ACCEPTED" -- "$B" compare "$T/a.csv" "$T/a.csv" --profile exact

# Non-finite values.
sed 's/^5,[^,]*,/5,nan,/' "$T/a.csv" > "$T/nanloss.csv"
check 1 "nanloss.csv: non-finite loss or grad norm at 1 step, first at step 5" -- "$B" compare "$T/a.csv" "$T/nanloss.csv" --profile exact
check 1 "verdict: REJECTED" -- "$B" compare "$T/nanloss.csv" "$T/a.csv" --profile fp32
sed 's/^7,\([^,]*\),.*/7,\1,inf/' "$T/a.csv" > "$T/infgn.csv"
check 1 "infgn.csv: non-finite loss or grad norm at 1 step, first at step 7" -- "$B" compare "$T/a.csv" "$T/infgn.csv" --profile exact
sed 's/^9,\([^,]*\),.*/9,\1,/' "$T/a.csv" > "$T/nogn.csv"   # an empty cell is "not logged", not NaN
check 0 "verdict: ACCEPTED" -- "$B" compare "$T/a.csv" "$T/nogn.csv" --profile exact
run "$T/ra"; run "$T/rskip" 12
check 0 "verdict: ACCEPTED" -- "$B" compare "$T/ra" "$T/ra" --profile exact
check 1 "rskip: non-finite loss or grad norm at 1 step, first at step 12 (1 logged as skipped)" -- \
    "$B" compare "$T/ra" "$T/rskip" --profile exact --json "$T/skip.json"
jcheck "$T/skip.json" "r['verdict']=='REJECTED' and r['nonfinite']['b']==[12] and r['nonfinite']['a']==[]" "nonfinite steps in --json"
printf '[rank0]:[titan] step:  1  loss:  nan  grad_norm:  1.5\n[rank0]:[titan] step:  2  loss:  9.5  grad_norm:  1.5\n' > "$T/tt.log"
check 1 "tt.log: non-finite loss" -- "$B" compare "$T/tt.log" "$T/a.csv"

# Missing steps.
csv "$T/hole.csv" 1 30 1 17
check 1 "hole.csv has no line for step 17 (1 such step) although it logs every 1 step" -- "$B" compare "$T/a.csv" "$T/hole.csv" --json "$T/hole.json"
jcheck "$T/hole.json" "r['gaps']['b']['missing_steps']==1 and r['gaps']['b']['first']==17 and r['gaps']['a']['missing_steps']==0" "gaps in --json"
check 1 "hole.csv has no line for step 17" -- "$B" compare "$T/hole.csv" "$T/a.csv"
csv "$T/every5.csv" 5 30 5
check 0 "verdict: ACCEPTED" -- "$B" compare "$T/a.csv" "$T/every5.csv" --profile exact   # HF logging_steps 5
csv "$T/hole5.csv" 5 30 5 20
check 1 "hole5.csv has no line for step 20 (1 such step) although it logs every 5 steps" -- "$B" compare "$T/a.csv" "$T/hole5.csv"
{ echo "step,loss,grad_norm"; for s in 1 10 20 30; do echo "$s,$(loss "$s"),1.5"; done; } > "$T/tt10.csv"  # TorchTitan log_freq 10
check 0 "verdict: ACCEPTED" -- "$B" compare "$T/tt10.csv" "$T/a.csv" --profile exact
csv "$T/short.csv" 1 20 1   # a run that stopped early (a shorter log) is never ACCEPTED, either side
check 1 "short.csv) stopped at step 20: its log ends there and run A's goes on to step 30" -- "$B" compare "$T/a.csv" "$T/short.csv" --profile exact
check 1 "run A ($T/short.csv) stopped at step 20" -- "$B" compare "$T/short.csv" "$T/a.csv" --json "$T/short.json"
jcheck "$T/short.json" "r['completion']['a']['stopped_early'] and r['completion']['a']['stopped_at']==20 and not r['completion']['b']['stopped_early']" "completion in --json"
csv "$T/late.csv" 11 30 1   # a continuation from a checkpoint (starts later, ends with the run) is compared
check 0 "verdict: ACCEPTED" -- "$B" compare "$T/a.csv" "$T/late.csv" --profile exact

# A torn last line (a run killed while writing it, no newline after it) is ignored with a warning; a bad
# line that is followed by a newline is still an error.
run "$T/torn"; printf '{"step": 31, "loss": 3.1' >> "$T/torn/metrics.jsonl"
check 0 "metrics.jsonl:31: ignoring a torn last line" -- "$B" compare "$T/ra" "$T/torn" --profile exact
run "$T/bad"; printf '{"step": 31, "loss": 3.1\n' >> "$T/bad/metrics.jsonl"
check 2 "metrics.jsonl:31: not a JSON object" -- "$B" compare "$T/ra" "$T/bad" --profile exact
exit $fail
