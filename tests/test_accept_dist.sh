#!/usr/bin/env bash
# accept with parallel layouts (docs/ACCEPT.md): a platform SPEC with tp/fsdp/dp runs each of its trainings
# as an MPI job of tp x fsdp x dp ranks through --launcher, on the same global batch as the other platform;
# its checkpoints restore in the single process and back (resharded), its recovery supervises the MPI job
# (a rank killed, the job restarted from the newest checkpoint), and its phases are billed per rank.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}
if ! command -v mpirun >/dev/null; then echo "SKIP: mpirun not found (scripts/deps.sh installs openmpi-bin)"; exit 77; fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cd "$S"
fail=0
. "$S/tests/cli_check.sh"
. "$S/tests/mpi_env.sh"
L="mpirun --oversubscribe"
# under ASan+UBSan the ranks keep address and UB checking but not LeakSanitizer (OpenMPI's own allocations
# at exit, as in test_dist.sh); the suite itself keeps it
[ -n "${PT_SANITIZED:-}" ] && L="env ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 $L"
G="$S/tests/fixtures/golden/untied"
A="--steps 16 --checkpoint-step 8 --recovery-save-steps 4 --eval-batches 1 --seq-len 16 --per-device-train-batch-size 4 --warmup-steps 2 --quiet --model $G --train-data $G/data.bin --eval-data $G/data.bin"

# 1. single process vs FSDP2: the candidate's 2 ranks take 2 rows each of the 4-row batch
check 0 "verdict: ACCEPTED" -- "$B" accept --baseline cpu:fp32 --candidate cpu:fp32:fsdp=2 $A --launcher "$L" --output-dir "$T/f"
for run in candidate recovery portability/candidate_from_baseline/run; do
    jcheck "$T/f/$run/train_args.json" "r['parallel']['world_size']==2 and r['parallel']['fsdp']==2 and r['per_device_train_batch_size']==2" \
        "  the $run run was a 2-rank FSDP job with 2 rows a rank"
done
jcheck "$T/f/baseline/train_args.json" "'parallel' not in r and r['per_device_train_batch_size']==4" "  the baseline a single process with 4 rows"
jcheck "$T/f/report.json" "r['candidate']['ranks']==2 and r['candidate']['layout']=='tp=1 dp=1 fsdp=2' and '2 ranks' in r['candidate']['device'] and r['baseline']['ranks']==1" \
    "  the report names the candidate's layout and ranks"
jcheck "$T/f/report.json" "r['convergence']['profile']=='fp32' and all(p['ok'] for p in r['portability'])" \
    "  judged with the fp32 profile; its checkpoints restore both ways (resharded)"
jcheck "$T/f/report.json" "(x:=r['recovery'])['ok'] and x['restarts']>=1 and x['final_weights_identical'] and x['fault_rank'] in (0, 1)" \
    "  the MPI job whose rank was killed recovered, bit-identical to the uninterrupted candidate"
grep -q -- "--inject kill:rank=[01]:step=" "$T/f/logs/recovery.log" && echo "ok:   one rank was killed" || { echo "FAIL: no one-rank kill in the recovery's command"; fail=1; }
# billing: a candidate phase holds 2 ranks at the same per-rank price as the baseline's single process
jcheck "$T/f/report.json" "(rows:={x['item']: x for x in r['cost']['rows']}) and rows['candidate training']['ranks']==2 and rows['baseline training']['ranks']==1 and abs(rows['candidate training']['price_per_hour']-2*rows['baseline training']['price_per_hour'])<1e-12 and rows['candidate eval']['ranks']==1" \
    "  the candidate's training is billed for 2 ranks, its eval for 1"
# the manifest records the layout; compare judges the rows a micro-step reads over all ranks, so FSDP2 with 4
# rows a rank (8 a micro-step) is another experiment than the single process with 4, named as such
jcheck "$T/f/candidate/manifest.json" "(p:=r['platform'])['parallel']=={'tp': 1, 'dp': 1, 'fsdp': 2} and p['world_size']==2" \
    "  the candidate's manifest records its layout (was: tp 1, dp 1, fsdp 1, world 1 for every run)"
jcheck "$T/f/baseline/manifest.json" "r['platform']['world_size']==1" "  the baseline's one process"
check 0 "verdict: ACCEPTED" -- "$B" compare "$T/f/baseline" "$T/f/candidate" --profile fp32
read -r -a MPI <<<"$L"
timeout -k 5 120 "${MPI[@]}" -np 2 "$B" train --backend cpu --model "$G" --data "$G/data.bin" --output-dir "$T/f8" --fsdp 2 \
  --max-steps 16 --seq-len 16 --per-device-train-batch-size 4 --learning-rate 3e-3 --warmup-steps 2 --lr-scheduler-type cosine \
  --weight-decay 0.1 --max-grad-norm 1 --seed 42 --quiet || { echo "FAIL: fsdp2 train"; fail=1; }
check 2 "verdict: REFUSED (frozen input frozen.hyperparameters.global_micro_batch_size differs: 4 vs 8;" -- "$B" compare "$T/f/baseline" "$T/f8"

# 2. a TP2 baseline (a tensor-sharded checkpoint read by the single process, and back)
check 0 "verdict: ACCEPTED" -- "$B" accept --baseline cpu:fp32:tp=2 --candidate cpu:fp32 $A --launcher "$L" --output-dir "$T/t"
jcheck "$T/t/baseline/train_args.json" "r['parallel']['tp']==2 and r['per_device_train_batch_size']==4" "  the baseline was a TP2 job with the whole batch on each rank"
jcheck "$T/t/report.json" "r['verdict']=='ACCEPTED' and r['baseline']['layout']=='tp=2 dp=1 fsdp=1'" "  the report names the baseline's layout"

# 3. refused before any run: a batch the data ranks do not divide, a launcher that is not there
check 2 "portatrain: error: accept: --per-device-train-batch-size 3: platform cpu:fp32:dp=2 splits each batch over 2 data ranks" -- \
  "$B" accept --baseline cpu:fp32 --candidate cpu:fp32:dp=2 ${A/--per-device-train-batch-size 4/--per-device-train-batch-size 3} --launcher "$L" --output-dir "$T/odd"
check 2 "portatrain: error: accept: --launcher 'no-such-mpirun -x': not found on PATH (platform cpu:fp32:tp=2 runs 2 ranks" -- \
  "$B" accept --baseline cpu:fp32 --candidate cpu:fp32:tp=2 $A --launcher "no-such-mpirun -x" --output-dir "$T/nol"
for d in odd nol; do [ ! -e "$T/$d" ] && echo "ok: nothing ran ($d)" || { echo "FAIL: $d ran"; fail=1; }; done
check 2 "platform SPEC 'cpu:fp32:tp=64:fsdp=128': tp x dp x fsdp = 8192 ranks, more than 4096" -- \
  "$B" accept --baseline cpu:fp32 --candidate cpu:fp32:tp=64:fsdp=128 $A --output-dir "$T/big"

exit $fail
