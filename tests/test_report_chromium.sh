#!/usr/bin/env bash
# Renders a report.json (the rejected fixture, or $PT_REPORT_JSON) and loads it in headless Chromium: the DOM must
# hold the SVG charts, a screenshot must not be blank, and the page must log
# no console/JS errors; an accept's report is checked further (its scorecard and reproduction block, below). Chromium missing is a failure (scripts/deps.sh installs it).
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

# An accept's own report (it has a reproduction block): the scorecard's cells, as the browser shows them, carry
# their units; an OpenCL candidate's compile time is a number; with PT_REPORT_RERUN=1 the block's command, run
# again into another directory, gives the same verdict.
if python3 -c "import json,sys; sys.exit(0 if 'reproduction' in json.load(open(sys.argv[1])) else 1)" "$T/report.json"; then
    row() { grep -o "<tr><td>$1</td><td>[^<]*</td><td>[^<]*</td>" "$T/dom.html" | head -1; }
    for m in "throughput:tokens/s" "step time (median):[0-9.e+-]* s" "checkpoint save:[0-9.e+-]* s" \
             "checkpoint restore:[0-9.e+-]* s" "total cost:[0-9.e+-]* USD" "tokens per dollar (training):tokens/USD" \
             "MFU (model FLOP/s / peak):[0-9.e+-]* %"; do
        r=$(row "${m%%:*}")
        echo "$r" | grep -q "<td>[0-9][^<]*${m#*:}</td><td>[0-9][^<]*${m#*:}</td>$" \
            || { echo "FAIL: scorecard row '${m%%:*}' lacks both numbers with '${m#*:}': $r"; exit 1; }
    done
    row "time to recover" | grep -q "<td>[0-9][^<]* s</td>$" || { echo "FAIL: scorecard: candidate's time to recover"; exit 1; }
    row "cost per accepted outcome" | grep -q "<td>\([0-9][^<]* USD\|no accepted outcome\)</td>$" \
        || { echo "FAIL: scorecard: candidate's cost per accepted outcome"; exit 1; }
    if grep -q '"backend": "opencl"' <(python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))['candidate']))" "$T/report.json"); then
        row "compile time (run time)" | grep -q "<td>[0-9][^<]* s</td>$" || { echo "FAIL: scorecard: opencl compile time"; exit 1; }
    fi
    grep -q "<pre id=\"command\">cd " "$T/dom.html" || { echo "FAIL: no reproduction command"; exit 1; }
    if [ "${PT_REPORT_RERUN:-0}" = 1 ]; then
        # the command as the page shows it, its --output-dir pointed elsewhere
        cmd=$(python3 -c "import html,re,sys; d=open(sys.argv[1]).read(); print(html.unescape(re.search(r'<pre id=\"command\">(.*?)</pre>', d, re.S).group(1)))" "$T/dom.html")
        want=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['verdict'])" "$T/report.json")
        got=$(bash -c "$cmd --output-dir '$T/rerun'" 2>&1 | sed -n 's/^verdict: \([A-Z]*\).*/\1/p')
        [ "$got" = "$want" ] || { echo "FAIL: the reproduction command gave '$got', the report says '$want'"; exit 1; }
        echo "ok: the reproduction command re-runs to $got"
    fi
fi
echo "test_report_chromium: ok"
