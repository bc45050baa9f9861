#!/usr/bin/env bash
# A new user's first hour: `portatrain --version` names the build, its compiler and backends; raw text given
# where token shards belong is refused (exit 2) with the tokenize command to run; the end of `make demo`
# (scripts/demo_summary.py) lists every experiment and removes only the checkpoints no report links to.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cd "$S"  # accept reads configs/prices.json
fail=0
. "$S/tests/cli_check.sh"
F="$S/tests/fixtures/golden/tied"
say() { if eval "$1"; then echo "ok: $2"; else echo "FAIL: $2"; fail=1; fi; }

# ---- 1. --version / version: one line, the source version, the compiler, the backends built in ----
check 0 "^portatrain [^ ,]*, \(gcc\|clang\) [^,]*, backends: [a-z0-9,-]*$" -- "$B" --version
say '[ "$(wc -l <"$T/out")" -eq 1 ]' "--version prints one line"
cp "$T/out" "$T/version"
check 0 "^portatrain " -- "$B" version
say 'cmp -s "$T/out" "$T/version"' "'version' prints what '--version' does"
ver=$(sed 's/^portatrain \([^,]*\),.*/\1/' "$T/version")
if git -C "$S" rev-parse --git-dir >/dev/null 2>&1; then
    # git describe: TAG-N-gHASH, or HASH alone without tags; -dirty for local changes
    hash=$(echo "$ver" | sed -e 's/-dirty$//' -e 's/.*-g\([0-9a-f]*\)$/\1/')
    say 'git -C "$S" cat-file -e "$hash^{commit}" 2>/dev/null' "version '$ver' names a commit of this repository"
else
    say '[ "$ver" = unknown ]' "version is 'unknown' outside git"
fi
"$B" devices >"$T/devices"
for be in $(sed 's/.*backends: //' "$T/version" | tr , ' '); do
    say 'grep -q "^$be[: ]" "$T/devices" && ! grep -q "^$be  *not built" "$T/devices"' "backend $be is one 'devices' lists as built"
done

# ---- 2. raw text as token data: exit 2, one line naming the file and the command that fixes it ----
mkdir -p "$T/txt"
printf 'In the beginning God created the heaven and the earth.\nCaf\xc3\xa9\n' >"$T/corpus.txt"
printf '{"text": "Doc one"}\n{"text": "Doc two"}\n' >"$T/corpus.jsonl"
cp "$T/corpus.jsonl" "$T/hf.json"  # JSON Lines named .json, as HF datasets' to_json writes
cp "$T/corpus.txt" "$T/txt/b.txt"; cp "$T/corpus.txt" "$T/txt/a.txt"
hint="tokenize it first: portatrain tokenize --tokenizer tokenizer.json --output-dir DIR"
raw() {  # raw PATH SHOWN -- COMMAND...: refused naming PATH, suggesting to tokenize SHOWN
    local p=$1 shown=$2; shift 3
    check 2 "^portatrain: error: $p: not token shards (looks like raw text.*); $hint $shown$" -- "$@"
    [ "$(wc -l <"$T/out")" -eq 1 ] || { echo "FAIL: more than one line: $*"; fail=1; }
}
TR="--model $F --output-dir $T/run --max-steps 1 --seq-len 16 --quiet"
raw "$T/corpus.txt" "$T/corpus.txt" -- "$B" train --data "$T/corpus.txt" $TR
raw "$T/corpus.jsonl" "$T/corpus.jsonl" -- "$B" train --data="$T/corpus.jsonl" $TR
raw "$T/hf.json" "$T/hf.json" -- "$B" train $TR --data "$T/hf.json"
raw "$T/txt" "$T/txt/\*.txt" -- "$B" train --data "$T/txt" $TR
raw "$T/corpus.txt" "$T/corpus.txt" -- "$B" eval --model "$F" --data "$T/corpus.txt"
raw "$T/corpus.txt" "$T/corpus.txt" -- "$B" accept --baseline cpu-ref --candidate cpu-ref --train-data "$T/corpus.txt" --output-dir "$T/x"
say '[ ! -e "$T/run" ] && [ ! -e "$T/x" ]' "nothing run for raw text"
# the suggested command works as given (tokenizer and DIR filled in), and its summary counts "1 document"
TOK="${PT_SHARED_DIR:-$S/../shared}/assets/qwen3-tokenizer/tokenizer.json"
if [ -f "$TOK" ]; then
    "$B" train --data "$T/corpus.txt" $TR 2>&1 | sed -n "s|.*tokenize it first: ||p" \
        | sed -e "s|tokenizer.json|$TOK|" -e "s|DIR|$T/shards|" -e "s|^portatrain|$B|" >"$T/fix"
    bash "$T/fix" >"$T/out" 2>&1
    say 'grep -q "^tokenize: 1 document, [0-9]* tokens in 1 shard -> " "$T/out"' "the suggested tokenize runs: '1 document'"
    say '[ -f "$T/shards/dataset.json" ] && ! "$B" train --data "$T/shards" 2>&1 | grep -q "raw text"' \
        "its output is token data (not refused as raw text)"
