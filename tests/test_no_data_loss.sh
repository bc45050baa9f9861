#!/usr/bin/env bash
# A failed command must not delete what an earlier one wrote: a tokenize that
# fails keeps the dataset already in its --output-dir (before or after it wrote
# shards of its own), and leaves none of its temporaries behind (a killed one's
# are removed by the next successful run); accept refuses
# a --baseline-run inside its --output-dir (it would empty it before reading).
set -u
B="${PORTATRAIN:?PORTATRAIN must name the portatrain binary}"
SHARED="${PT_SHARED_DIR:-$(dirname "$0")/../../shared}"
TOK="$SHARED/assets/qwen3-tokenizer/tokenizer.json"
[ -f "$TOK" ] || { echo "test_no_data_loss: no tokenizer at $TOK" >&2; exit 1; }
T="$(mktemp -d "${TMPDIR:-/tmp}/pt-nodataloss-XXXXXX")"
trap 'rm -rf "$T"' EXIT
fail=0
. "$(dirname "$0")/cli_check.sh"
snap() { (cd "$1" && ls -A | sort && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
same() {  # DIR SNAPSHOT DESCRIPTION
    if snap "$1" | cmp -s - "$2"; then echo "ok: $3"; else echo "FAIL: $3"; diff <(snap "$1") "$2"; fail=1; fi
}

for i in 1 2 3 4 5 6; do echo "{\"text\": \"Old document number $i, with a few words.\"}"; done > "$T/old.jsonl"
for i in 1 2 3 4 5 6 7; do echo "{\"text\": \"New text $i is not the old text.\"}"; done > "$T/new.jsonl"
echo '{"text": 5}' > "$T/bad.jsonl"
TK=(tokenize --tokenizer "$TOK" --threads 1 --shard-tokens 16 --output-dir "$T/ds")
check 0 'tokenize: ' -- "$B" "${TK[@]}" "$T/old.jsonl"
[ -f "$T/ds/shard-00003.bin" ] || { echo "FAIL: the old dataset should have several shards"; fail=1; }
snap "$T/ds" > "$T/old.snap"

# The very first document fails: nothing of the new dataset was written yet.
check 1 'bad.jsonl:1' -- "$B" "${TK[@]}" "$T/bad.jsonl"
same "$T/ds" "$T/old.snap" "an error before any shard keeps the old dataset"
# new.jsonl is flushed (into several shards) before bad.jsonl fails.
check 1 'bad.jsonl:1' -- "$B" "${TK[@]}" "$T/new.jsonl" "$T/bad.jsonl"
same "$T/ds" "$T/old.snap" "an error after some shards keeps the old dataset, no temporaries left"
# A success replaces it: the index names the new shards and nothing temporary is left.
check 0 'tokenize: ' -- "$B" "${TK[@]}" "$T/new.jsonl"
if ls -A "$T/ds" | grep -q -v -E '^(dataset\.json|shard-[0-9]{5}\.bin)$'; then
    echo "FAIL: leftovers after a successful tokenize: $(ls -A "$T/ds")"; fail=1
else echo "ok: a successful tokenize leaves only dataset.json and shards"; fi
jcheck "$T/ds/dataset.json" 'r["inputs"][0]["path"].endswith("new.jsonl") and r["num_documents"] == 7' \
    "the new index describes the new corpus"
jcheck "$T/ds/dataset.json" 'all(__import__("hashlib").sha256(open(sys.argv[1][:-12] + s["file"], "rb").read()[1024:]).hexdigest() == s["sha256"] for s in r["shards"])' \
    "every shard's body matches the new index's sha256"

# A run killed before its finish (SIGKILL, Ctrl-C, a pre-empted job) leaves its hidden temporaries; the next
# successful run removes them (they used to stay forever, up to a shard's size each), and nothing else.
: > "$T/ds/.shard-00007.bin.partial"; : > "$T/ds/.shard-00008.bin.partial.tmp"; : > "$T/ds/.notes"
check 0 'tokenize: ' -- "$B" "${TK[@]}" "$T/new.jsonl"
if ls -A "$T/ds" | grep -q -v -E '^(dataset\.json|shard-[0-9]{5}\.bin|\.notes)$'; then
    echo "FAIL: a killed run's temporaries outlive the next run: $(ls -A "$T/ds" | tr '\n' ' ')"; fail=1
elif [ ! -e "$T/ds/.notes" ]; then echo "FAIL: a file that is not a shard temporary was removed"; fail=1
else echo "ok: the next successful tokenize removes a killed run's temporaries (and only those)"; fi

# accept: refused before anything runs (in $T, where the default demo data is absent, so a
# missed refusal cannot start training either).
mkdir -p "$T/acc/baseline/sub"
echo '{"step": 1, "loss": 1.0}' > "$T/acc/baseline/metrics.jsonl"
cp "$T/acc/baseline/metrics.jsonl" "$T/acc/baseline/sub/"
snap "$T/acc" > "$T/acc.snap"
for src in "$T/acc/baseline" "$T/acc/baseline/sub" "$T/acc/./baseline/../baseline"; do
    check 2 "baseline-run .*: lies inside --output-dir" -- \
        bash -c 'cd "$1" && "$2" accept --baseline cpu-ref --candidate cpu --baseline-run "$3" --output-dir "$1/acc"' _ "$T" "$B" "$src"
done
same "$T/acc" "$T/acc.snap" "the recorded baseline survives"
exit $fail
