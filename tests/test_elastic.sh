#!/usr/bin/env bash
# Elastic recovery (train --supervise --elastic, docs/RECOVERY.md): 8 MPI ranks, TP2 x FSDP4, two "nodes"
# of 4 ranks (--nproc-per-node 4). An injected kill of one of node 1's ranks at a random step marks that
# node lost for good; after --rejoin-timeout the supervisor restarts the job on the 4 ranks left as
# TP2 x FSDP2 with twice the gradient accumulation (the same global batch) from the latest checkpoint,
# which the loader reshards. Checked:
#  - the run completes every step; recovery.json names the shrink (old and new layout, the lost node) and
#    the time to recover with its parts; steps after the restore ran on 4 ranks;
#  - every step reads the same global batch (tokens, batch fingerprint) as the uninterrupted 8-rank run,
#    and `portatrain compare --profile fp32` accepts the losses. Bitwise equality is not asked for: on 4
#    ranks with 2 micro-batches the gradient sums may run in another order than on 8 ranks with one;
#  - a node lost from --hostfile (the file no longer lists it) shrinks the job the same way;
#  - refusals, one line each, exit 1: a shrink below --min-world, and one whose data ranks cannot split
#    the global batch into whole micro-batches.
set -uo pipefail
: "${PORTATRAIN:?}" "${PT_SOURCE_DIR:?}"
if ! command -v mpirun >/dev/null; then echo "SKIP: mpirun not found (scripts/deps.sh installs openmpi-bin)"; exit 77; fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
. "$PT_SOURCE_DIR/tests/mpi_env.sh"
# Under ASan+UBSan the ranks keep address and UB checking but not LeakSanitizer: OpenMPI's own allocations
# at exit are not ours to fix (as in test_dist.sh).
[ -n "${PT_SANITIZED:-}" ] && export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
fail=0
fx="$PT_SOURCE_DIR/tests/fixtures/golden/untied"
"$PORTATRAIN" init --config "$fx/config.json" --seed 7 --output-dir "$T/init" >/dev/null 2>&1 || { echo "FAIL: init"; exit 1; }
STEPS=12
common=(--model "$T/init" --data "$fx/data.bin" --max-steps $STEPS --seq-len 16 --per-device-train-batch-size 2
        --tp 2 --fsdp 4 --learning-rate 3e-3 --warmup-steps 2 --weight-decay 0.1 --save-steps 3 --quiet)
sup=(--supervise --elastic --rejoin-timeout 0.5 --restart-backoff 0.1 --hang-timeout 60)
launch="mpirun -np 8 --oversubscribe"

timeout -k 5 120 mpirun --oversubscribe -np 8 "$PORTATRAIN" train "${common[@]}" --output-dir "$T/ref" >"$T/out" 2>&1 \
  || { echo "FAIL: uninterrupted 8-rank run"; tail "$T/out"; exit 1; }

# check RUN LOST_NODE: the shrunk run against the uninterrupted one
check() {
  python3 "$PT_SOURCE_DIR/tests/py/elastic_shrink.py" "$T/ref" "$1" "$2" "$STEPS"
}
# The curves only (imported logs): the run's manifest freezes gradient_accumulation_steps and the micro
# batch, which the shrink changes by design (compare refuses the run dirs for that); the global batch is
# the same every step, which check() verifies by the batch fingerprints.
compare_ref() {
  if "$PORTATRAIN" compare "$T/ref/metrics.jsonl" "$1/metrics.jsonl" --format-a jsonl --format-b jsonl \
       --profile fp32 >"$T/cmp" 2>&1 && grep -q 'verdict: ACCEPTED' "$T/cmp"; then
    echo "ok: $2: losses within the fp32 profile of the uninterrupted 8-rank run ($(grep -o 'rel diff max [^ ]*' "$T/cmp"))"
  else echo "FAIL: $2: compare with the uninterrupted run"; cat "$T/cmp"; fail=1; fi
}

# 1. a node lost by an injected kill of one of its ranks (random step, random rank of node 1)
seed=${PT_INJECT_SEED:-$RANDOM}; rank=$((4 + seed % 4))
echo "kill of rank $rank at a random step (PT_INJECT_SEED=$seed)"
PT_INJECT_SEED=$seed timeout -k 5 150 "$PORTATRAIN" train "${sup[@]}" --nproc-per-node 4 --min-world 4 \
  --launcher "$launch" --inject "kill:step=random:rank=$rank" "${common[@]}" --output-dir "$T/lost" >"$T/out" 2>&1 \
  || { echo "FAIL: elastic run"; tail -20 "$T/out"; fail=1; }
grep -q "ranks lost for good; continuing on TP2 x FSDP2" "$T/out" || { echo "FAIL: no shrink message"; fail=1; }
check "$T/lost" node1 || fail=1
compare_ref "$T/lost" "injected node loss"

# 2. a node the hostfile stops listing (and that does not come back within --rejoin-timeout)
printf 'nodeA slots=4\nnodeB slots=4\n' >"$T/hosts"
timeout -k 5 150 "$PORTATRAIN" train "${sup[@]}" --hostfile "$T/hosts" --launcher "$launch" --inject enospc:step=6 \
  "${common[@]}" --output-dir "$T/hf" >"$T/out" 2>&1 &
pid=$!
for _ in $(seq 300); do grep -qs '"start"' "$T/hf/events.jsonl" && break; sleep 0.05; done
printf 'nodeA slots=4\n' >"$T/hosts.new" && mv "$T/hosts.new" "$T/hosts"
wait $pid || { echo "FAIL: elastic run with a hostfile"; tail -20 "$T/out"; fail=1; }
check "$T/hf" nodeB || fail=1
compare_ref "$T/hf" "node gone from the hostfile"

# 3. refusals: one line naming the reason, exit 1, recovery.json not completed
refuse() { # name want_message supervisor-flags...
  local name=$1 want=$2; shift 2
  timeout -k 5 120 "$PORTATRAIN" train "${sup[@]}" "$@" --launcher "$launch" --inject kill:step=4:rank=7 \
    "${common[@]}" --output-dir "$T/$name" >"$T/out" 2>&1
  local rc=$? line
  line=$(grep -- '--elastic: cannot continue' "$T/out")
  if [ $rc -eq 1 ] && [ "$(printf '%s\n' "$line" | grep -c .)" -eq 1 ] && grep -q -- "$want" <<<"$line" \
     && python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); sys.exit(r["completed"])' "$T/$name/recovery.json" \
     && grep -q '"elastic_refused"' "$T/$name/events.jsonl"; then
    echo "ok: refused ($name): $line"
  else echo "FAIL: refusal $name (exit $rc)"; tail -5 "$T/out"; fail=1; fi
}
refuse min_world "fewer than --min-world 6" --nproc-per-node 4 --min-world 6
# nodes of 2: 6 ranks left = 3 data ranks, which cannot split 8 rows into micro-batches of 2; 2 data
# ranks would, but that is 4 ranks, below --min-world 6
refuse batch "keeps the global batch of 8 rows" --nproc-per-node 2 --min-world 6
exit $fail
