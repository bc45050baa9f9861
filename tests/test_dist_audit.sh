#!/usr/bin/env bash
# The distributed-features audit of 2026-12-05 (docs/DISTRIBUTED.md, "Audit"), 2-4 ranks oversubscribed:
#  - `topo` predicts the activation allocation, the parameter state and the bytes per step that a run
#    measures (metrics.jsonl) under activation checkpointing, another backend and a tied embedding
#    (tests/test_dist.sh covers the plain layouts);
#  - topo's hostfile: what mpirun refuses or reads otherwise is a one-line error naming the line; a
#    collective whose groups partly cross nodes is counted as inter-node (the worst group paces the step);
#  - ranks that read other data under the same path (node-local copies that differ) are refused at
#    start-up with one error naming the rank, instead of training on different data silently; a relative
#    --model missing on a rank, or resolved in other working directories, is named as that;
#  - a distributed metrics.jsonl record has every field of the single process's, with the same global
#    values (tokens counted once), and the output dir holds the same files (only rank 0 writes them;
#    each rank its own heartbeat);
#  - start-up memory: a rank streams the weights into its shards a block of rows at a time and never holds
#    the whole model (peak RSS of FSDP2 and TP2 ranks on a 241 MiB model, over the same layout's on the
#    0.1 MB fixture: state + activations + about one block), nor a whole embedding (a 128 MiB one under
#    4 MiB blocks), and topo says so; the streamed load keeps the frozen hashes, the tied lm_head checks and
#    the first loss whatever the block size (1000-byte blocks: 2-3 rows, across every shard boundary);
#  - the final HF save streams too: rank 0 gathers and writes one tensor at a time, never the whole model
#    (its lifetime peak RSS over the training peak: about two copies of the largest tensor, as topo says), and
#    writes bitwise what `export` writes from the run's last checkpoint (FSDP2, TP2, TP2 x FSDP2, tied, untied);
#  - a layout that cannot run (world size, heads vs tp, --mesh-order, bf16) is a usage error, exit 2, which
#    --supervise passes through instead of restarting the job;
#  - the reductions go in pieces (bounded MPI temporaries) with bitwise the same result;
#  - gathers past MPI's int counts go rank by rank in pieces (the real case, > 2 GiB, is
#    tests/manual/gather_big.c; here PT_TEST_GATHER_LIMIT makes the final model and the checkpoint
#    take that path): the same bytes as the one-call gather;
. "${PT_SOURCE_DIR:?}/tests/mpi_test.sh"
# ASan+UBSan: no LeakSanitizer in MPI ranks (as tests/test_dist.sh; exported, so --supervise's mpirun has it too)
[ -n "${PT_SANITIZED:-}" ] && export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
fixture="$PT_SOURCE_DIR/tests/fixtures/golden"
data="$fixture/untied/data.bin"
for kind in untied tied; do
  "$PORTATRAIN" init --config "$fixture/$kind/config.json" --seed 7 --output-dir "$T/init_$kind" >/dev/null 2>&1
done

# 1. topo = measured: name kind np tp fsdp dp batch accumulation [options for both topo and train]
topo_vs_run() {
  local name=$1 kind=$2 np=$3 tp=$4 fsdp=$5 dp=$6 b=$7 acc=$8; shift 8
  if ! "${MPIRUN[@]}" -np "$np" "$PORTATRAIN" train --model "$T/init_$kind" --data "$data" --output-dir "$T/$name" \
      --max-steps 2 --seq-len 16 --per-device-train-batch-size "$b" --gradient-accumulation-steps "$acc" --quiet \
      --tp "$tp" --fsdp "$fsdp" --dp "$dp" "$@" >"$T/out" 2>&1; then
    echo "FAIL: $name run"; cat "$T/out"; fail=1; return
  fi
  "$PORTATRAIN" topo --world "$np" --tp "$tp" --fsdp "$fsdp" --dp "$dp" --model "$T/init_$kind" --seq-len 16 \
    --per-device-train-batch-size "$b" --gradient-accumulation-steps "$acc" --json "$@" >"$T/topo.json" 2>"$T/out" \
    || { echo "FAIL: $name topo"; cat "$T/out"; fail=1; return; }
  if python3 "$PT_SOURCE_DIR/tests/py/topo_audit.py" "$T/topo.json" "$T/$name/metrics.jsonl" >"$T/out"
  then echo "ok: topo = measured ($name)"; else echo "FAIL: topo vs measured ($name)"; cat "$T/out"; fail=1; fi
}
topo_vs_run tp2-full untied 2 2 1 1 4 2 --activation-checkpointing full
topo_vs_run tp2fsdp2-full untied 4 2 2 1 2 2 --activation-checkpointing full
topo_vs_run tp2dp2-selective-cpu tied 4 2 1 2 2 2 --activation-checkpointing selective:every=2 --backend cpu
topo_vs_run fsdp2-op untied 2 1 2 1 4 1 --activation-checkpointing op
topo_vs_run tp2fsdp2 untied 4 2 2 1 2 1
check 2 "want none, full" -- "$PORTATRAIN" topo --world 2 --tp 2 --model "$T/init_untied" --activation-checkpointing most

