#!/usr/bin/env bash
# accept/report audit: what a user hits around the suite rather than inside it. A candidate backend with
# no device is refused before the baseline runs; a rerun into the same --output-dir never leaves an old
# report next to new runs.
set -u
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cd "$S"
fail=0
. "$S/tests/cli_check.sh"
# The shortest suite: cpu vs cpu (exact), 8 steps of 2 x 16 tokens, about 5 s.
A="--steps 8 --checkpoint-step 4 --recovery-save-steps 2 --eval-batches 1 --seq-len 16 --per-device-train-batch-size 2 --quiet"

# 1. opencl built but no OpenCL platform (the ICD loader pointed at an empty dir): refused as a
#    cuda backend without a device is, before any run, not REJECTED after the baseline has trained.
if "$B" devices | grep -q "^opencl  *not built"; then echo "ok: no opencl backend in this build (nothing to check)"
else
    mkdir -p "$T/no-icd"
    OCL_ICD_VENDORS="$T/no-icd" check 2 "portatrain: error: platform SPEC 'opencl:fp32': backend 'opencl': no OpenCL platform found" -- \
      "$B" accept --baseline cpu:fp32 --candidate opencl:fp32 $A --output-dir "$T/ocl"
    [ ! -e "$T/ocl" ] && echo "ok: nothing ran for an opencl SPEC without a platform" || { echo "FAIL: ran with no OpenCL platform"; fail=1; }
fi

exit $fail
