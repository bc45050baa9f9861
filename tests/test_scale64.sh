#!/usr/bin/env bash
# The seed layout at its real rank count: TP4 x FSDP16 on 64 MPI ranks (oversubscribed: the 64 processes
# share whatever cores there are) against one process on the same global batch (1 row per rank x 16 FSDP
# ranks = 16 rows). configs/tiny.json has 2 KV heads, which TP4 cannot split, so the model is
# tests/scale/tp4.json: tiny's shape with 4 KV heads and a 128-token vocabulary (the golden fixture's
# data), every dimension TP4 shards divisible by 4. Checks: every step's loss within 1e-6 relative, the
# same tokens and global batch each step, a checkpoint written and verified, every metrics.jsonl line valid
# JSON, `portatrain compare` reading the 64-rank run against the single process (fp32 profile), and every
# step's bytes per collective (the MPI layer's counters in metrics.jsonl) equal to `portatrain topo`'s plan.
set -uo pipefail
: "${PORTATRAIN:?}" "${PT_SOURCE_DIR:?}"
if ! command -v mpirun >/dev/null; then echo "SKIP: mpirun not found (scripts/deps.sh installs openmpi-bin)"; exit 77; fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
. "$PT_SOURCE_DIR/tests/mpi_env.sh"
# Under ASan+UBSan the ranks keep address and UB checking but not LeakSanitizer: OpenMPI's own allocations
# at exit are not ours to fix (as in test_dist.sh).
[ -n "${PT_SANITIZED:-}" ] && export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
fail=0
STEPS=${PT_SCALE_STEPS:-4}
"$PORTATRAIN" init --config "$PT_SOURCE_DIR/tests/scale/tp4.json" --seed 11 --output-dir "$T/init" >/dev/null \
  || { echo "FAIL: init"; exit 1; }
args=(train --model "$T/init" --data "$PT_SOURCE_DIR/tests/fixtures/golden/untied/data.bin" --max-steps "$STEPS"
      --seq-len 16 --learning-rate 3e-3 --warmup-steps 1 --weight-decay 0.1 --save-steps "$STEPS" --quiet)
"$PORTATRAIN" "${args[@]}" --output-dir "$T/single" --per-device-train-batch-size 16 2>"$T/err" \
  || { echo "FAIL: single-process run"; cat "$T/err"; exit 1; }
t0=$(date +%s.%N)
timeout -k 5 110 mpirun --oversubscribe -np 64 "$PORTATRAIN" "${args[@]}" --output-dir "$T/tp4fsdp16" \
  --per-device-train-batch-size 1 --tp 4 --fsdp 16 >"$T/out" 2>&1 \
  || { echo "FAIL: 64-rank TP4 x FSDP16 run"; tail -20 "$T/out"; exit 1; }
echo "64 ranks TP4 x FSDP16, $STEPS steps: $(python3 -c "import time; print('%.1f' % (time.time() - $t0))") s wall"

python3 "$PT_SOURCE_DIR/tests/py/scale64_parity.py" "$T/single/metrics.jsonl" "$T/tp4fsdp16/metrics.jsonl" "$STEPS" || fail=1
# Above 64 ranks the per-rank lists move to metrics_ranks.jsonl (src/train/metrics.c); when it is there
# every line must parse too.
if [ -f "$T/tp4fsdp16/metrics_ranks.jsonl" ]; then
  python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$T/tp4fsdp16/metrics_ranks.jsonl" \
    && echo "ok: metrics_ranks.jsonl is valid JSON lines" || { echo "FAIL: metrics_ranks.jsonl"; fail=1; }
fi
"$PORTATRAIN" topo --world 64 --tp 4 --fsdp 16 --model "$T/init" --per-device-train-batch-size 1 --seq-len 16 \
  --json >"$T/topo.json" 2>"$T/err" || { echo "FAIL: topo"; cat "$T/err"; exit 1; }
if python3 "$PT_SOURCE_DIR/tests/py/topo_bytes.py" "$T/topo.json" "$T/tp4fsdp16/metrics.jsonl" >"$T/tb" 2>&1; then
  echo "ok: topo's bytes per collective = the MPI counters in every step ($(python3 -c 'import json, sys
print(", ".join("%s %d" % kv for kv in sorted(json.load(open(sys.argv[1]))["comm_bytes_per_step"].items())))' "$T/topo.json"))"
else echo "FAIL: topo vs measured bytes at 64 ranks"; cat "$T/tb"; fail=1; fi
n_slices=$(ls "$T/tp4fsdp16/checkpoint-$STEPS"/rank*.safetensors 2>/dev/null | wc -l)
if [ -f "$T/tp4fsdp16/checkpoint-$STEPS/checkpoint.json" ] && [ "$n_slices" -ge 1 ] \
   && "$PORTATRAIN" ckpt verify "$T/tp4fsdp16/checkpoint-$STEPS" >"$T/v" 2>&1; then
  echo "ok: checkpoint-$STEPS written by 64 ranks ($n_slices slice files) and verified"
else echo "FAIL: checkpoint-$STEPS missing or unverifiable ($n_slices slice files)"; cat "$T/v" 2>/dev/null; fail=1; fi
if "$PORTATRAIN" compare "$T/single" "$T/tp4fsdp16" --profile fp32 >"$T/cmp" 2>&1; then
  echo "ok: portatrain compare reads the 64-rank run: $(grep -m1 -E 'ACCEPTED' "$T/cmp")"
else echo "FAIL: portatrain compare on the 64-rank run"; cat "$T/cmp"; fail=1; fi
exit $fail
