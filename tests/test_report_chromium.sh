#!/usr/bin/env bash
# Renders a report.json (the rejected fixture, or $PT_REPORT_JSON) and loads it in headless Chromium: the DOM must
# hold the SVG charts, a screenshot must not be blank, and the page must log
# no console/JS errors. Chromium missing is a failure (scripts/deps.sh installs it).
set -euo pipefail
CHROME=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROME" ] || { echo "FAIL: chromium not installed (scripts/deps.sh)"; exit 1; }
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cp "${PT_REPORT_JSON:-$PT_SOURCE_DIR/tests/fixtures/report/rejected.json}" "$T/report.json"
"$PORTATRAIN" report "$T" >/dev/null
FLAGS=(--no-sandbox --headless --disable-gpu --disable-dev-shm-usage --user-data-dir="$T/profile" --no-first-run)
timeout 60 "$CHROME" "${FLAGS[@]}" --dump-dom "file://$T/report.html" > "$T/dom.html" 2>/dev/null
n=$(grep -o '<svg' "$T/dom.html" | wc -l)
[ "$n" -eq 6 ] || { echo "FAIL: rendered DOM has $n svg elements, want 6"; exit 1; }
timeout 60 "$CHROME" "${FLAGS[@]}" --enable-logging=stderr --v=0 --window-size=1000,2400 \
  --screenshot="$T/shot.png" "file://$T/report.html" 2> "$T/log.txt" >/dev/null
# Page errors are logged as CONSOLE lines (source: the page) or "Uncaught";
# Chromium's own container noise (dbus, gpu, sandbox) is ERROR: lines from C++ files.
if grep -E 'CONSOLE|Uncaught' "$T/log.txt"; then echo "FAIL: page console errors"; exit 1; fi
[ -s "$T/shot.png" ] || { echo "FAIL: no screenshot"; exit 1; }
[ -n "${PT_REPORT_SHOT:-}" ] && cp "$T/shot.png" "$PT_REPORT_SHOT"
python3 - "$T/shot.png" <<'PY'
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
PY
echo "test_report_chromium: ok"
