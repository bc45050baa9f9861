#!/usr/bin/env bash
# Installs the Debian packages the build and tests need. Idempotent: when
# everything is present it only runs dpkg-query (well under a second).
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config   # toolchain
  libcjson-dev                       # JSON (configs, safetensors headers, manifests)
  libssl-dev                         # SHA-256 (OpenSSL EVP) for run manifests and frozen-input hashes
  libxxhash-dev                      # XXH3-128 checksums of checkpoint tensors (fast enough not to slow saves)
  libpcre2-dev                       # tokenizer pre-tokenizer regex (UTF + UCP + JIT)
  libutf8proc-dev                    # Unicode NFC normalisation for the tokenizer
  libopenblas-dev                    # BLAS for the fast CPU backend
  libdnnl-dev                        # oneDNN: bf16 matmuls on AMX / AVX512-BF16 for the cpu backend (--precision bf16)
  openmpi-bin libopenmpi-dev         # MPI (mpirun, collectives) for multi-rank CPU training (src/dist)
  ocl-icd-opencl-dev opencl-headers  # OpenCL loader + headers for the opencl backend
  pocl-opencl-icd                    # PoCL: an OpenCL CPU device, so the opencl backend and its tests run anywhere
  clang libclang-rt-14-dev libomp-dev  # libFuzzer + sanitizer runtimes, OpenMP for clang
  chromium                           # headless render check of report.html (tests/test_report_chromium.sh)
  python3                            # PNG decode in the same test (zlib, no extra modules)
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
