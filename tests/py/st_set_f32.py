"""st_set_f32.py IN OUT TENSOR INDEX VALUE: OUT is IN with element INDEX of the F32 tensor TENSOR set to VALUE."""
import json
import struct
import sys

raw = bytearray(open(sys.argv[1], "rb").read()); n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n]); t = hdr[sys.argv[3]]
assert t["dtype"] == "F32"
o = 8 + n + t["data_offsets"][0] + 4 * int(sys.argv[4])
raw[o:o + 4] = struct.pack("<f", float(sys.argv[5]))
open(sys.argv[2], "wb").write(raw)