else echo "ok: no tokenizer at $TOK (suggested-command check skipped)"; fi
# what is not raw text keeps its own message (corrupt shards: tests/test_bad_input.c)
printf '{"format": "nope"}' >"$T/junk.json"
check 2 "junk.json.*format" -- "$B" train --data "$T/junk.json" $TR
say '! grep -q "raw text" "$T/out"' "a broken data set index is not called raw text"
"$B" train --data "$F/data.bin" $TR >"$T/out" 2>&1; rc=$?
say '[ $rc -eq 0 ] && [ -s "$T/run/model.safetensors" ]' "a real shard still trains"

# ---- 3. the demo's summary and prune, on two short accept runs (the second reusing the first's baseline,
# as the demo's bf16 experiment does) and an experiment that did not finish ----
O="$T/o"  # $T/out is check's
A="--model $F --train-data $F/data.bin --eval-data $F/data.bin --steps 8 --checkpoint-step 4 --recovery-save-steps 2
   --seq-len 16 --per-device-train-batch-size 2 --warmup-steps 2 --eval-batches 1 --quiet"
check 0 "verdict: ACCEPTED" -- "$B" accept --baseline cpu-ref:fp32 --candidate cpu-ref:fp32 $A --output-dir "$O/demo"
check 0 "verdict: ACCEPTED" -- "$B" accept --baseline cpu-ref:fp32 --baseline-run "$O/demo/baseline" \
    --candidate cpu-ref:fp32 $A --output-dir "$O/demo-b"
mkdir -p "$O/demo-x/run/checkpoint-3" && echo '{}' >"$O/demo-x/run/checkpoint-3/checkpoint.json"
kept="$O/demo/baseline/checkpoint-4 $O/demo/candidate/checkpoint-4 $O/demo-b/candidate/checkpoint-4"
gone="$O/demo/baseline/checkpoint-8 $O/demo/candidate/checkpoint-8 $O/demo-b/candidate/checkpoint-8
      $O/demo-b/baseline/checkpoint-8 $(find "$O/demo/recovery" "$O/demo/portability" "$O/demo-b/recovery" \
      "$O/demo-b/portability" -name 'checkpoint-*')"
for p in $kept $gone; do [ -e "$p" ] || { echo "FAIL: set-up: $p missing before the prune"; fail=1; }; done
find "$O" -name model.safetensors -o -name 'report.*' -o -name metrics.jsonl | sort | xargs sha256sum >"$T/sums"
python3 "$S/scripts/demo_summary.py" --prune "$O/demo" "$O/demo-b" "$O/demo-x" >"$T/summary" 2>&1; rc=$?
say '[ $rc -eq 0 ]' "demo_summary.py --prune exits 0"
cat "$T/summary"
for e in demo demo-b; do
    wall=$(python3 -c "import json,sys; s=round(json.load(open(sys.argv[1]))['wall_s']); print(f'{s//60}m{s%60:02d}s')" "$O/$e/report.json")
    cc=$(python3 -c "import json,sys; print('%.4f' % json.load(open(sys.argv[1]))['cost']['by_side']['candidate']['cost'])" "$O/$e/report.json")
    say 'grep -Eq "^  ACCEPTED +$wall +USD $cc  $O/$e/report.html  \(cpu-ref:fp32 -> cpu-ref:fp32\)$" "$T/summary"' \
        "summary line for $e: verdict, wall time $wall, the candidate's own cost $cc, report path"