# 2. hostfiles (8 ranks, TP2 x FSDP4)
topo8=("$PORTATRAIN" topo --world 8 --tp 2 --fsdp 4 --model "$T/init_untied" --seq-len 16 --per-device-train-batch-size 1)
hosts() { printf "$1" >"$T/hosts"; }
hosts 'a slots=4\na slots=4\n'; check 1 "hosts:2: host 'a' is already listed on line 1" -- "${topo8[@]}" --hosts "$T/hosts"
hosts 'a slots=4x\nb slots=4\n'; check 1 "hosts:1: 'slots=4x': the slot count must be a positive" -- "${topo8[@]}" --hosts "$T/hosts"
hosts 'a\nb\n'; check 1 "hosts:1: host 'a' has no slot count" -- "${topo8[@]}" --hosts "$T/hosts"
hosts 'a max_slots=4\n'; check 1 "hosts:1: host 'a' has no slot count" -- "${topo8[@]}" --hosts "$T/hosts"
hosts '# two nodes\na slots=4 max_slots=8\nb foo=4\n'; check 1 "hosts:3: unexpected 'foo=4'" -- "${topo8[@]}" --hosts "$T/hosts"
hosts 'a:\n'; check 1 "hosts:1: 'a:': the slot count" -- "${topo8[@]}" --hosts "$T/hosts"
hosts 'a slots=2\nb slots=2\n'; check 1 "the hosts have 4 slots for 8 ranks" -- "${topo8[@]}" --hosts "$T/hosts"
# 3 + 5 slots: rank 0's TP group stays on node a, the group of ranks 2-3 spans both nodes
hosts 'a slots=3\nb:5\r\nc slots=8\n'
check 0 "tp all-reduce (activations).*inter-node (1 of 4 groups cross nodes)" -- "${topo8[@]}" --hosts "$T/hosts"
check 0 "8 ranks = tp 2 x fsdp 4 x dp 1, placement innermost first tp,fsdp,dp, 2 node(s)" -- "${topo8[@]}" --hosts "$T/hosts"
"${topo8[@]}" --hosts "$T/hosts" --json >"$T/topo.json"
jcheck "$T/topo.json" 'r["wire_bytes_per_step_per_rank"]["intra_node"] == 0 and r["groups"]["tp"]["crossing_nodes"] == 1 and r["nodes"] == 2' \
  "3 + 5 slots: every collective counted inter-node"

# 3. the same --data path holding other files on rank 1 (its own working directory stands in for another
# node's disk): one error from rank 0 naming rank 1, every rank exits, nothing left running
mkdir -p "$T/n0" "$T/n1"
cp "$data" "$T/n0/data.bin"
python3 -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[-8] = (b[-8] + 1) % 100; open(sys.argv[2], "wb").write(b)' \
  "$data" "$T/n1/data.bin"
node_run() { # out: DP2, rank r in $T/n<r>
  local args=(train --model "$T/init_untied" --data data.bin --output-dir "$1" --max-steps 2 --seq-len 16
              --per-device-train-batch-size 4 --quiet --dp 2)
  "${MPIRUN[@]}" -np 1 -wdir "$T/n0" "$PORTATRAIN" "${args[@]}" : -np 1 -wdir "$T/n1" "$PORTATRAIN" "${args[@]}"
}
t0=$SECONDS
node_run "$T/nodes" >"$T/out" 2>&1; rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$(grep -c 'portatrain: error:' "$T/out")" -eq 1 ] && \
   grep -q "rank 1 read other files than rank 0: the data differs" "$T/out" && [ $((SECONDS - t0)) -lt 60 ]; then
  echo "ok: other data on rank 1 is refused"
