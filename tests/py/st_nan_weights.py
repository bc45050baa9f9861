"""st_nan_weights.py IN.safetensors OUT.safetensors: OUT is IN with every data byte 0xff (every weight NaN)."""
import struct
import sys

b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
b[8 + n:] = b"\xff" * (len(b) - 8 - n)
open(sys.argv[2], "wb").write(b)
