# Sourced by the CLI tests: check WANT_RC PATTERN -- COMMAND... runs COMMAND, and it passes when the
# exit status is WANT_RC and the output (stdout + stderr, left in $T/out) matches the grep PATTERN.
# Needs $T (the test's temp dir); sets fail=1 on a failure.
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