else echo "FAIL: other data on rank 1 (rc $rc)"; cat "$T/out"; fail=1; fi
sleep 0.5
if pgrep -f "$T/" >/dev/null; then echo "FAIL: processes left"; pgrep -af "$T/"; fail=1; fi
# as a single process refused during set-up, no empty output directory is left behind (rank 0 had made it)
if [ -e "$T/nodes" ]; then echo "FAIL: the refused run left $T/nodes behind"; fail=1; else echo "ok: no output dir left"; fi
rm -f "$T/n1/data.bin"   # rank 1 cannot open it at all
node_run "$T/nodes" >"$T/out" 2>&1
if grep -q "rank 1: data.bin: cannot open" "$T/out" && [ ! -e "$T/nodes" ]; then echo "ok: missing data on rank 1 only"
else echo "FAIL: missing data on rank 1"; cat "$T/out"; ls -d "$T/nodes"; fail=1; fi
cp "$data" "$T/n1/data.bin"
if node_run "$T/nodes" >"$T/out" 2>&1 && [ "$(wc -l <"$T/nodes/metrics.jsonl")" -eq 2 ]; then echo "ok: identical copies train"
else echo "FAIL: identical copies"; cat "$T/out"; fail=1; fi
# a relative --model that only rank 0's working directory holds: named as not found on rank 1 (was: "rank 1 was
# started with other arguments than rank 0: model is "m" there", though every rank ran the same command); held
# by both, it resolves to other directories: named as such, with the fix (an absolute path)
model_run() { # out: DP2, rank r in $T/n<r>, --model m
  local args=(train --model m --data "$data" --output-dir "$1" --max-steps 2 --seq-len 16
              --per-device-train-batch-size 4 --quiet --dp 2)
  "${MPIRUN[@]}" -np 1 -wdir "$T/n0" "$PORTATRAIN" "${args[@]}" : -np 1 -wdir "$T/n1" "$PORTATRAIN" "${args[@]}"
}
cp -r "$T/init_untied" "$T/n0/m"
model_run "$T/nodes_m" >"$T/out" 2>&1
if grep -q "portatrain: error: --model m: not found on rank 1 (working directory $T/n1 there), found on rank 0" "$T/out" && \
   ! grep -q "other arguments" "$T/out" && [ ! -e "$T/nodes_m" ]; then echo "ok: a --model missing on rank 1 is named so"
else echo "FAIL: --model missing on rank 1"; cat "$T/out"; fail=1; fi
cp -r "$T/init_untied" "$T/n1/m"
model_run "$T/nodes_m" >"$T/out" 2>&1
if grep -q "portatrain: error: --model m is $T/n1/m on rank 1 (working directory $T/n1) but $T/n0/m on rank 0 .*give --model as an absolute path" "$T/out"; then
  echo "ok: a relative --model resolved in other working directories is named so"
else echo "FAIL: --model in other working directories"; cat "$T/out"; fail=1; fi
# a relative --output-dir resolved in other working directories (each rank would write its checkpoint shards
# into its own): refused before anything is written, exit 2 (was: trained, rank 1's shards in $T/n1/out)
out_args=(train --model "$T/init_untied" --data "$data" --output-dir out --max-steps 2 --save-steps 2 --seq-len 16
          --per-device-train-batch-size 4 --quiet --fsdp 2)
check 2 "portatrain: error: --output-dir out is $T/n1/out on rank 1 but $T/n0/out on rank 0: the ranks started in other directories.*give --output-dir as an absolute path" -- \
  "${MPIRUN[@]}" -np 1 -wdir "$T/n0" "$PORTATRAIN" "${out_args[@]}" : -np 1 -wdir "$T/n1" "$PORTATRAIN" "${out_args[@]}"
