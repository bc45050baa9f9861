"""st_f16_matches.py DIR16 DIR32: prints True when every tensor of the float16 export DIR16 is dtype F16 and
holds the fp32 export DIR32's values rounded to nearest even half (struct 'e'), and DIR16/config.json says
float16; False otherwise."""
import glob
import json
import os
import struct
import sys


def tensors(d):
    out = {}
    for f in glob.glob(os.path.join(d, "*.safetensors")):
        raw = open(f, "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
        for k, v in json.loads(raw[8:8 + n]).items():
            if k != "__metadata__": out[k] = (v["dtype"], raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
    return out


h, f = tensors(sys.argv[1]), tensors(sys.argv[2])
ok = h.keys() == f.keys() and all(h[k][0] == "F16" for k in h)
for k in f:
    vals = struct.unpack("<%df" % (len(f[k][1]) // 4), f[k][1])
    ok = ok and h[k][1] == struct.pack("<%de" % len(vals), *vals)
print(ok and json.load(open(os.path.join(sys.argv[1], "config.json")))["torch_dtype"] == "float16")
