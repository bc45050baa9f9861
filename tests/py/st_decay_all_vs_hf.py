"""st_decay_all_vs_hf.py W0.safetensors HF.safetensors ALL.safetensors: after one step at lr 1e-2, weight decay
0.1 from the F32 weights W0, the --weight-decay-params hf and all runs have bit-identical matrices, and every
norm weight (1-D) differs by AdamW's decoupled decay alone: hf - all = lr x wd x w0, to fp32 rounding. Prints
the counts and each tensor that breaks it."""
import json
import struct
import sys


def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.pop("__metadata__", None)
    out = {}
    for name, t in head.items():
        assert t["dtype"] == "F32", (path, name, t["dtype"])
        a, b = t["data_offsets"]
        data = raw[8 + n + a:8 + n + b]
        out[name] = (t["shape"], data)
    return out


w0, hf, al = (tensors(p) for p in sys.argv[1:4])
lr_wd = 1e-2 * 0.1
ok, norms, mats = True, 0, 0
for name, (shape, data) in hf.items():
    other = al[name][1]
    if len(shape) >= 2:
        mats += 1
        if data != other:
            print(f"  {name}: a matrix differs between hf and all")
            ok = False
        continue
    norms += 1
    x0 = struct.unpack(f"<{len(data) // 4}f", w0[name][1])
    xh = struct.unpack(f"<{len(data) // 4}f", data)
    xa = struct.unpack(f"<{len(data) // 4}f", other)
    # hf - all = lr x wd x w0, up to a few fp32 roundings of numbers the size of w0
    worst = max(abs((h - a) - lr_wd * w) / max(abs(w), abs(h), 1e-30) for w, h, a in zip(x0, xh, xa))
    if data == other or worst > 5e-7:
        print(f"  {name}: hf - all is not lr x wd x w0 (worst {worst:.3g} relative to the weight)")
        ok = False
print(f"  {mats} matrices bit-identical, {norms} norm weights differ by lr x wd x w0")
sys.exit(0 if ok and norms > 0 and mats > 0 else 1)