if [ -e "$T/n0/out" ] || [ -e "$T/n1/out" ]; then echo "FAIL: the refused run wrote an output dir"; fail=1; else echo "ok: nothing written"; fi
# an --output-dir rank 1 cannot see (its own mount namespace hides the directory's parent, as a node without
# the shared filesystem would): refused at start-up with exit 2, rank 0's new directory removed again
if unshare -m true 2>/dev/null; then
  mkdir -p "$T/shared"
  out_args=(train --model "$T/init_untied" --data "$data" --output-dir "$T/shared/out" --max-steps 2 --seq-len 16
            --per-device-train-batch-size 4 --quiet --fsdp 2)
  check 2 "portatrain: error: --output-dir $T/shared/out: rank 1 does not see the directory rank 0 created" -- \
    "${MPIRUN[@]}" -np 1 "$PORTATRAIN" "${out_args[@]}" : -np 1 unshare -m sh -c \
    'mount -t tmpfs none "$0" && exec "$@"' "$T/shared" "$PORTATRAIN" "${out_args[@]}"
  if [ -e "$T/shared/out" ]; then echo "FAIL: rank 0's output dir left behind"; fail=1; else echo "ok: no output dir left"; fi
else echo "ok: unshare -m not permitted here: the unshared output dir is not checked"; fi

# 4. metrics and files of DP2 x FSDP2 against the single process (the same global batch of 8 rows)
small=(train --model "$T/init_untied" --data "$data" --max-steps 2 --seq-len 16 --quiet)
"$PORTATRAIN" "${small[@]}" --output-dir "$T/m1" --per-device-train-batch-size 8 >"$T/out" 2>&1 || { cat "$T/out"; fail=1; }
"${MPIRUN[@]}" -np 4 "$PORTATRAIN" "${small[@]}" --output-dir "$T/m4" --per-device-train-batch-size 2 --dp 2 --fsdp 2 \
  >"$T/out" 2>&1 || { cat "$T/out"; fail=1; }
if python3 "$PT_SOURCE_DIR/tests/py/dist_metrics_fields.py" "$T/m1/metrics.jsonl" "$T/m4/metrics.jsonl" >"$T/out"
then echo "ok: distributed metrics have the single process's fields and values"; else echo "FAIL: metrics fields"; cat "$T/out"; fail=1; fi
files() { (cd "$1" && find . -type f ! -path './heartbeats/*' | sort); }
if [ "$(files "$T/m1")" = "$(files "$T/m4")" ] && [ "$(ls "$T/m4/heartbeats" | wc -l)" -eq 4 ]; then echo "ok: the same files (+ one heartbeat per rank)"
else echo "FAIL: output files differ"; diff <(files "$T/m1") <(files "$T/m4"); ls "$T/m4/heartbeats"; fail=1; fi

# 5. start-up memory: every rank read the whole HF model (hf_model_load), hashed it and cut its shards from it
# (pt_parallel_load_full): one full fp32 model per rank beside the training state, 30.5 GiB per rank for
# Qwen3-8B (before 2026-12-05 three). Now the weights stream into the shards one tensor at a time: the peak is
# the state + activations + about one tensor. FSDP2 and TP2 on a 241 MiB model (16 layers, largest tensor
# 4 MiB), each over the same layout's peak on the 0.1 MB fixture: the growth must stay under state +
# activations + topo's start-up buffers + 10% of the model (the old load: + 100% of it or more).
# 16 layers, every one full attention
python3 "$PT_SOURCE_DIR/tests/py/json_edit.py" "$fixture/untied/config.json" "$T/big.json" hidden_size=512 \
  intermediate_size=2048 num_hidden_layers=16 num_attention_heads=8 num_key_value_heads=4 head_dim=64 \
  layer_types="[$(printf '"full_attention", %.0s' {1..15})\"full_attention\"]"
for lay in fsdp tp; do
  "$PORTATRAIN" topo --world 2 "--$lay" 2 --config "$T/big.json" --seq-len 16 --per-device-train-batch-size 4 \
    --json >"$T/topo_big_$lay.json"
done
# topo's start-up buffers: the largest tensor (gate/up/down, 2048 x 512 fp32) on a host backend, untied
jcheck "$T/topo_big_fsdp.json" "r['memory_bytes_per_rank']['startup_load_buffers'] == 4 * 2048 * 512" \
  "topo reports the start-up buffers (one tensor, not the model)"
