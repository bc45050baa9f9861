#!/usr/bin/env bash
# portatrain report DIR: a report.json that is not an accept report ({} or an array, a missing
# version/verdict/reasons) fails with one line naming the file and field, and writes nothing.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
. "$S/tests/cli_check.sh"
mkdir -p "$T/r"
bad() {  # JSON PATTERN
    echo "$1" > "$T/r/report.json"
    check 1 "^portatrain: error: $T/r/report.json: $2" -- "$B" report "$T/r"
    [ ! -e "$T/r/report.html" ] || { echo "FAIL: report.html written for $1"; fail=1; rm -f "$T/r/report.html"; }
}
bad '{}' 'no "version" field'
bad '[1,2]' 'not a JSON object'
bad '{"version": 1, "verdict": "ACCEPTED"}' '"reasons": missing'
cp "$S/tests/fixtures/report/accepted.json" "$T/r/report.json"
check 0 "report.html" -- "$B" report "$T/r"
exit $fail
