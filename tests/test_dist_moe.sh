#!/usr/bin/env bash
# Qwen3-MoE under the parallel runtime (docs/DISTRIBUTED.md, "Qwen3-MoE"), 2-4 ranks oversubscribed, on the
# golden MoE fixture (8 experts, top-2, layer 0 dense, norm_topk_prob, output_router_logits with coefficient
# 0.1, so the load-balancing loss steers every step), layouts FSDP2, DP2, TP2 (experts split like the dense
# MLP, the router replicated), TP2 x FSDP2, and expert parallelism borrowed from the data ranks: EP2 x FSDP2
# and EP2 x DP2 (2 ranks), EP2 x TP2 x FSDP2 and EP2 inside FSDP4 (4 ranks):
#  - layout parity: every layout against the single process on the same global batch (one micro-batch per
#    step, so the global micro-batch is the single process's batch): the step-1 loss within 1e-6 relative,
#    20 steps within 1e-5 relative, the same tokens;
#  - with gradient accumulation the load-balancing loss is over the global micro-batch (every data rank's
#    micro-batch i), which holds the single process's micro-batch i: FSDP2, DP2 and EP2 x FSDP2 keep parity
#    with the single process;
#  - resharding: the step-10 checkpoint of every layout resumes in every other one (EP: a set of pairs) and
#    steps 11-20 keep parity;
#  - EP moves its tokens by all-to-all (counted), and a bad --ep is one clear error.
. "${PT_SOURCE_DIR:?}/tests/mpi_test.sh"
STEPS=20; GLOBAL=8; ACC=1

"$PORTATRAIN" init --config "$PT_SOURCE_DIR/tests/fixtures/golden_moe/norm/config.json" --seed 7 \
  --output-dir "$T/init" >/dev/null 2>&1 || { echo "FAIL: init"; exit 1; }
data="$PT_SOURCE_DIR/tests/fixtures/golden/untied/data.bin"

# name np tp fsdp dp ep
LAYOUTS="fsdp2:2:1:2:1:1 dp2:2:1:1:2:1 tp2:2:2:1:1:1 tp2fsdp2:4:2:2:1:1"
EP_LAYOUTS="ep2fsdp2:2:1:2:1:2 ep2dp2:2:1:1:2:2 ep2tp2fsdp2:4:2:2:1:2 ep2fsdp4:4:1:4:1:2"

train() { # name np tp fsdp dp ep out [extra...]
  local name=$1 np=$2 tp=$3 fsdp=$4 dp=$5 ep=$6 out=$7; shift 7
  local B=$((GLOBAL / ACC / (fsdp * dp)))
  local args=(train --model "$T/init" --data "$data" --output-dir "$out" --max-steps $STEPS --seq-len 16
              --per-device-train-batch-size $B --gradient-accumulation-steps $ACC --learning-rate 3e-3
              --warmup-steps 2 --weight-decay 0.1 --quiet "$@")
  if [ "$name" = single ]; then "$PORTATRAIN" "${args[@]}"
  else "${MPIRUN[@]}" -np "$np" "$PORTATRAIN" "${args[@]}" --tp "$tp" --fsdp "$fsdp" --dp "$dp" --ep "$ep"; fi
}
parity() { python3 "$PT_SOURCE_DIR/tests/py/layout_parity.py" "$1/metrics.jsonl" "$2/metrics.jsonl" "${3:-1}"; }

train single 1 1 1 1 1 "$T/single" --save-steps 10 >"$T/out" 2>&1 || { echo "FAIL: single-process run"; cat "$T/out"; exit 1; }
for l in $LAYOUTS $EP_LAYOUTS; do
  IFS=: read -r name np tp fsdp dp ep <<<"$l"
  train "$name" "$np" "$tp" "$fsdp" "$dp" "$ep" "$T/$name" --save-steps 10 >"$T/out" 2>&1 \
    || { echo "FAIL: $name run"; cat "$T/out"; fail=1; continue; }
  if parity "$T/single" "$T/$name" >"$T/out"; then echo "ok: $name parity with the single process"
  else echo "FAIL: $name parity"; cat "$T/out"; fail=1; fi
done