# each rank's lifetime peak RSS (KiB), final save included: $T/maxrss_NAME.RANK
# startup_growth EXTRA_MIB BASE_RUN RUN MODEL_DIR TOPO.json LABEL: the first step's peak RSS (the highest rank's)
# over the fixture's in the same layout must stay under the state + activations + topo's start-up buffers +
# 10% of the model + EXTRA_MIB
startup_growth() {
  python3 "$PT_SOURCE_DIR/tests/py/rss_growth_bound.py" "$1" "$2/metrics.jsonl" "$3/metrics.jsonl" "$(stat -c %s "$4/model.safetensors")" "$5" "$6"
}
# save_growth NAME MODEL_DIR TOPO.json LABEL: rank 0's lifetime peak RSS (rss_run's wrapper, the final HF save
# included) over its training peak in metrics.jsonl stays under topo's final-save buffers + 10% of the model
save_growth() {
  python3 "$PT_SOURCE_DIR/tests/py/rss_final_save_bound.py" "$T/rss_$1/metrics.jsonl" "$(cat "$T/maxrss_$1.0")" "$(stat -c %s "$2/model.safetensors")" "$3" "$4"
}
rss_run() { # name model layout...  ($PT_WEIGHT_BLOCK_BYTES, when set, reaches the ranks)
  local name=$1 model=$2; shift 2
  local fwd=(); [ -n "${PT_WEIGHT_BLOCK_BYTES:-}" ] && fwd=(-x PT_WEIGHT_BLOCK_BYTES)
  "${MPIRUN[@]}" "${fwd[@]}" -np 2 python3 "$PT_SOURCE_DIR/tests/py/maxrss.py" "$T/maxrss_$name" "$PORTATRAIN" train --model "$T/init_$model" --data "$data" --output-dir "$T/rss_$name" \
    --max-steps 1 --seq-len 16 --per-device-train-batch-size 4 --quiet "$@" >"$T/out" 2>&1 \
    || { echo "FAIL: rss run $name"; cat "$T/out"; fail=1; }
}
if [ -n "${PT_SANITIZED:-}" ]; then echo "ok: start-up memory not measured under ASan (its shadow memory is RSS)"
else
  "$PORTATRAIN" init --config "$T/big.json" --seed 1 --output-dir "$T/init_big" >/dev/null 2>&1
  for lay in fsdp tp; do
    rss_run "base_$lay" untied "--$lay" 2
    rss_run "big_$lay" big "--$lay" 2
    if startup_growth 0 "$T/rss_base_$lay" "$T/rss_big_$lay" "$T/init_big" "$T/topo_big_$lay.json" "$lay 2"
    then echo "ok: start-up memory, $lay 2"; else echo "FAIL: start-up memory, $lay 2"; fail=1; fi
    # the final HF save (after the last metrics record): rank 0's lifetime peak over its training peak stays
    # under topo's save buffers + 10% of the model (gathering the whole model: + 3 to 4 models, ~800 MiB)
    if save_growth big_$lay "$T/init_big" "$T/topo_big_$lay.json" "$lay 2"
    then echo "ok: final save memory, $lay 2"; else echo "FAIL: final save memory, $lay 2"; fail=1; fi
  done
fi
jcheck "$T/topo_big_fsdp.json" "r['memory_bytes_per_rank']['final_save_buffers_rank0'] == 2 * 4 * 2048 * 512" \
  "topo reports the final save's buffers on rank 0 (the largest block twice, not the model)"
# a 128 MiB embedding (and lm_head: vocabulary 65536 x 512, untied) streamed in 4 MiB blocks under FSDP2: the
# start-up peak grows by about one block, not one embedding (loading it whole: +247 MiB, 183 over the bound).
# + 32 MiB: the step's reductions go in 16 MiB pieces (a packing buffer, and MPI's temporary of a piece); in
# one message, OpenMPI's default reduce-scatter put a temporary of the embedding's whole 128 MiB gradient on
# rank 0 (120 MiB above rank 1): rank 0's peak must also stay within 32 MiB of rank 1's.
python3 "$PT_SOURCE_DIR/tests/py/json_edit.py" "$T/big.json" "$T/wide.json" vocab_size=65536 num_hidden_layers=2 \
  layer_types='["full_attention", "full_attention"]'
PT_WEIGHT_BLOCK_BYTES=4194304 "$PORTATRAIN" topo --world 2 --fsdp 2 --config "$T/wide.json" --seq-len 16 \
  --per-device-train-batch-size 4 --json >"$T/topo_wide.json"
jcheck "$T/topo_wide.json" "r['memory_bytes_per_rank']['final_save_buffers_rank0'] == 2 * 4 * 2048 * 512" \
  "topo: the final save's buffers are two 4 MiB blocks of the 65536-row embedding"
