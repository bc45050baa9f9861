#!/usr/bin/env bash
# Checkpoint save/restore throughput next to the disk's own write speed.
#   bench/ckpt_bench.sh [BUILD] [CONFIG...]   (default: configs/tiny.json configs/qwen3-0.6b.json)
# For each config: REPS rounds of (dd of the same byte count with fsync, then
# `portatrain ckpt bench`: a full training-state save and a cold restore that
# verifies every checksum, then dd of the checkpoint's tensor file with
# conv=fsync), medians printed as a Markdown table row.
set -euo pipefail
BUILD=${1:-build}; shift || true
CONFIGS=("$@"); [ ${#CONFIGS[@]} -gt 0 ] || CONFIGS=(configs/tiny.json configs/qwen3-0.6b.json)
REPS=${REPS:-3}
DIR=${BENCH_DIR:-$(mktemp -d -p "${TMPDIR:-/var/tmp}")}
trap 'rm -rf "$DIR"' EXIT
median() { sort -g | awk '{v[NR]=$1} END{print v[int((NR+1)/2)]}'; }
echo "| config | checkpoint bytes | save GB/s | restore GB/s (cold) | dd write+fsync GB/s |"
echo "|---|---|---|---|---|"
for cfg in "${CONFIGS[@]}"; do
  saves=(); loads=(); dds=(); bytes=0
  for r in $(seq "$REPS"); do
    rm -rf "$DIR/ck"  # ckpt bench refuses a directory that already holds checkpoints
    j=$("$BUILD/portatrain" ckpt bench --config "$cfg" --output-dir "$DIR/ck" --reps 1 2>/dev/null)
    bytes=$(echo "$j" | grep -o '"bytes": [0-9]*' | cut -d' ' -f2)
    saves+=("$(echo "$j" | grep -o '"save_gb_per_s": [0-9.]*' | cut -d' ' -f2)")
    loads+=("$(echo "$j" | grep -o '"restore_gb_per_s": [0-9.]*' | cut -d' ' -f2)")
    # dd the checkpoint's own tensor file (just read back, so in the page cache):
    # the same incompressible bytes, written with one fsync. (dd from /dev/zero
    # overstates a thin-provisioned VM disk.)
    src=$(ls "$DIR"/ck/checkpoint-*/rank00000.safetensors | head -1)
    fb=$(stat -c %s "$src")
    t0=$(date +%s.%N); dd if="$src" of="$DIR/dd" bs=4M conv=fsync status=none; t1=$(date +%s.%N)
    dds+=("$(awk -v b="$fb" -v a="$t0" -v c="$t1" 'BEGIN{printf "%.4f", b/(c-a)/1e9}')")
    rm -rf "$DIR/dd" "$DIR/ck"
  done
  printf "| %s | %s | %s | %s | %s |\n" "$(basename "$cfg")" "$bytes" \
    "$(printf '%s\n' "${saves[@]}" | median)" "$(printf '%s\n' "${loads[@]}" | median)" "$(printf '%s\n' "${dds[@]}" | median)"
done
