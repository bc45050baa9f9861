#!/usr/bin/env bash
# A resume of a job of several ranks checks the checkpoint's checksums once between them (each rank its share
# of the files, src/train/trainer.c verify_resume_shared) instead of every rank reading every file; a corrupt
# file must still be caught by every rank alike. 4 ranks FSDP4 save checkpoints 2 and 4; then:
#  - a clean resume of checkpoint-4 as TP2 x FSDP2 continues as the single process does (steps 5-6);
#  - checkpoint-4's rank00003.safetensors corrupted (its size kept: only a checksum sees it; in the share of
#    rank 3 alone): `latest` falls back to checkpoint-2 on every rank and steps 3-6 match the single process;
#  - the same corrupt checkpoint named explicitly: every rank refuses it, the error names the file.
set -uo pipefail
: "${PORTATRAIN:?}" "${PT_SOURCE_DIR:?}"
if ! command -v mpirun >/dev/null; then echo "SKIP: mpirun not found (scripts/deps.sh installs openmpi-bin)"; exit 77; fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
. "$PT_SOURCE_DIR/tests/mpi_env.sh"
[ -n "${PT_SANITIZED:-}" ] && export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
fail=0
"$PORTATRAIN" init --config "$PT_SOURCE_DIR/tests/scale/tp4.json" --seed 11 --output-dir "$T/init" >/dev/null \
  || { echo "FAIL: init"; exit 1; }
args=(train --model "$T/init" --data "$PT_SOURCE_DIR/tests/fixtures/golden/untied/data.bin" --seq-len 16
      --learning-rate 3e-3 --lr-scheduler-type constant --weight-decay 0.1 --quiet)  # the lr of a step must not
# depend on --max-steps: the runs that save stop at step 4, the reference runs 6
"$PORTATRAIN" "${args[@]}" --max-steps 6 --output-dir "$T/single" --per-device-train-batch-size 4 2>"$T/err" \
  || { echo "FAIL: single-process run"; cat "$T/err"; exit 1; }
mpi() { local np=$1 rows=$2; shift 2; timeout -k 5 120 mpirun --oversubscribe -np "$np" "$PORTATRAIN" "${args[@]}" \
  --per-device-train-batch-size "$rows" "$@"; }
mpi 4 1 --fsdp 4 --max-steps 4 --save-steps 2 --output-dir "$T/run" >"$T/out" 2>&1 \
  || { echo "FAIL: 4-rank run"; tail -20 "$T/out"; exit 1; }

# the steps of a resumed run against the single process: the first resumed step and every loss within 1e-6
same_as_single() {  # DIR FIRST_STEP
  python3 - "$T/single/metrics.jsonl" "$1/metrics.jsonl" "$2" <<'EOF'
import json, sys
ref = {r["step"]: r for r in map(json.loads, open(sys.argv[1]))}
got = [json.loads(l) for l in open(sys.argv[2])]
first = int(sys.argv[3])
resumed = [r for r in got if "restore_time_s" in r]
if not resumed or resumed[0]["step"] != first:
    sys.exit("the resumed run's first step is %s, expected %d" % (resumed[0]["step"] if resumed else None, first))
for r in got:
    if r["step"] < first: continue
    rel = abs(r["loss"] - ref[r["step"]]["loss"]) / abs(ref[r["step"]]["loss"])
    if rel > 1e-6: sys.exit("step %d: loss %.9g, single process %.9g" % (r["step"], r["loss"], ref[r["step"]]["loss"]))
print("steps %d-%d match the single process" % (first, got[-1]["step"]))
EOF
}

cp -r "$T/run" "$T/clean"
if mpi 4 2 --tp 2 --fsdp 2 --max-steps 6 --resume-from-checkpoint latest --output-dir "$T/clean" >"$T/out" 2>&1 \
   && same_as_single "$T/clean" 5 >"$T/r" 2>&1; then echo "ok: clean resume of checkpoint-4 as TP2 x FSDP2: $(cat "$T/r")"
else echo "FAIL: clean resume"; cat "$T/r"; tail -20 "$T/out"; fail=1; fi

cp -r "$T/run" "$T/corrupt"
python3 - "$T/corrupt/checkpoint-4/rank00003.safetensors" <<'EOF'
import os, sys
with open(sys.argv[1], "r+b") as f:  # a byte of the last tensor's data: the size and header stay valid
    f.seek(os.path.getsize(sys.argv[1]) - 3)
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 0x5a]))
EOF
if mpi 4 1 --fsdp 4 --max-steps 6 --resume-from-checkpoint latest --output-dir "$T/corrupt" >"$T/out" 2>&1 \
   && same_as_single "$T/corrupt" 3 >"$T/r" 2>&1; then
  echo "ok: a corrupt file in rank 3's share: every rank fell back to checkpoint-2: $(cat "$T/r")"
else echo "FAIL: fallback past a corrupt checkpoint-4"; cat "$T/r"; tail -20 "$T/out"; fail=1; fi
if grep -q "rank00003.safetensors.*checksum" "$T/out"; then echo "ok: the fallback warning names the corrupt file"
else echo "FAIL: no warning naming rank00003.safetensors"; tail -20 "$T/out"; fail=1; fi

cp -r "$T/corrupt" "$T/explicit"
mpi 4 1 --fsdp 4 --max-steps 6 --resume-from-checkpoint "$T/corrupt/checkpoint-4" --output-dir "$T/explicit" \
  >"$T/out" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && grep -q "rank00003.safetensors.*checksum" "$T/out"; then
  echo "ok: the corrupt checkpoint named explicitly is refused (exit $rc): $(grep -m1 'error' "$T/out")"
else echo "FAIL: explicit corrupt checkpoint: exit $rc"; tail -20 "$T/out"; fail=1; fi
exit $fail
