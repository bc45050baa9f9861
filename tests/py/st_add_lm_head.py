"""st_add_lm_head.py IN OUT FLIP: OUT is IN plus an lm_head.weight equal to model.embed_tokens.weight (its byte 5
flipped when FLIP is 1)."""
import json
import struct
import sys

raw = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n]); data = raw[8 + n:]
e = hdr["model.embed_tokens.weight"]; b, en = e["data_offsets"]
lm = bytearray(data[b:en])
if sys.argv[3] == "1": lm[5] ^= 0x01
hdr["lm_head.weight"] = {"dtype": e["dtype"], "shape": e["shape"], "data_offsets": [len(data), len(data) + len(lm)]}
h = json.dumps(hdr).encode(); h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + data + bytes(lm))
