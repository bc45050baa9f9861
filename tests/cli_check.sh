# Sourced by the CLI tests: the shared assertions. Each prints "FAIL: ..." on a failure and sets fail=1;
# expect and expect_run also count into $checks and $fails, for the tests that end on those counts.
#
# check WANT_RC PATTERN -- COMMAND... runs COMMAND, and it passes when the exit status is WANT_RC and the
# output (stdout + stderr, left in $T/out) matches the grep PATTERN; check_fixed takes a fixed STRING.
# Needs $T (the test's temp dir). train_fixture also needs $B (portatrain) and $S (the source dir).
_check() {
    local grep_opt=$1 want=$2 pat=$3; shift 4
    "$@" >"$T/out" 2>&1; local rc=$?
    if [ "$rc" != "$want" ] || ! grep -q $grep_opt -- "$pat" "$T/out"; then
        echo "FAIL (rc $rc, want $want, pattern '$pat'): $*"; cat "$T/out"; fail=1
    else echo "ok: $*"; fi
}
check() { _check -G "$@"; }
check_fixed() { _check -F "$@"; }
# expect 'EXPRESSION' MESSAGE: passes when the shell expression (evaluated in the caller's variables) succeeds.
expect() {
    checks=$((${checks:-0} + 1))
    if eval "$1"; then :; else echo "FAIL: $2"; fails=$((${fails:-0} + 1)); fail=1; fi
}
# expect_run MESSAGE COMMAND...: passes when COMMAND exits 0.
expect_run() {
    local what=$1; shift
    checks=$((${checks:-0} + 1))
    if "$@"; then :; else echo "FAIL: $what"; fails=$((${fails:-0} + 1)); fail=1; fi
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
    python3 "$PT_SOURCE_DIR/tests/py/curve_parity.py" "$@"
}
# train_fixture BACKEND OUTDIR [EXTRA ARGS...]: 8 steps on the tied golden fixture (batch 2 x 16 tokens,
# warm-up 2 then cosine, weight decay 0.1): the backend CLI tests' common short run.
train_fixture() {
    local be=$1 out=$2 fix="$S/tests/fixtures/golden/tied"; shift 2
    "$B" train --backend "$be" --model "$fix" --data "$fix/data.bin" --output-dir "$out" --max-steps 8 --seq-len 16 \
        --per-device-train-batch-size 2 --learning-rate 3e-3 --warmup-steps 2 --lr-scheduler-type cosine \
        --weight-decay 0.1 --quiet "$@"
}