# accumulation: 2 micro-batches of 4 global rows per step; each data rank takes its slice of each global
# micro-batch, so every layout forms the single process's micro-batches (the load-balancing loss, per
# micro-batch, sees the same tokens)
ACC=2
for l in single:1:1:1:1:1 fsdp2:2:1:2:1:1 dp2:2:1:1:2:1 ep2fsdp2:2:1:2:1:2; do
  IFS=: read -r name np tp fsdp dp ep <<<"$l"
  train "$name" "$np" "$tp" "$fsdp" "$dp" "$ep" "$T/acc-$name" >"$T/out" 2>&1 || { echo "FAIL: acc $name run"; cat "$T/out"; fail=1; }
done
for name in fsdp2 dp2 ep2fsdp2; do
  if parity "$T/acc-single" "$T/acc-$name" >"$T/out"; then echo "ok: accumulation: $name parity with the single process"
  else echo "FAIL: accumulation $name vs the single process"; cat "$T/out"; fail=1; fi
done
ACC=1

# resharding: every dense-expert layout's step-10 checkpoint continues in every other one; EP checkpoints
# (each rank writes its own experts) to and from one process, FSDP, TP and the other EP layouts
ALL="single:1:1:1:1:1 $LAYOUTS $EP_LAYOUTS"
PAIRS="single:ep2fsdp2 ep2fsdp2:single fsdp2:ep2fsdp2 ep2fsdp2:fsdp2 ep2tp2fsdp2:single single:ep2tp2fsdp2
       ep2dp2:tp2 tp2fsdp2:ep2dp2 ep2fsdp4:ep2tp2fsdp2 ep2fsdp2:ep2fsdp4"
for src in single $(for l in $LAYOUTS $EP_LAYOUTS; do echo "${l%%:*}"; done); do
  for l in $ALL; do
    IFS=: read -r name np tp fsdp dp ep <<<"$l"
    [ "$name" = "$src" ] && continue
    case "$src $name" in *ep2*) [[ " $(echo $PAIRS) " == *" $src:$name "* ]] || continue;; esac
    out="$T/re/$src-to-$name"
    if ! train "$name" "$np" "$tp" "$fsdp" "$dp" "$ep" "$out" --resume-from-checkpoint "$T/$src/checkpoint-10" >"$T/out" 2>&1; then
      echo "FAIL: resume $src -> $name"; cat "$T/out"; fail=1; continue
    fi
    if parity "$T/single" "$out" 11 >"$T/out"; then echo "ok: $src checkpoint resumes in $name"
    else echo "FAIL: $src -> $name parity"; cat "$T/out"; fail=1; fi
  done
done

# EP's all-to-all is counted; each rank's checkpoint file holds only its own experts
check 0 "alltoall ok" -- python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
assert all(x["comm_bytes"]["alltoall"] > 0 for x in r)
print("alltoall ok")' "$T/ep2fsdp2/metrics.jsonl"
check 0 "own experts ok" -- python3 -c '
import json, struct, sys
def names(p):
    f = open(p, "rb"); n = struct.unpack("<Q", f.read(8))[0]; return set(json.loads(f.read(n))) - {"__metadata__"}
a, b = (names(sys.argv[1] + "/rank%05d.safetensors" % r) for r in (0, 1))
ea = {n for n in a if "model/" in n and ".experts." in n}; eb = {n for n in b if "model/" in n and ".experts." in n}
assert ea and eb and not (ea & eb), (sorted(ea)[:3], sorted(eb)[:3])
assert all(".experts.%d." % e in " ".join(ea) for e in range(4)) and all(".experts.%d." % e in " ".join(eb) for e in range(4, 8))
print("own experts ok")' "$T/ep2fsdp2/checkpoint-10"

# a bad --ep: one clear error from rank 0
base=(train --model "$T/init" --data "$data" --output-dir "$T/err_out" --max-steps 2 --seq-len 16 --quiet)
check 2 "num_experts 8 is not divisible by it" -- "${MPIRUN[@]}" -np 3 "$PORTATRAIN" "${base[@]}" --dp 3 --ep 3
check 2 "do not split into expert-parallel groups" -- "${MPIRUN[@]}" -np 2 "$PORTATRAIN" "${base[@]}" --tp 2 --ep 2

[ "$fail" -eq 0 ] && echo "test_dist_moe: all checks passed"
exit "$fail"
