"""st_shape.py FILE TENSOR: prints TENSOR's shape from FILE's safetensors header, as a Python list."""
import json
import struct
import sys

raw = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
print(json.loads(raw[8:8 + n])[sys.argv[2]]["shape"])
