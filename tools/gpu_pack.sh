#!/usr/bin/env bash
# tools/gpu_pack.sh: run HERE, before the device call that runs tools/gpu_check.sh on the GPU machine.
# That machine has CUDA, cmake and PyTorch but none of the -dev packages portatrain builds against,
# and nothing can be fetched there; so this builds here and packs what the check needs into .gpupack/
# (git-ignored; the device call carries it):
#   build-gpupack/            Release build, PT_CUDA=ON, CUDA arch 90 (H100/H200), oneDNN off (its 38 MiB
#                             buy nothing on the GPU machine: the cpu baseline is fp32 on OpenBLAS),
#                             MPI off (no mpirun there: one GPU, single-process runs)
#   .gpupack/pack.tar.xz      bin/  portatrain and the GPU test binaries that exist (test_backend_parity,
#                                   test_cuda_sim)
#                             lib/  every shared library they load (ldd) that is not glibc's, not the
#                                   driver's (libcuda) and not cuBLAS/NCCL: those (~570 and ~210 MiB) do
#                                   not fit in the 64 MiB that travels and are found on the GPU machine
#                                   (its CUDA toolkit or PyTorch's nvidia/* wheels) by gpu_check.sh
#                             lib/fallback/  libstdc++, libgcc_s, libgomp, libz, libudev: used there only
#                                   where the system lacks that soname
#                             data/demo/  the demo shards and tokenizer (accept's default experiment)
#                             MANIFEST.sha256  sha256 of every file above (checked there)
#   .gpupack/MANIFEST.sha256  the same list, readable without unpacking
#   .gpupack/INFO             commit, date, build flags, toolchain, the newest glibc symbol needed, sizes
# Exits 1 when the build fails or what travels (working tree + .gpupack) would pass 60 MiB.
#   bash tools/gpu_pack.sh            # then the device call: see docs/RESULTS.md, "GPU (issue 9)"
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BUILD=${GPUPACK_BUILD:-build-gpupack}
PACK=.gpupack
JOBS=${JOBS:-$(nproc)}
LIMIT_MIB=60

# Without MPI: the GPU machine has no mpirun (a Debian libmpi could not join its MPI anyway), and
# OpenMPI's libevent is the one library that would need glibc 2.36 there.
flags=(-DCMAKE_BUILD_TYPE=Release -DPT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPT_DNNL_LIB=PT_DNNL_LIB-NOTFOUND
       -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON)
mkdir -p "$BUILD"
echo "gpu_pack: configuring $BUILD (${flags[*]})"
cmake -S . -B "$BUILD" "${flags[@]}" >"$BUILD/gpu_pack.cmake.log" 2>&1 || { cat "$BUILD/gpu_pack.cmake.log"; exit 1; }
grep -iE "warning|nccl|cuda" "$BUILD/gpu_pack.cmake.log" | grep -v "^--.*Looking" | head -20 || true
t0=$SECONDS
bins=(portatrain)
targets=$(cmake --build "$BUILD" --target help 2>/dev/null)
for t in test_backend_parity test_cuda_sim; do grep -q "\.\.\. $t\$" <<<"$targets" && bins+=("$t"); done
cmake --build "$BUILD" -j"$JOBS" --target "${bins[@]}" >"$BUILD/gpu_pack.build.log" 2>&1 || { tail -40 "$BUILD/gpu_pack.build.log"; exit 1; }
echo "gpu_pack: built ${bins[*]} in $((SECONDS - t0)) s"
"$BUILD/portatrain" devices | grep -qE "^cuda(:[0-9]+)? " \
    || echo "gpu_pack: WARNING: this portatrain has no cuda backend yet (devices lists none); packing it anyway"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib/fallback" "$stage/data"
for b in "${bins[@]}"; do cp "$BUILD/$b" "$stage/bin/"; done

