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
python3 "$PT_SOURCE_DIR/tests/py/png_not_blank.py" "$T/shot.png"
echo "test_report_chromium: ok"
