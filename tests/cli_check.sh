# Sourced by the CLI tests: check WANT_RC PATTERN -- COMMAND... runs COMMAND, and it passes when the
# exit status is WANT_RC and the output (stdout + stderr, left in $T/out) matches the grep PATTERN.
# Needs $T (the test's temp dir); sets fail=1 on a failure. train_fixture also needs $B (portatrain) and $S
# (the source dir).
check() {
    local want=$1 pat=$2; shift 3
    "$@" >"$T/out" 2>&1; local rc=$?
    if [ "$rc" != "$want" ] || ! grep -q -- "$pat" "$T/out"; then
        echo "FAIL (rc $rc, want $want, pattern '$pat'): $*"; cat "$T/out"; fail=1
    else echo "ok: $*"; fi
}
# jcheck FILE.json PY_EXPR DESCRIPTION: passes when the Python expression over r = json.load(FILE) is true.
jcheck() {
    if python3 -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if ($2) else 1)" "$1"; then
        echo "ok: $3"
    else echo "FAIL: $3 ($2) in $1"; fail=1; fi
}
# curve_parity A/metrics.jsonl B/metrics.jsonl LABEL TOL [FIRST LAST]: passes when B has every one of the steps
# FIRST..LAST (default: A's steps) and every loss of B is within TOL relative of A's same step. Prints the
# worst difference; the checkpoint-portability checks use it with FIRST = the step after the checkpoint.
curve_parity() {
    python3 - "$@" <<'PY'
import json, sys
a = {j["step"]: j["loss"] for j in map(json.loads, open(sys.argv[1]))}
b = {j["step"]: j["loss"] for j in map(json.loads, open(sys.argv[2]))}
label, tol = sys.argv[3], float(sys.argv[4])
want = list(range(int(sys.argv[5]), int(sys.argv[6]) + 1)) if len(sys.argv) > 6 else sorted(a)
steps = [s for s in want if s in b and s in a]
worst = max(abs(b[s] - a[s]) / abs(a[s]) for s in steps) if steps else 1
print(f"{label}: steps {steps[0] if steps else '-'}..{steps[-1] if steps else '-'}, max rel diff {worst:.3e} (bound {tol:g})")
sys.exit(0 if steps == want and worst <= tol else 1)
PY
}
# train_fixture BACKEND OUTDIR [EXTRA ARGS...]: 8 steps on the tied golden fixture (batch 2 x 16 tokens,
# warm-up 2 then cosine, weight decay 0.1): the backend CLI tests' common short run.
train_fixture() {
    local be=$1 out=$2 fix="$S/tests/fixtures/golden/tied"; shift 2
    "$B" train --backend "$be" --model "$fix" --data "$fix/data.bin" --output-dir "$out" --max-steps 8 --seq-len 16 \
        --per-device-train-batch-size 2 --learning-rate 3e-3 --warmup-steps 2 --lr-scheduler-type cosine \
        --weight-decay 0.1 --quiet "$@"
}
