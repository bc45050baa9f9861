"""st_rename.py IN OUT FROM TO: OUT is IN with tensor FROM stored under the name TO (same bytes)."""
import json
import struct
import sys

raw = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n]); hdr[sys.argv[4]] = hdr.pop(sys.argv[3])
h = json.dumps(hdr).encode(); h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + raw[8 + n:])