jcheck "$T/topo_wide.json" "r['memory_bytes_per_rank']['startup_load_buffers'] == 4 * 2048 * 512" \
  "topo: the start-up buffer is one 4 MiB block of the 65536-row embedding"
if [ -z "${PT_SANITIZED:-}" ]; then
  "$PORTATRAIN" init --config "$T/wide.json" --seed 1 --output-dir "$T/init_wide" >/dev/null 2>&1
  PT_WEIGHT_BLOCK_BYTES=4194304 rss_run wide_fsdp wide --fsdp 2
  if startup_growth 32 "$T/rss_base_fsdp" "$T/rss_wide_fsdp" "$T/init_wide" "$T/topo_wide.json" \
     "fsdp 2, 65536 x 512 embedding, 4 MiB blocks"
  then echo "ok: start-up memory, a block of the embedding at a time"; else echo "FAIL: start-up memory, wide embedding"; fail=1; fi
  # and the final save gathers it to rank 0 a 4 MiB block at a time (whole tensors: two 128 MiB buffers)
  if save_growth wide_fsdp "$T/init_wide" "$T/topo_wide.json" "fsdp 2, 65536 x 512 embedding, 4 MiB blocks"
  then echo "ok: final save memory, a block of the embedding at a time"; else echo "FAIL: final save memory, wide"; fail=1; fi
  jcheck "$T/rss_wide_fsdp/metrics.jsonl" "max(r['peak_rss_mib_per_rank']) - min(r['peak_rss_mib_per_rank']) <= 32" \
    "the reduce-scatter of a 128 MiB gradient in pieces: rank 0's peak within 32 MiB of rank 1's ($(python3 -c \
    "import json,sys; print(json.loads(open(sys.argv[1]).readline())['peak_rss_mib_per_rank'])" "$T/rss_wide_fsdp/metrics.jsonl") MiB)"
fi

# 5b. the streamed load keeps every check and the frozen hashes: the initial-weights and config sha256 of a
# checkpoint are the single process's under FSDP2 and TP2 (each rank hashes the tensors as they stream by); a
# tied model whose file also holds a differing lm_head.weight is refused with the single process's error; one
# storing the embedding only as lm_head.weight trains as the plain tied model does
# the final model a distributed run streams to rank 0 = `export` of its last (sharded) checkpoint, bitwise
same_as_export() { # run-dir step what
  rm -rf "$T/exported"
  if "$PORTATRAIN" export --checkpoint "$1/checkpoint-$2" --output-dir "$T/exported" >"$T/out" 2>&1 \
     && cmp "$1/model.safetensors" "$T/exported/model.safetensors" >>"$T/out" 2>&1 \
     && cmp "$1/config.json" "$T/exported/config.json" >>"$T/out" 2>&1
  then echo "ok: $3: the final model is bitwise the export of checkpoint-$2"
  else echo "FAIL: $3: the final model differs from the export of checkpoint-$2"; cat "$T/out"; fail=1; fi
}
loss1() { python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['loss'])" "$1/metrics.jsonl"; }
hashes() { python3 -c "import json,sys; m=json.load(open(sys.argv[1]))['state']['manifest']; print(m['config_sha256'], m['initial_weights_sha256'])" "$1/checkpoint-1/checkpoint.json"; }
hrun=(train --data "$data" --max-steps 1 --seq-len 16 --per-device-train-batch-size 2 --save-steps 1 --quiet)
for kind in untied tied; do
  "$PORTATRAIN" "${hrun[@]}" --model "$T/init_$kind" --output-dir "$T/h1_$kind" >"$T/out" 2>&1 || { cat "$T/out"; fail=1; }
  for lay in fsdp tp; do
    "${MPIRUN[@]}" -np 2 "$PORTATRAIN" "${hrun[@]}" --model "$T/init_$kind" --output-dir "$T/h_${lay}_$kind" "--$lay" 2 \
      >"$T/out" 2>&1 || { cat "$T/out"; fail=1; }
    if [ -n "$(hashes "$T/h1_$kind")" ] && [ "$(hashes "$T/h1_$kind")" = "$(hashes "$T/h_${lay}_$kind")" ]; then
      echo "ok: $lay 2, $kind: the config and initial-weights sha256 are the single process's"
    else echo "FAIL: $lay 2, $kind: hashes $(hashes "$T/h_${lay}_$kind") vs $(hashes "$T/h1_$kind")"; fail=1; fi
    same_as_export "$T/h_${lay}_$kind" 1 "$lay 2, $kind"
    # 1000-byte blocks (2-3 rows; FSDP's and TP's row splits fall inside blocks): the same hashes and loss
    PT_WEIGHT_BLOCK_BYTES=1000 "${MPIRUN[@]}" -x PT_WEIGHT_BLOCK_BYTES -np 2 "$PORTATRAIN" "${hrun[@]}" --model "$T/init_$kind" \
      --output-dir "$T/hb_${lay}_$kind" "--$lay" 2 >"$T/out" 2>&1 || { cat "$T/out"; fail=1; }
    if [ "$(hashes "$T/hb_${lay}_$kind")" = "$(hashes "$T/h1_$kind")" ] && [ -n "$(loss1 "$T/hb_${lay}_$kind")" ] \
       && [ "$(loss1 "$T/hb_${lay}_$kind")" = "$(loss1 "$T/h_${lay}_$kind")" ]
    then echo "ok: $lay 2, $kind, 1000-byte load blocks: the same hashes and first loss ($(loss1 "$T/hb_${lay}_$kind"))"
    else echo "FAIL: $lay 2, $kind, 1000-byte blocks: loss $(loss1 "$T/hb_${lay}_$kind") vs $(loss1 "$T/h_${lay}_$kind")"; fail=1; fi
    # and its final model, gathered to rank 0 in 1000-byte blocks, is bitwise the export of its checkpoint
    same_as_export "$T/hb_${lay}_$kind" 1 "$lay 2, $kind, 1000-byte save blocks"
  done
