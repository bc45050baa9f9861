"""png_not_blank.py SHOT.png: the screenshot (an 8-bit RGB/RGBA PNG, decoded with the standard library) has at
least 20 colours and 3% non-white pixels (sampled every other row and column): the page is not blank."""
import struct, sys, zlib
d = open(sys.argv[1], "rb").read()
assert d[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
i, idat = 8, b""
while i < len(d):
    n, t = struct.unpack(">I4s", d[i:i+8]); c = d[i+8:i+8+n]; i += 12 + n
    if t == b"IHDR": w, h, bd, ct = struct.unpack(">IIBB", c[:10])
    elif t == b"IDAT": idat += c
assert bd == 8 and ct in (2, 6), f"unexpected PNG format {bd}/{ct}"
bpp = 3 if ct == 2 else 4; raw = zlib.decompress(idat); stride = w * bpp
prev = bytearray(stride); colours = set(); nonwhite = 0; p = 0
for y in range(h):
    f = raw[p]; line = bytearray(raw[p+1:p+1+stride]); p += 1 + stride
    for x in range(stride):
        a = line[x-bpp] if x >= bpp else 0; b = prev[x]; c = prev[x-bpp] if x >= bpp else 0
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + b) & 255
        elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
        elif f == 4:
            pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    prev = line
    if y % 2 == 0:
        for x in range(0, stride, bpp * 2):
            px = bytes(line[x:x+3]); colours.add(px)
            nonwhite += px != b"\xff\xff\xff"
frac = nonwhite / ((h + 1) // 2 * ((w + 1) // 2))
print(f"screenshot {w}x{h}: {len(colours)} colours, {frac:.1%} non-white")
assert len(colours) >= 20 and frac >= 0.03, "screenshot looks blank"
