#!/usr/bin/env bash
# `portatrain topo` for Qwen3-MoE (docs/DISTRIBUTED.md, "Qwen3-MoE"), 2 ranks oversubscribed, on the golden
# MoE fixture (8 experts, top-2, layers 1-2 sparse, layer 0 dense):
#  - topo --ep 2 = measured: every step's all-gather, reduce-scatter and all-reduce bytes and the parameter
#    state of EP2 x FSDP2 (with and without accumulation) and EP2 x DP2 (EP over dp: the units gathered over
#    FSDP groups of one) equal metrics.jsonl's; the activation bytes lie between topo's balanced-routing
#    figure and that plus its worst-case growth, and some run does grow (uneven routing);
#  - the token all-to-all, which depends on routing: rank 0 sends the counts, its N x K rows out (forward
#    and backward: routing-independent) and the rows its experts received back (twice). A mirrored model
#    (expert e renamed E-1-e, the router's rows reversed) routes every token to the mirrored experts, so
#    its rank 0 receives exactly what rank 1 of the original received; the two ranks' rows received sum to
#    the rows sent, so original + mirror = 2 x topo's uniform-routing expectation, exactly, every step;
#    each run lies between topo's routing-independent part and its worst case, and the two differ from the
#    expectation (so the check sees routing);
#  - the sparse blocks' buffers in the activations: topo's moe_block_buffers equals the sizes
#    qwen3_moe.c's ensure_buffers allocates and its worst-case growth ep_grow's bound (re-derived here from
#    the config), and topo's activations for
#    the MoE model exceed those of its dense twin (same config, no experts) by exactly that;
#  - --ep is validated as train validates it (one clear error).
. "${PT_SOURCE_DIR:?}/tests/mpi_test.sh"
cfg="$PT_SOURCE_DIR/tests/fixtures/golden_moe/norm/config.json"
data="$PT_SOURCE_DIR/tests/fixtures/golden/untied/data.bin"
"$PORTATRAIN" init --config "$cfg" --seed 7 --output-dir "$T/init" >/dev/null 2>&1 || { echo "FAIL: init"; exit 1; }

