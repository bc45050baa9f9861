#!/usr/bin/env bash
# accept on Qwen3-MoE (configs/tiny-moe.json, docs/ACCEPT.md "Qwen3-MoE"): cpu vs cpu-ref is ACCEPTED with
# identical expert loads; two routing slips of the cpu backend are REJECTED by the step-1 audit naming the
# sparse layer where they show: top-k weights not renormalised (the block output of layers.1.mlp, its expert
# load identical) and top-k ties broken to the higher expert index (the expert load of layers.1, the first
# sparse layer). The init is upcycled: expert 0 of every sparse layer is a copy of expert 1, router row
# included, as when a dense MLP is copied into every expert; so the two tie EXACTLY for every token, which is
# the only way a tie rule can show. With the MLPs copied too, the tie slip leaves every activation value
# unchanged: only the expert load (and then which expert's weights get the gradient) differs.
# Tiny config, 8 steps of 2 x 16 tokens.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cd "$S"
fail=0
. "$S/tests/cli_check.sh"
A="--steps 8 --checkpoint-step 4 --recovery-save-steps 2 --eval-batches 1 --seq-len 16 --per-device-train-batch-size 2 --quiet"

"$B" init --config configs/tiny-moe.json --output-dir "$T/init" --seed 42 >/dev/null || { echo "FAIL: init"; exit 1; }
python3 - "$T/init/model.safetensors" <<'PY' || { echo "FAIL: upcycling the init"; exit 1; }
import json, struct, sys
path = sys.argv[1]
data = bytearray(open(path, 'rb').read())
n = struct.unpack('<Q', data[:8])[0]
hdr, base = json.loads(data[8:8 + n]), 8 + n
def span(name):
    a, b = hdr[name]['data_offsets']
    return base + a, base + b
layers = sorted({int(k.split('.')[2]) for k in hdr if k.endswith('.mlp.gate.weight')})
assert layers, 'no sparse layer'
for l in layers:
    p = f'model.layers.{l}.mlp.'
    a, b = span(p + 'gate.weight')
    row = (b - a) // hdr[p + 'gate.weight']['shape'][0]
    data[a:a + row] = data[a + row:a + 2 * row]  # router row of expert 0 := expert 1's
    for w in ('gate_proj', 'up_proj', 'down_proj'):
        (s0, e0), (s1, e1) = span(f'{p}experts.0.{w}.weight'), span(f'{p}experts.1.{w}.weight')
        data[s0:e0] = data[s1:e1]
open(path, 'wb').write(bytes(data))
PY
M="--model $T/init"

# 1. the control: ACCEPTED; the audit compared each sparse layer's expert load, identical on both
check 0 "verdict: ACCEPTED" -- "$B" accept --baseline cpu-ref:fp32 --candidate cpu:fp32 $M $A --output-dir "$T/ok"
R="$T/ok/report.json"
jcheck "$R" "(a:=r['audit'])['verdict']=='pass' and [x['layer'] for x in a['expert_load']]==[1,2] and all(x['ok'] and x['baseline']==x['candidate'] for x in a['expert_load'])" \
    "the control's audit passed with identical expert loads in sparse layers 1 and 2"
jcheck "$R" "(n:=[f['name'] for f in r['audit']['forward']])[n.index('layers.1.post_attention_layernorm') + 1:][:3]==['layers.1.mlp.expert_load','layers.1.mlp','layers.1.output'] and 'layers.0.mlp.expert_load' not in n" \
    "  in forward order: layers.1's post-attention norm, expert load, MoE block output, output; none for dense layer 0"
for f in report.html report.md; do
    grep -q "Step-1 audit: expert load" "$T/ok/$f" && echo "ok: $f has the expert-load table" || { echo "FAIL: no expert-load table in $f"; fail=1; }
done

# 2. top-k weights not renormalised: the routing is the same, the block output of the first sparse layer is not
PT_FAULT_KERNEL=moe_no_renorm check 1 "audit: forward statistics differ first at layers.1.mlp by .* identical up to layers.1.mlp.expert_load" -- \
    "$B" accept --baseline cpu-ref:fp32 --candidate cpu:fp32 $M $A --output-dir "$T/nr" --baseline-run "$T/ok/baseline"
jcheck "$T/nr/report.json" "r['audit']['first_forward']=='layers.1.mlp' and r['audit']['expert_load'][0]['ok']" \
    "  no renormalisation: layers.1.mlp differs first, its expert load identical"

# 3. ties to the higher expert index: the first sparse layer's expert load differs (experts 0 and 1 swap tokens)
PT_FAULT_KERNEL=moe_topk_ties_high check 1 "audit: forward statistics differ first at layers.1.mlp.expert_load by" -- \
    "$B" accept --baseline cpu-ref:fp32 --candidate cpu:fp32 $M $A --output-dir "$T/th" --baseline-run "$T/ok/baseline"
jcheck "$T/th/report.json" "(l:=r['audit']['expert_load'][0])['layer']==1 and not l['ok'] and l['baseline'].split()[2:]==l['candidate'].split()[2:] and l['baseline']!=l['candidate']" \
    "  ties high: in layer 1 only experts 0 and 1 (the tied pair) differ in load"

exit $fail
