#!/usr/bin/env bash
# NCCL device collectives of cuda ranks (docs/DISTRIBUTED.md, "NCCL"), under mpirun:
#  - on >= 2 GPUs: `train --backend cuda` with TP2, FSDP2 and DP2 (2 ranks; TP2xFSDP2 on 4 when there
#    are 4 GPUs) against the same layouts on cpu-ref ranks (host MPI): every step's loss within 1e-4
#    relative, the same tokens and global batch; rank 0 says its groups run on NCCL; the byte counters of
#    every step equal `portatrain topo`'s prediction; two TP2 runs give bitwise the same losses (NCCL's
#    ring pinned, docs/DISTRIBUTED.md);
#  - on one GPU: NCCL does not allow one device twice in a communicator, so two ranks on the GPU must
#    fall back to the host path with a warning and still match cpu-ref; with PT_NCCL_SAME_GPU=1 NCCL is
#    asked anyway and must fail in one line (or, should a future NCCL accept it, match cpu-ref); then the
#    test reports SKIP (exit 77): NCCL itself needs two GPUs.
# Without a GPU, in a build with NCCL: `portatrain devices` names NCCL's version, and an NCCL that cannot
# be loaded (PT_NCCL_LIBRARY pointed elsewhere) is one line there, not a failure.
# Exit 77 with "no CUDA device" when the build has no cuda backend or finds no GPU, and when mpirun or
# NCCL is missing.
set -uo pipefail
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
. "$S/tests/cli_check.sh"
fail=0

"$B" devices >"$T/devices" 2>&1
# Without a GPU still: a build with NCCL names its version, and an NCCL that cannot be loaded is one
# line in devices (the binary starts; the ranks would keep the host path), not a failure.
if grep -q "^nccl  *NCCL [0-9]" "$T/devices"; then
    PT_NCCL_LIBRARY="$T/no-such-libnccl.so" check 0 "^nccl  *cannot load NCCL: .*no-such-libnccl.so" -- "$B" devices
    PT_NCCL_LIBRARY=/bin/sh check 0 "^nccl  *cannot load NCCL" -- "$B" devices
    [ "$fail" -eq 0 ] || exit 1
fi
cuda_line=$(grep -E "^cuda(:[0-9]+)? " "$T/devices" | head -1)
if [ -z "$cuda_line" ] || grep -qiE "no CUDA device|not built" <<<"$cuda_line"; then
    echo "SKIP test_nccl: no CUDA device (${cuda_line:-this build has no cuda backend})"; exit 77
fi
if ! command -v mpirun >/dev/null; then echo "SKIP test_nccl: mpirun not found (the NCCL path runs under MPI)"; exit 77; fi
nccl_line=$(grep "^nccl " "$T/devices")
if ! grep -q "^nccl  *NCCL [0-9]" <<<"$nccl_line"; then echo "SKIP test_nccl: ${nccl_line:-no nccl line in devices}"; exit 77; fi
if command -v nvidia-smi >/dev/null; then ngpu=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU ")
else ngpu=$(grep -cE "^cuda:[0-9]+ " "$T/devices"); fi
[ "${ngpu:-0}" -ge 1 ] || ngpu=1
echo "$cuda_line"; echo "$nccl_line"; echo "GPUs: $ngpu"

. "$PT_SOURCE_DIR/tests/mpi_env.sh"
MPIRUN=(timeout -k 5 300 mpirun --oversubscribe -x PT_NCCL_SAME_GPU -x PT_NCCL -x LD_LIBRARY_PATH)
export PT_NCCL_SAME_GPU=0 PT_NCCL=1 LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
STEPS=10; GLOBAL=8; ACC=2
fix="$S/tests/fixtures/golden/untied"
"$B" init --config "$fix/config.json" --seed 7 --output-dir "$T/init" >/dev/null 2>&1 || { echo "FAIL: init"; exit 1; }

train() { # backend np tp fsdp dp out [extra...]: stderr (rank 0's notes) in out.log
    local be=$1 np=$2 tp=$3 fsdp=$4 dp=$5 out=$6; shift 6
    "${MPIRUN[@]}" -np "$np" "$B" train --backend "$be" --model "$T/init" --data "$fix/data.bin" --output-dir "$out" \
        --max-steps $STEPS --seq-len 16 --per-device-train-batch-size $((GLOBAL / ACC / (fsdp * dp))) \
        --gradient-accumulation-steps $ACC --learning-rate 3e-3 --warmup-steps 2 --weight-decay 0.1 \
        --tp "$tp" --fsdp "$fsdp" --dp "$dp" "$@" >"$out.log" 2>&1
}
# parity REF RUN LABEL: every step's loss within 1e-4 relative, same tokens and global batch
parity() {
    python3 "$PT_SOURCE_DIR/tests/py/nccl_parity.py" "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" "$STEPS"
}
# topo_bytes NP TP FSDP DP RUN: the bytes counted in every step = topo's prediction
topo_bytes() {
    "$B" topo --world "$1" --tp "$2" --fsdp "$3" --dp "$4" --model "$T/init" --seq-len 16 \
        --per-device-train-batch-size $((GLOBAL / ACC / ($3 * $4))) --gradient-accumulation-steps $ACC --json >"$T/topo.json" \
        || { echo "FAIL: topo"; fail=1; return; }
    if python3 "$PT_SOURCE_DIR/tests/py/topo_bytes.py" "$T/topo.json" "$5/metrics.jsonl"
    then echo "ok: topo bytes = measured bytes ($5)"; else echo "FAIL: topo vs measured ($5)"; fail=1; fi
}

