#!/usr/bin/env bash
# Usage: tools/longest_functions.sh [--check] [N]
# Lists the N (default 20) longest function definitions in src/ (.c .h .cc .cu), longest first, as
# "lines  file:line  name". With --check it exits 1 when any function is longer than MAX_LINES (150, the
# project's limit) and names each one. Function extents come from Universal Ctags (line: and end:
# fields); only the function kind is counted, so namespaces, structs and classes are not functions here.
set -euo pipefail
MAX_LINES=150
check=0 n=20
for a in "$@"; do
  case $a in
    --check) check=1 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    ''|*[!0-9]*) echo "longest_functions: unknown argument '$a' (want [--check] [N])" >&2; exit 2 ;;
    *) n=$a ;;
  esac
done
command -v ctags >/dev/null || { echo "longest_functions: ctags (Universal Ctags) not found" >&2; exit 2; }
cd "$(dirname "$0")/.."
mapfile -t files < <(find src -type f \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.cu' \) | sort)
# One row per function: lines<TAB>file:line<TAB>name. A declaration without a body has no end: field.
table=$(ctags --fields=+ne --kinds-C=f --kinds-C++=f --kinds-CUDA=f -o - "${files[@]}" |
  awk -F'\t' '{
    line = ""; end = ""
    for (i = 4; i <= NF; i++) {
      if ($i ~ /^line:/) line = substr($i, 6)
      else if ($i ~ /^end:/) end = substr($i, 5)
    }
    if (line != "" && end != "") printf "%d\t%s:%s\t%s\n", end - line + 1, $2, line, $1
  }' | sort -t$'\t' -k1,1nr -k2,2)
printf '%s\n' "$table" | head -n "$n" | awk -F'\t' '{ printf "%5d  %-40s %s\n", $1, $2, $3 }'
if [ $check = 1 ]; then
  over=$(printf '%s\n' "$table" | awk -F'\t' -v max=$MAX_LINES '$1 > max')
  if [ -n "$over" ]; then
    echo "FAIL: $(printf '%s\n' "$over" | wc -l) function(s) over $MAX_LINES lines:"
    printf '%s\n' "$over" | awk -F'\t' '{ printf "%5d  %s %s\n", $1, $2, $3 }'
    exit 1
  fi
  echo "ok: no function over $MAX_LINES lines"
fi