done
for v in ne nelast lmonly; do
  mkdir -p "$T/tied_$v"; cp "$T/init_tied/config.json" "$T/tied_$v/"
  python3 "$PT_SOURCE_DIR/tests/py/st_tied_variant.py" "$T/init_tied/model.safetensors" "$T/tied_$v/model.safetensors" "$v"
done
check 1 "portatrain: error: $T/tied_ne/model.safetensors: lm_head.weight differs from model.embed_tokens.weight but config.json has tie_word_embeddings true" -- \
  "${MPIRUN[@]}" -np 2 "$PORTATRAIN" "${hrun[@]}" --model "$T/tied_ne" --output-dir "$T/h_ne" --fsdp 2
# the same in 1000-byte blocks, the differing value in the last one
check 1 "portatrain: error: $T/tied_nelast/model.safetensors: lm_head.weight differs from model.embed_tokens.weight" -- \
  env PT_WEIGHT_BLOCK_BYTES=1000 "${MPIRUN[@]}" -x PT_WEIGHT_BLOCK_BYTES -np 2 "$PORTATRAIN" "${hrun[@]}" --model "$T/tied_nelast" \
  --output-dir "$T/h_nelast" --fsdp 2
"${MPIRUN[@]}" -np 2 "$PORTATRAIN" "${hrun[@]}" --model "$T/tied_lmonly" --output-dir "$T/h_lmonly" --fsdp 2 \
  >"$T/out" 2>&1 || { cat "$T/out"; fail=1; }
if [ "$(loss1 "$T/h_lmonly")" = "$(loss1 "$T/h_fsdp_tied")" ] && [ "$(hashes "$T/h_lmonly")" = "$(hashes "$T/h_fsdp_tied")" ]
then echo "ok: fsdp 2, tied, only lm_head.weight stored: the same loss and hashes"
else echo "FAIL: fsdp 2, tied lm_head only: loss $(loss1 "$T/h_lmonly") vs $(loss1 "$T/h_fsdp_tied")"; fail=1; fi

# a backend whose memory is not host memory (cuda-sim) keeps a host copy of its shards while the weights
# stream and uploads it once: FSDP2's first loss is the single process's on that backend
if "$PORTATRAIN" devices 2>/dev/null | grep -q "^cuda-sim:"; then
  sim=(train --model "$T/init_tied" --data "$data" --max-steps 1 --seq-len 16 --quiet --backend cuda-sim)
  "$PORTATRAIN" "${sim[@]}" --per-device-train-batch-size 4 --output-dir "$T/sim1" >"$T/out" 2>&1 || { cat "$T/out"; fail=1; }
  "${MPIRUN[@]}" -np 2 "$PORTATRAIN" "${sim[@]}" --per-device-train-batch-size 2 --fsdp 2 --output-dir "$T/sim2" \
    >"$T/out" 2>&1 || { cat "$T/out"; fail=1; }
  if python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if abs(a - b) <= 1e-7 * a else 1)" \
     "$(loss1 "$T/sim1")" "$(loss1 "$T/sim2")"; then echo "ok: fsdp 2 on cuda-sim: the single process's first loss"
  else echo "FAIL: fsdp 2 on cuda-sim: loss $(loss1 "$T/sim2") vs $(loss1 "$T/sim1")"; fail=1; fi
