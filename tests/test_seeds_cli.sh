#!/usr/bin/env bash
# portatrain compare --seeds on generated multi-seed JSONL curves: same speed ACCEPTED (exit 0),
# a slower candidate REJECTED (exit 1) with the Welch p-value, fewer than 2 seeds unusable (exit 2).
set -u
B=${PORTATRAIN:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
curve() {  # file s0 phase
    awk -v s0="$2" -v ph="$3" 'BEGIN { for (s = 1; s <= 120; s++) printf "{\"step\": %d, \"loss\": %.9f}\n", s, 2 + 8 * exp(-s / s0) + 0.01 * sin(s * 1.7 + ph) }' >"$1"
}
for i in 0 1 2; do
    curve "$T/a$i.jsonl" $((20 + i)) $i
    curve "$T/s$i.jsonl" "$(awk -v i=$i 'BEGIN{print 20.5 + 0.8 * i}')" $((3 + i))
    curve "$T/w$i.jsonl" $((26 + i)) $((6 + i))
done
A="$T/a0.jsonl,$T/a1.jsonl,$T/a2.jsonl"
. "${PT_SOURCE_DIR:?}/tests/cli_check.sh"
check 0 "verdict: ACCEPTED" -- "$B" compare --seeds "$A" "$T/s0.jsonl,$T/s1.jsonl,$T/s2.jsonl" --json "$T/r.json"
grep -q '"p_value"' "$T/r.json" || { echo "FAIL: --json has no p_value"; fail=1; }
check 1 "candidate is slower to converge: .* (one-sided Welch p=" -- "$B" compare --seeds "$A" "$T/w0.jsonl,$T/w1.jsonl,$T/w2.jsonl"
check 0 "verdict: ACCEPTED" -- "$B" compare --seeds "$T/w0.jsonl,$T/w1.jsonl,$T/w2.jsonl" "$A"
check 2 "at least 2 runs per side" -- "$B" compare --seeds "$T/a0.jsonl" "$T/s0.jsonl,$T/s1.jsonl"
exit $fail