LAYOUTS="tp2:2:2:1:1 fsdp2:2:1:2:1 dp2:2:1:1:2"
[ "$ngpu" -ge 4 ] && LAYOUTS="$LAYOUTS tp2fsdp2:4:2:2:1"
[ "$ngpu" -ge 2 ] || LAYOUTS="tp2:2:2:1:1"
for l in $LAYOUTS; do
    IFS=: read -r name np tp fsdp dp <<<"$l"
    train cpu-ref "$np" "$tp" "$fsdp" "$dp" "$T/ref-$name" --quiet || { echo "FAIL: cpu-ref $name"; cat "$T/ref-$name.log"; fail=1; }
done

if [ "$ngpu" -ge 2 ]; then
    for l in $LAYOUTS; do
        IFS=: read -r name np tp fsdp dp <<<"$l"
        out="$T/cuda-$name"
        train cuda "$np" "$tp" "$fsdp" "$dp" "$out" || { echo "FAIL: cuda $name"; cat "$out.log"; fail=1; continue; }
        group=${name%%[0-9]*}  # the group that communicates in this layout: tp, fsdp or dp
        if grep -q "device collectives: NCCL .* for.*$group" "$out.log"; then echo "ok: $name runs on NCCL"
        else echo "FAIL: $name: rank 0 does not report NCCL for $group"; cat "$out.log"; fail=1; fi
        parity "$T/ref-$name" "$out" "cuda $name (NCCL)" || fail=1
        topo_bytes "$np" "$tp" "$fsdp" "$dp" "$out"
    done
    train cuda 2 2 1 1 "$T/cuda-tp2-again" || { echo "FAIL: second cuda tp2 run"; fail=1; }
    if cmp -s <(python3 -c 'import json,sys; [print(repr(json.loads(l)["loss"])) for l in open(sys.argv[1])]' "$T/cuda-tp2/metrics.jsonl") \
              <(python3 -c 'import json,sys; [print(repr(json.loads(l)["loss"])) for l in open(sys.argv[1])]' "$T/cuda-tp2-again/metrics.jsonl"); then
        echo "ok: two cuda tp2 runs on NCCL have bitwise the same losses"
    else echo "FAIL: cuda tp2 on NCCL is not run-to-run deterministic"; fail=1; fi
    [ "$fail" -eq 0 ] && echo "test_nccl: all checks passed"
    exit "$fail"
fi

# One GPU: two ranks share it. portatrain sees the duplicate device and keeps the host path.
out="$T/cuda-shared"
if train cuda 2 2 1 1 "$out"; then
    if grep -q "use the same GPU" "$out.log" && ! grep -q "device collectives: NCCL" "$out.log"; then
        echo "ok: two ranks on one GPU fall back to the host path: $(grep -m1 "same GPU" "$out.log")"
    else echo "FAIL: two ranks on one GPU: no fallback warning"; cat "$out.log"; fail=1; fi
    parity "$T/ref-tp2" "$out" "cuda tp2, two ranks on one GPU (host path)" || fail=1
    topo_bytes 2 2 1 1 "$out"
else echo "FAIL: cuda tp2 with two ranks on one GPU"; cat "$out.log"; fail=1; fi
# NCCL's own answer to one device twice in a communicator (documented as unsupported).
out="$T/cuda-same-gpu"
MPIRUN[3]=120; export PT_NCCL_SAME_GPU=1   # NCCL may hang instead of failing: a shorter limit
train cuda 2 2 1 1 "$out"; rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "portatrain: error: NCCL .* failed" "$out.log"; then
    echo "ok: NCCL refuses one GPU twice in a communicator (rc $rc): $(grep -m1 "portatrain: error: NCCL" "$out.log")"
elif [ "$rc" -eq 0 ]; then
    echo "note: this NCCL accepted two ranks on one GPU; checking the result"
    parity "$T/ref-tp2" "$out" "cuda tp2 on NCCL, two ranks on one GPU" || fail=1
else echo "FAIL: NCCL with one GPU twice: rc $rc without the one-line NCCL error"; tail -20 "$out.log"; fail=1; fi
[ "$fail" -eq 0 ] || exit 1
echo "SKIP test_nccl: NCCL device collectives need >= 2 GPUs, this machine has $ngpu (the host-path fallback for two ranks on one GPU passed)"
exit 77
