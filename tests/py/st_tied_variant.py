"""st_tied_variant.py IN OUT VARIANT: OUT is IN (a tied model) with lm_head.weight stored: VARIANT lmonly renames
the embedding to it; otherwise a copy of the embedding with one byte flipped (byte 5 for ne, else the third
last); the header's __metadata__ dropped."""
import json, struct, sys
raw = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n]); data = raw[8 + n:]
hdr.pop("__metadata__", None)
if sys.argv[3] == "lmonly":
    hdr["lm_head.weight"] = hdr.pop("model.embed_tokens.weight")
else:
    e = hdr["model.embed_tokens.weight"]; b, en = e["data_offsets"]
    lm = bytearray(data[b:en]); lm[5 if sys.argv[3] == "ne" else -3] ^= 0x01
    hdr["lm_head.weight"] = {"dtype": e["dtype"], "shape": e["shape"], "data_offsets": [len(data), len(data) + len(lm)]}
    data += bytes(lm)
h = json.dumps(hdr).encode(); h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + data)