# the mirrored model: same tensors, expert e's stored as expert E-1-e, the router's rows in reverse order
python3 - "$T/init" "$T/mirror" <<'EOF' || { echo "FAIL: mirrored model"; exit 1; }
import json, os, re, shutil, struct, sys
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst)
shutil.copy(os.path.join(src, "config.json"), dst)
c = json.load(open(os.path.join(src, "config.json")))
E = c.get("num_local_experts", c.get("num_experts"))
raw = open(os.path.join(src, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head, body = json.loads(raw[8:8 + n]), bytearray(raw[8 + n:])
out = {}
for k, v in head.items():
    m = re.match(r"(model\.layers\.\d+\.mlp\.experts\.)(\d+)(\..*)", k)
    if m: k = "%s%d%s" % (m.group(1), E - 1 - int(m.group(2)), m.group(3))
    elif re.match(r"model\.layers\.\d+\.mlp\.gate\.weight$", k):
        a, b = v["data_offsets"]
        row = (b - a) // v["shape"][0]
        rows = [body[a + i * row:a + (i + 1) * row] for i in range(v["shape"][0])]
        body[a:b] = b"".join(reversed(rows))
    out[k] = v
h = json.dumps(out).encode()
h += b" " * (-len(h) % 8)
open(os.path.join(dst, "model.safetensors"), "wb").write(struct.pack("<Q", len(h)) + h + bytes(body))
EOF

# run NAME MODEL ACC TOPO-AND-TRAIN-LAYOUT...: 3 steps, 4 rows x 16 tokens per rank, and topo's JSON for it
run() {
  local name=$1 model=$2 acc=$3; shift 3
  if ! "${MPIRUN[@]}" -np 2 "$PORTATRAIN" train --model "$model" --data "$data" --output-dir "$T/$name" --max-steps 3 \
      --seq-len 16 --per-device-train-batch-size 4 --gradient-accumulation-steps "$acc" --quiet "$@" >"$T/out" 2>&1; then
    echo "FAIL: $name run"; cat "$T/out"; fail=1; return 1
  fi
  "$PORTATRAIN" topo --world 2 --model "$model" --seq-len 16 --per-device-train-batch-size 4 \
    --gradient-accumulation-steps "$acc" --json "$@" >"$T/$name.json" 2>"$T/out" \
    || { echo "FAIL: $name topo"; cat "$T/out"; fail=1; return 1; }
  if python3 "$PT_SOURCE_DIR/tests/py/topo_audit.py" "$T/$name.json" "$T/$name/metrics.jsonl" >"$T/audit-$name"
  then echo "ok: topo = measured ($name: allreduce, allgather, reduce_scatter, state; activations $(tail -1 "$T/audit-$name"))"
  else echo "FAIL: topo vs measured ($name)"; cat "$T/audit-$name"; fail=1; return 1; fi
}

# alltoall NAME: original + mirror = 2 x expected every step; each within [routing-independent, worst case]
alltoall() {
  if python3 - "$T/$1.json" "$T/$1/metrics.jsonl" "$T/$1-mirror/metrics.jsonl" <<'EOF'
import json, sys
a = json.load(open(sys.argv[1]))["alltoall_bytes_per_step"]
orig = [json.loads(l)["comm_bytes"]["alltoall"] for l in open(sys.argv[2])]
mirr = [json.loads(l)["comm_bytes"]["alltoall"] for l in open(sys.argv[3])]
ok = len(orig) == len(mirr) == 3
for s, (x, y) in enumerate(zip(orig, mirr), 1):
    print("step %d: rank 0 %d, mirrored %d, sum %d; topo expected %d (x2 %d), routing-independent %d, worst %d"
          % (s, x, y, x + y, a["expected_uniform_routing"], 2 * a["expected_uniform_routing"],
             a["routing_independent"], a["worst_case"]))
    ok &= x + y == 2 * a["expected_uniform_routing"]
    ok &= all(a["routing_independent"] <= v <= a["worst_case"] for v in (x, y))
ok &= any(v != a["expected_uniform_routing"] for v in orig)  # routing is not balanced here: the check sees it
sys.exit(0 if ok else 1)
EOF
  then echo "ok: alltoall ($1): rank 0 + mirrored rank 0 = 2 x topo's uniform-routing expectation, within its bounds"
  else echo "FAIL: alltoall ($1)"; fail=1; fi
}

for l in ep2fsdp2:1:--fsdp:2 ep2fsdp2-acc2:2:--fsdp:2 ep2dp2:1:--dp:2; do
  IFS=: read -r name acc dim n <<<"$l"
  run "$name" "$T/init" "$acc" "$dim" "$n" --ep 2 && run "$name-mirror" "$T/mirror" "$acc" "$dim" "$n" --ep 2 \
    && alltoall "$name"
done

# the sparse blocks' buffers: ensure_buffers' sizes, re-derived (per sparse layer on the host probs, sel,
# start, ep_cnt, ep_start; on the backend logits, probs, topw, sel, three row index lists, xg, gate, up, act,
# eout; the shared scratch), rows R = N x K (balanced routing), and ep_grow's worst case (N x ep x min(K, E/ep)
# rows)
python3 - "$cfg" "$T/ep2fsdp2.json" <<'EOF' && echo "ok: moe_block_buffers = ensure_buffers' sizes" || { echo "FAIL: moe_block_buffers"; fail=1; }
import json, sys
c, t = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
E, K, C, I, L = c["num_local_experts"], c["num_experts_per_tok"], c["hidden_size"], c["moe_intermediate_size"], c["num_hidden_layers"]
sparse = sum(1 for l in range(L) if l not in c["mlp_only_layers"] and (l + 1) % c["decoder_sparse_step"] == 0)
N, ep = 4 * 16, t["ep"]
R = N * K
host = sparse * (4 * N * E + 4 * R + 4 * (E + 1) + (4 * E + 4 * (E + 1) if ep > 1 else 0))
host += 3 * 4 * R + 8 * (E + R) + (2 * 4 * R * C if ep > 1 else 0)
dev = sparse * (2 * 4 * N * E + 4 * R + 4 * 4 * R + 2 * 4 * R * C + 3 * 4 * R * I)
dev += 2 * 4 * R * C + 3 * 4 * R * I + 4 * N * E + 8 * (R + E)
grow = (N * ep * min(K, E // ep) - R) * (sparse * 4 * (C + 3 * I) + 4 * (2 * C + 3 * I) + 2 * 4 * C)
m = t["memory_bytes_per_rank"]
print("host %d + backend %d, growth up to %d; topo %d (host %d), %d" % (host, dev, grow, m["moe_block_buffers"],
      m["moe_block_host_buffers"], m["moe_block_growth_worst_case"]))
sys.exit(0 if (m["moe_block_buffers"], m["moe_block_host_buffers"], m["moe_block_growth_worst_case"]) == (host + dev, host, grow)
         and host > 0 and grow > 0 else 1)
EOF
# uneven routing grew the expert side of some run (the balanced size is not a bound the runs stay under)
if grep -h "^activation growth" "$T"/audit-* 2>/dev/null | awk '$3 > 0 {g = 1} END {exit !g}'; then
  echo "ok: a rank's experts received more than N x K rows and the expert-side buffers grew, within topo's bound"
else echo "FAIL: no run grew its expert-side buffers (the growth path is not exercised)"; fail=1; fi
python3 - "$cfg" "$T/dense.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
for k in ("num_local_experts", "num_experts_per_tok", "moe_intermediate_size", "mlp_only_layers", "decoder_sparse_step",
          "norm_topk_prob", "output_router_logits", "router_aux_loss_coef"):
    c.pop(k, None)
c["model_type"], c["architectures"] = "qwen3", ["Qwen3ForCausalLM"]
json.dump(c, open(sys.argv[2], "w"))
EOF
for m in "$cfg" "$T/dense.json"; do
  "$PORTATRAIN" topo --world 2 --fsdp 2 --config "$m" --seq-len 16 --per-device-train-batch-size 4 --json \
    >"$T/act-$(basename "$m")" 2>"$T/out" || { echo "FAIL: topo on $m"; cat "$T/out"; fail=1; }
done
python3 - "$T/act-config.json" "$T/act-dense.json" <<'EOF' && echo "ok: MoE activations = the dense twin's + the sparse blocks' buffers" || { echo "FAIL: MoE activations vs dense twin"; fail=1; }
import json, sys
moe, dense = (json.load(open(f))["memory_bytes_per_rank"] for f in sys.argv[1:3])
print(moe["activations"], dense["activations"], moe["moe_block_buffers"])
sys.exit(0 if moe["activations"] - dense["activations"] == moe["moe_block_buffers"] > 0 and dense["moe_block_buffers"] == 0 else 1)
EOF

# --ep: the rules train applies (pt_mesh_validate), the same one-line errors
check 1 "error: --ep 3: the 2 data ranks (fsdp 2 x dp 1) do not split" -- \
  "$PORTATRAIN" topo --world 2 --fsdp 2 --ep 3 --config "$cfg"
check 1 "error: --ep 16: num_experts 8 is not divisible by it" -- \
  "$PORTATRAIN" topo --world 16 --fsdp 16 --ep 16 --config "$cfg"
check 1 "error: --ep 2: expert parallelism needs a Qwen3-MoE model" -- \
  "$PORTATRAIN" topo --world 2 --fsdp 2 --ep 2 --config "$T/dense.json"
"${MPIRUN[@]}" -np 2 "$PORTATRAIN" train --model "$T/init" --data "$data" --output-dir "$T/bad" --max-steps 1 \
  --seq-len 16 --fsdp 2 --ep 3 >"$T/train.out" 2>&1
"$PORTATRAIN" topo --world 2 --fsdp 2 --ep 3 --model "$T/init" >"$T/topo.out" 2>&1
t_err=$(grep -m1 "error: --ep" "$T/topo.out"); r_err=$(grep -m1 "error: --ep" "$T/train.out")
if [ -n "$t_err" ] && [ "${r_err#*error: }" = "${t_err#*error: }" ]; then echo "ok: topo and train refuse --ep 3 alike"
else echo "FAIL: --ep 3: topo '$t_err', train '$r_err'"; fail=1; fi
exit $fail
