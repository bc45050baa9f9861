#!/usr/bin/env bash
# portatrain replays a real TorchTitan 0.3.0 run on multi-document data (tests/fixtures/torchtitan_docs: 400
# documents, 30 steps; make.sh regenerates the logs): --data-mode documents (EOS per document, block-causal
# attention, positions per document), TorchTitan's schedule (warm-up 2, decay_ratio 0.8, linear), weight decay on
# every parameter, betas 0.9/0.95, from the same initial weights.
#   - one process against TorchTitan on one rank: ACCEPTED (fp32 profile);
#   - FSDP2 on two ranks with --document-parts 2 against TorchTitan's two-rank FSDP2 run: ACCEPTED;
#   - a wrong kernel (RMSNorm epsilon) against TorchTitan: REJECTED;
#   - one document part against the two-rank run (which splits the documents between its ranks): REJECTED.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
. "$S/tests/cli_check.sh"
fail=0
F=$S/tests/fixtures/torchtitan_docs
TOK=${PT_SHARED_DIR:-$S/../shared}/assets/qwen3-tokenizer/tokenizer.json
if [ ! -f "$TOK" ]; then echo "SKIP: $TOK not found (the Qwen3 tokenizer of ../shared)"; exit 77; fi
"$B" tokenize --tokenizer "$TOK" --eos '<|im_end|>' --output-dir "$T/data" --threads 1 --quiet "$F/verses.jsonl" \
    >"$T/log" 2>&1 || { echo "FAIL: tokenize"; cat "$T/log"; exit 1; }
"$B" init --config "$S/configs/tiny.json" --output-dir "$T/m" --seed 42 >/dev/null || { echo "FAIL: init"; exit 1; }
run() {  # run OUT [flags]: tools/torchtitan_run.py's defaults
    "$B" train --backend cpu --model "$T/m" --data "$T/data" --data-mode documents --seq-len 64 --max-steps 30 \
        --learning-rate 3e-3 --warmup-steps 2 --lr-scheduler-type torchtitan --lr-scheduler-kwargs '{"decay_ratio": 0.8}' \
        --weight-decay 0.1 --weight-decay-params all --adam-beta2 0.95 --max-grad-norm 1.0 --save-strategy no \
        --quiet --output-dir "$@"
}
run "$T/one" --per-device-train-batch-size 4 >"$T/log" 2>&1 || { echo "FAIL: one process"; cat "$T/log"; fail=1; }
check 0 "verdict: ACCEPTED" -- "$B" compare "$T/one" "$F/one_rank.log"
grep "per-step loss rel diff" "$T/out"
PT_FAULT_KERNEL=rmsnorm_eps run "$T/wrong" --per-device-train-batch-size 4 >"$T/log" 2>&1 ||
    { echo "FAIL: wrong-kernel run"; cat "$T/log"; fail=1; }
check 1 "verdict: REJECTED" -- "$B" compare "$T/wrong" "$F/one_rank.log"
check 1 "verdict: REJECTED" -- "$B" compare "$T/one" "$F/two_ranks.log"
if command -v mpirun >/dev/null; then
    . "$S/tests/mpi_env.sh"
    M=(timeout -k 5 300 mpirun --oversubscribe -np 2)
    [ -n "${PT_SANITIZED:-}" ] && M=(env ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 "${M[@]}")
    "${M[@]}" "$B" train --backend cpu --model "$T/m" --data "$T/data" --data-mode documents --seq-len 64 \
        --max-steps 30 --learning-rate 3e-3 --warmup-steps 2 --lr-scheduler-type torchtitan \
        --lr-scheduler-kwargs '{"decay_ratio": 0.8}' --weight-decay 0.1 --weight-decay-params all --adam-beta2 0.95 \
        --max-grad-norm 1.0 --save-strategy no --quiet --output-dir "$T/fsdp2" --per-device-train-batch-size 2 \
        --fsdp 2 --document-parts 2 >"$T/log" 2>&1 || { echo "FAIL: FSDP2 run"; cat "$T/log"; fail=1; }
    check 0 "verdict: ACCEPTED" -- "$B" compare "$T/fsdp2" "$F/two_ranks.log"
    grep "per-step loss rel diff" "$T/out"
else echo "note: mpirun not found: the FSDP2 check is not run"; fi
exit $fail