# Shared libraries: glibc's and the driver's come from the GPU machine; cuBLAS and NCCL too (size).
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so|libcuda\.so|libnvidia|libcublas\.so|libcublasLt\.so|libnccl\.so)'
fallback='^(libstdc\+\+\.so|libgcc_s\.so|libgomp\.so|libz\.so|libudev\.so)'
declare -A seen=()
for b in "${bins[@]}"; do
    while read -r so path; do
        [ -n "$path" ] && [ -z "${seen[$so]:-}" ] || continue
        seen[$so]=1
        [[ $so =~ $skip ]] && continue
        if [[ $so =~ $fallback ]]; then cp -L "$path" "$stage/lib/fallback/$so"; else cp -L "$path" "$stage/lib/$so"; fi
    done < <(ldd "$BUILD/$b" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
done
missing=$(for b in "${bins[@]}"; do ldd "$BUILD/$b"; done | grep "not found" | sort -u || true)
[ -z "$missing" ] || { echo "gpu_pack: unresolved libraries here: $missing"; exit 1; }

# The demo data accept's default experiment trains on (data/demo is git-ignored).
[ -d data/demo/shards/train ] || bash scripts/fetch_demo_data.sh --portatrain "$BUILD/portatrain"
mkdir -p "$stage/data/demo"
cp -rL data/demo/shards data/demo/qwen3-tokenizer "$stage/data/demo/"
[ -f data/demo/SOURCES.txt ] && cp -L data/demo/SOURCES.txt "$stage/data/demo/"

(cd "$stage" && find . -type f ! -name MANIFEST.sha256 -print0 | sort -z | xargs -0 sha256sum > MANIFEST.sha256)
rm -rf "$PACK"
mkdir -p "$PACK"
cp "$stage/MANIFEST.sha256" "$PACK/"
XZ_OPT="-6 -T$JOBS" tar -C "$stage" -cJf "$PACK/pack.tar.xz" .

newest_glibc() { for f in "$@"; do objdump -T "$f" 2>/dev/null; done | grep -o "GLIBC_[0-9.]*" | sort -uV | tail -1; }
glibc=$(newest_glibc "$stage"/bin/* "$stage"/lib/*.so*)
glibc_fb=$(newest_glibc "$stage"/lib/fallback/*)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$([ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && echo clean || echo dirty)
if git rev-parse --git-dir >/dev/null 2>&1; then
    tree_bytes=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
else  # not a git checkout: everything but the build, data and pack directories
    tree_bytes=$(du -sb --exclude='./build*' --exclude=./data --exclude=./.gpupack --exclude=./out . | cut -f1)
fi
pack_bytes=$(du -cb "$PACK" | tail -1 | cut -f1)
{
    echo "commit: $commit ($dirty)"
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "built on: $(. /etc/os-release && echo "$PRETTY_NAME"), $(ldd --version | head -1)"
    echo "nvcc: $("${CUDACXX:-/usr/local/cuda/bin/nvcc}" --version 2>/dev/null | tail -1 || echo none)"
    echo "cmake flags: ${flags[*]}"
    echo "binaries: ${bins[*]}"
    echo "packed libraries: $(cd "$stage/lib" && ls | grep -v fallback | tr '\n' ' ')"
    echo "fallback libraries: $(ls "$stage/lib/fallback" | tr '\n' ' ')"
    echo "from the GPU machine: glibc >= ${glibc#GLIBC_} (${glibc_fb#GLIBC_} where a fallback library is used), libcuda.so.1 (driver), libcublas.so.13, libcublasLt.so.13, libnccl.so.2 (opened at run time)"
    echo "unpacked bytes: $(du -sb "$stage" | cut -f1)"
    echo "pack bytes: $pack_bytes; working tree bytes: $tree_bytes"
} > "$PACK/INFO"
cat "$PACK/INFO"
total=$(( (tree_bytes + pack_bytes) / 1048576 ))
echo "gpu_pack: what travels: ${total} MiB (limit ${LIMIT_MIB} MiB of the device call's 64)"
[ "$total" -le "$LIMIT_MIB" ] || { echo "gpu_pack: too big"; exit 1; }
echo "gpu_pack: ok; now the device call: command 'bash tools/gpu_check.sh', carry ['.gpupack'], timeout_s 540"
