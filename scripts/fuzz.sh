#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD_DIR for SECONDS each, from the seed
# corpora in fuzz/corpus/<target>/ (copied to a scratch dir so runs add nothing
# to the repository).
set -euo pipefail
build=${1:-build-fuzz}
secs=${2:-15}
root=$(cd "$(dirname "$0")/.." && pwd)
status=0
for bin in "$build"/fuzz_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  work=$(mktemp -d)
  [ -d "$root/fuzz/corpus/$name" ] && cp -r "$root/fuzz/corpus/$name/." "$work/"
  echo "fuzz: $name for ${secs}s"
  if ! (cd "$root" && ASAN_OPTIONS=detect_leaks=1 "$bin" -max_total_time="$secs" -rss_limit_mb=4096 \
        -max_len=65536 -print_final_stats=0 "$work" >"$work.log" 2>&1); then
    echo "fuzz: $name FAILED"; tail -40 "$work.log"; status=1
  else
    grep -E "^Done [0-9]+ runs" "$work.log" | tail -1 || true
  fi
  rm -rf "$work" "$work.log"
done
exit $status