else echo "ok: no cuda-sim backend in this build (the device-memory start-up is not checked)"; fi

# 6. impossible layouts exit 2 (usage), under mpirun and under --supervise (one attempt, no restarts)
lay=(train --model "$T/init_untied" --data "$data" --max-steps 2 --seq-len 16 --quiet)
check 2 "tp 2 x fsdp 2 x dp 1 = 4 ranks, but the job has 2" -- "${MPIRUN[@]}" -np 2 "$PORTATRAIN" "${lay[@]}" \
  --output-dir "$T/lay1" --tp 2 --fsdp 2
check 2 "mesh-order 'tp,tp,dp': want a permutation" -- "${MPIRUN[@]}" -np 2 "$PORTATRAIN" "${lay[@]}" \
  --output-dir "$T/lay2" --tp 2 --mesh-order tp,tp,dp
check 2 "precision bf16 runs on a single process" -- "${MPIRUN[@]}" -np 2 "$PORTATRAIN" "${lay[@]}" \
  --output-dir "$T/lay5" --dp 2 --precision bf16
check 2 "num_attention_heads\|num_key_value_heads" -- "${MPIRUN[@]}" -np 3 "$PORTATRAIN" "${lay[@]}" --output-dir "$T/lay3" --tp 3
check 2 "but the job has 2" -- timeout -k 5 120 "$PORTATRAIN" "${lay[@]}" --output-dir "$T/lay4" --tp 2 --fsdp 2 --supervise \
  --launcher "mpirun -np 2 --oversubscribe" --max-restarts 2 --restart-backoff 0.01
if grep -q "giving up\|restart" "$T/out"; then echo "FAIL: --supervise restarted an impossible layout"; cat "$T/out"; fail=1
else echo "ok: --supervise passes the layout error through (no restart)"; fi

# 7. the piecewise gather writes bitwise what the one-call gather writes (final model and checkpoint)
for lim in 0 1000; do
  PT_TEST_GATHER_LIMIT=$lim "${MPIRUN[@]}" -x PT_TEST_GATHER_LIMIT -np 4 "$PORTATRAIN" train --model "$T/init_untied" \
    --data "$data" --output-dir "$T/gather$lim" --max-steps 2 --save-steps 2 --seq-len 16 --per-device-train-batch-size 4 \
    --tp 2 --fsdp 2 --quiet >"$T/out" 2>&1 || { echo "FAIL: gather run $lim"; cat "$T/out"; fail=1; }
done
check 0 "same" -- sh -c "cmp '$T/gather0/model.safetensors' '$T/gather1000/model.safetensors' && \
  for r in 0 1 2 3; do cmp '$T/gather0/checkpoint-2/rank0000'\$r.safetensors '$T/gather1000/checkpoint-2/rank0000'\$r.safetensors || exit 1; done && echo same"
same_as_export "$T/gather0" 2 "tp 2 x fsdp 2, untied"
# the reductions in 64-byte pieces (TP's all-reduces and FSDP's reduce-scatters cut into thousands of
# messages, the reduce-scatter's pieces packed): bitwise the same final model (groups of 2: a + b)
PT_MPI_PIECE_BYTES=64 "${MPIRUN[@]}" -x PT_MPI_PIECE_BYTES -np 4 "$PORTATRAIN" train --model "$T/init_untied" \
  --data "$data" --output-dir "$T/piece64" --max-steps 2 --seq-len 16 --per-device-train-batch-size 4 \
  --tp 2 --fsdp 2 --quiet >"$T/out" 2>&1 || { echo "FAIL: piece run"; cat "$T/out"; fail=1; }
check 0 "same" -- sh -c "cmp '$T/gather0/model.safetensors' '$T/piece64/model.safetensors' && echo same"

[ "$fail" -eq 0 ] && echo "test_dist_audit: all checks passed"
exit "$fail"