done
say 'grep -q "^  - .*$O/demo-x: no report.json (did not finish)$" "$T/summary"' "an unfinished experiment is listed as such"
# the recorded baseline's own cost is carried from its record into the second experiment, marked, outside its total
jcheck "$O/demo-b/report.json" "abs(r['cost']['by_side']['baseline']['recorded']['cost'] - sum(x['cost'] for x in json.load(open('$O/demo/report.json'))['cost']['rows'] if x['run']=='baseline')) < 1e-12 and 'carried' in r['cost']['by_side']['baseline']['recorded']['note'] and abs(sum(x['cost'] for x in r['cost']['rows']) - r['cost']['total_cost']) < 1e-12" "the recorded baseline's cost carried from its record, not in the total"
bytes=$(find "$O" -type f -printf '%s\n' | awk '{s += $1} END {printf "%.1f MB", s / 1048576}')
say 'grep -q "^  $O/ holds $bytes (removed [0-9.]* [KMG]*B of checkpoints no report links to)$" "$T/summary"' \
    "the size of out/ ($bytes) and what was removed"
for p in $gone; do say '[ ! -e "$p" ] && [ ! -L "$p" ]' "pruned: ${p#$O/}"; done
for p in $kept "$O/demo-b/baseline/checkpoint-4"; do
    say '"$B" ckpt verify "$p" >/dev/null 2>&1' "kept, and verifies: ${p#$O/}"
done
for r in demo/baseline demo/candidate demo-b/candidate; do
    say '[ "$(cat "$O/$r/latest")" = checkpoint-4 ] && "$B" ckpt verify "$O/$r" >/dev/null 2>&1' \
        "latest re-pointed at the kept checkpoint, and the run verifies: $r"
done
say '[ -e "$O/demo-x/run/checkpoint-3/checkpoint.json" ]' "an unfinished experiment is not pruned"
say '[ "$(wc -l <"$T/sums")" -ge 20 ] && sha256sum --quiet -c "$T/sums"' "every report, metrics.jsonl and model.safetensors untouched"
say '[ "$(find "$O" -name "checkpoint-*" | wc -l)" -eq 5 ]' "no other checkpoint left"
python3 "$S/scripts/demo_summary.py" --prune "$O/demo" "$O/demo-b" >"$T/summary2" 2>&1
say 'grep -q "(removed 0 B of checkpoints" "$T/summary2"' "a second prune removes nothing"

# ---- 4. no surprises: each command does what the one before it led the user to expect ----
# compare picks the profile accept would (from the manifests): an fp32 baseline and a bf16 candidate are
# judged with bf16, which accepts this pair (lr 1e-3) where fp32 rejects it; --profile still wins
P="--model $F --data $F/data.bin --max-steps 8 --seq-len 16 --per-device-train-batch-size 2 --warmup-steps 2
   --learning-rate 1e-3 --quiet"
"$B" train --backend cpu-ref $P --output-dir "$T/fp32" >/dev/null 2>&1
"$B" train --backend cpu --precision bf16 $P --output-dir "$T/bf16" >/dev/null 2>&1
check 0 "^profile:   bf16 (from the manifests: cpu-ref:fp32 vs cpu:bf16, bf16 on at least one side)$" -- \
    "$B" compare "$T/fp32" "$T/bf16"
check 1 "^profile:   fp32 (named on the command line)$" -- "$B" compare "$T/fp32" "$T/bf16" --profile fp32
check 0 "default as accept picks it" -- "$B" compare --help
# a missing input is not transient: the supervisor stops at once (exit 2) with the worker's one line
check 2 "^portatrain: error: $T/nomodel: model directory not found$" -- \
    "$B" train --supervise --model "$T/nomodel" --data "$F/data.bin" --output-dir "$T/sup" --max-steps 2 --seq-len 16
say '[ "$(wc -l <"$T/out")" -eq 1 ] && [ ! -e "$T/sup" ]' "no restart for a missing --model, nothing left behind"
# Ctrl-C: one line naming the step and how to resume, exit 130. The run is a job of its own (set -m): a
# script's background job would start with SIGINT ignored, which train leaves ignored.
interrupt() {  # interrupt OUT SAVE_STEPS: SIGINT once OUT has a metrics line (and a checkpoint when one is due)
    set -m
    "$B" train --model "$F" --data "$F/data.bin" --output-dir "$1" --max-steps 1000000 --seq-len 16 \
        --save-steps "$2" --quiet >"$T/out" 2>&1 &
    local pid=$! i
    set +m
    for i in $(seq 400); do
        [ -s "$1/metrics.jsonl" ] && { [ "$2" -gt 1000 ] || [ -e "$1/latest" ]; } && break; sleep 0.05
    done
    kill -INT "$pid"; wait "$pid"; irc=$?
}
interrupt "$T/int" 5
say '[ $irc -eq 130 ] && [ "$(wc -l <"$T/out")" -eq 1 ] && grep -Eq "^portatrain: interrupted at step [0-9]+ of 1000000; resume with: portatrain train \.\.\. --resume-from-checkpoint latest \(the same flags; it continues from step [0-9]*[05]\)$" "$T/out"' \
    "Ctrl-C: exit 130 and the resume command ($(cat "$T/out"))"
interrupt "$T/int0" 999999
say '[ $irc -eq 130 ] && grep -Eq "^portatrain: interrupted at step [0-9]+ of 1000000; no checkpoint was written yet" "$T/out"' \
    "Ctrl-C before any checkpoint says so ($(cat "$T/out"))"
# a mistyped backend or SPEC part: one line naming the bad value and the nearest valid one
check 2 "^portatrain: error: cpu_ref: unknown backend; did you mean cpu-ref? (known: cpu-ref, cpu, opencl, cuda, cuda-sim)$" -- \
    "$B" accept --baseline cpu_ref --candidate cpu --output-dir "$T/x"
check 2 "^portatrain: error: platform SPEC 'cpu:tp=0': tp must be a positive integer up to 4096 (got '0')$" -- \
    "$B" accept --baseline cpu-ref --candidate cpu:tp=0 --output-dir "$T/x"
check 2 "^portatrain: error: platform SPEC 'cpu:bf61': unknown part 'bf61'; did you mean bf16? (expected" -- \
    "$B" accept --baseline cpu-ref --candidate cpu:bf61 --output-dir "$T/x"
check 1 "^portatrain: error: cuda_sim: unknown backend; did you mean cuda-sim? (known: " -- \
    "$B" train --backend cuda_sim --model "$F" --data "$F/data.bin" --output-dir "$T/x" --max-steps 1 --seq-len 16
say '[ "$(wc -l <"$T/out")" -eq 1 ] && [ ! -e "$T/x" ]' "one line, nothing run"
# ---- 5. topo plans for a device backend without its device; devices names a missing driver; accept finds its
# defaults beside the binary, or refuses naming the flag ----
TOPO="topo --world 2 --tp 1 --fsdp 2 --config $S/configs/tiny.json --seq-len 64 --per-device-train-batch-size 4"
for be in cuda opencl; do
    check 0 "planned for $be without opening a device (pass --device-memory GIB" -- "$B" $TOPO --backend $be
done
check 0 "device memory 80.00 GiB per rank (--device-memory): parameter state + activations .* fit$" -- \
    "$B" $TOPO --backend cuda --device-memory 80
check 0 '"fits":	true' -- "$B" $TOPO --backend cuda --device-memory 80 --json
check 0 "do NOT fit" -- "$B" $TOPO --backend cuda --device-memory 0.001
"$B" devices >"$T/devices" 2>&1
if grep -q "^cuda  *no CUDA device" "$T/devices" && [ ! -e /proc/driver/nvidia/version ]; then
    say 'grep -q "^cuda  *no CUDA device: no NVIDIA driver$" "$T/devices"' "devices without a driver: 'no NVIDIA driver'"
else echo "ok: cuda not built or a driver present (the no-driver line is not checked here)"; fi
mkdir -p "$T/away/bin" "$T/cwd"
cp "$B" "$T/away/bin/portatrain"  # a binary with no repository around it
(cd "$T/cwd" && check 2 "^portatrain: error: accept: --price-table: the default configs/prices.json is neither under the current directory nor beside the binary; pass --price-table$" -- \
    "$T/away/bin/portatrain" accept --baseline cpu-ref --candidate cpu --output-dir "$T/cwd/x")
say '[ ! -e "$T/cwd/x" ]' "nothing run without the defaults"
if [ -d "$S/data/demo/shards/train" ] && [ -d "$S/data/demo/qwen3-tokenizer" ] && [ "$(dirname "$(dirname "$(realpath "$B")")")" = "$(realpath "$S")" ]; then
    # the repository's binary, run elsewhere, finds them: it gets as far as checking --steps
    (cd "$T/cwd" && check 2 "accept: --steps 1: at least" -- "$B" accept --baseline cpu-ref --candidate cpu --steps 1 --output-dir "$T/cwd/y")
else echo "ok: no demo data or an out-of-tree build (the defaults-beside-the-binary run is not checked here)"; fi

exit $fail
