#!/usr/bin/env bash
# Usage: tools/compare_commits.sh [--data DIR] [--work DIR] [--keep] [--no-cache] A B
#
# Proves that two commits train alike: builds A and B (any git revisions) in temporary git worktrees
# (Release, -DPT_CUDA=OFF -DPT_CUDA_SIM=OFF, -j2), runs the same short runs on configs/tiny.json with each
# binary, and compares bitwise: each run's per-step losses and grad norms (metrics.jsonl's JSON values, not
# its text), its final weights (sha256 over every tensor's name, dtype, shape and bytes), and for `accept`
# the verdict and the numbers it compared (report.json). Prints run | A | B | same/DIFFERENT and exits 1
# on any difference or failed run, 2 on unusable input.
#
#   --data DIR    the demo data (default: data/ of this checkout; needs demo/shards/{train,eval} and
#                 demo/qwen3-tokenizer)
#   --work DIR    where builds and runs go (default: a temporary dir, removed at exit unless --keep; a
#                 failed build or run keeps it, for its logs)
#   --no-cache    rebuild even when a binary of that commit is in the cache
#                 (${PT_COMPARE_CACHE:-~/.cache/portatrain-compare}/<commit>/portatrain)
#
# The frozen inputs (configs/tiny.json, configs/prices.json, the data) come from this checkout, so only
# the binaries differ. Runs: init (seed 42); single process cpu-ref and cpu; TP2 x FSDP2 under mpirun
# (4 ranks); --precision bf16; --activation-checkpointing full; a resume from `latest` after a run killed
# mid-way; a supervised run with an injected kill; a short `accept` (cpu-ref:fp32 vs cpu:fp32).
# Measured on a shared, busy 2-core machine: about 3 minutes per build and 80 s of runs per side.
set -uo pipefail
usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit "$1"; }
die() { echo "compare_commits: $*" >&2; exit 2; }

HERE=$(cd "$(dirname "$0")/.." && pwd)
DATA="$HERE/data" WORK="" KEEP=0 CACHE=1
revs=()
while [ $# -gt 0 ]; do
  case $1 in
    --data) DATA=$(cd "${2:?--data needs a DIR}" && pwd) || die "--data $2: no such directory"; shift 2 ;;
    --work) WORK=${2:?--work needs a DIR}; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --no-cache) CACHE=0; shift ;;
    -h|--help) usage 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) revs+=("$1"); shift ;;
  esac
done
[ ${#revs[@]} = 2 ] || die "want two commits, A and B (see --help)"
for d in demo/shards/train demo/shards/eval demo/qwen3-tokenizer; do
  [ -e "$DATA/$d" ] || die "--data $DATA: no $d (the demo data; see README.md, \"Demo data\")"
done
SHA_A=$(git -C "$HERE" rev-parse --verify -q "${revs[0]}^{commit}") || die "A: '${revs[0]}' is not a commit"
SHA_B=$(git -C "$HERE" rev-parse --verify -q "${revs[1]}^{commit}") || die "B: '${revs[1]}' is not a commit"
CACHE_DIR=${PT_COMPARE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/portatrain-compare}
if [ -z "$WORK" ]; then WORK=$(mktemp -d); else mkdir -p "$WORK" || die "--work $WORK: cannot create"; fi
WORK=$(cd "$WORK" && pwd)
trees=()
cleanup() {
  for t in "${trees[@]}"; do git -C "$HERE" worktree remove --force "$t" >/dev/null 2>&1; done
  [ $KEEP = 1 ] && echo "kept: $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT

# build SHA: sets BIN to that commit's portatrain (cached by commit: a commit's sources never change)
build() {
  local sha=$1 tree="$WORK/tree-${1:0:12}"
  BIN="$CACHE_DIR/$1/portatrain"
  if [ $CACHE = 1 ] && [ -x "$BIN" ]; then echo "${sha:0:12}: cached $BIN" >&2; return; fi
  echo "building ${sha:0:12} ..." >&2
  git -C "$HERE" worktree add --detach -q "$tree" "$sha" >&2 || return 1
  trees+=("$tree")
  { cmake -S "$tree" -B "$tree/build" -DCMAKE_BUILD_TYPE=Release -DPT_CUDA=OFF -DPT_CUDA_SIM=OFF &&
    cmake --build "$tree/build" -j2 --target portatrain; } >"$WORK/build-${sha:0:12}.log" 2>&1 ||
    { echo "compare_commits: build of ${sha:0:12} failed (log: $WORK/build-${sha:0:12}.log)" >&2; KEEP=1; return 1; }
  mkdir -p "$CACHE_DIR/$sha" && cp "$tree/build/portatrain" "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
}
build "$SHA_A" || exit 2; BIN_A=$BIN
if [ "$SHA_B" = "$SHA_A" ]; then BIN_B=$BIN_A; echo "A and B are the same commit: one build, run twice" >&2
else build "$SHA_B" || exit 2; BIN_B=$BIN; fi

CONFIG="$HERE/configs/tiny.json" PRICES="$HERE/configs/prices.json"
TRAIN="$DATA/demo/shards/train"
export OMP_NUM_THREADS=2
# every training run: 6 steps of 2 x 16 tokens, warm-up then cosine (the tiny model's 151,936-token head
# makes a cpu-ref step about a second)
STEPS=6
COMMON=(--data "$TRAIN" --max-steps $STEPS --seq-len 16 --per-device-train-batch-size 2 --learning-rate 3e-3
        --warmup-steps 2 --lr-scheduler-type cosine --weight-decay 0.1 --quiet)
RUNS="init cpu-ref cpu tp2xfsdp2 bf16 act-ckpt resume supervise accept"

# run_all BIN OUT: every run of one binary; each run's exit status goes to OUT/NAME.rc, its output to OUT/NAME.log
run_all() {
  local P=$1 O=$2 r
  mkdir -p "$O"
  for r in $RUNS; do
    echo "  $r" >&2
    run_one "$P" "$O" "$r" >"$O/$r.log" 2>&1
    echo $? >"$O/$r.rc"
  done
}
run_one() {
  local P=$1 O=$2 M="$2/init"
  local train=(timeout -k 5 600 "$P" train --model "$M" --output-dir "$O/$3" "${COMMON[@]}")
  case $3 in
    init) timeout 120 "$P" init --config "$CONFIG" --seed 42 --output-dir "$M" ;;
    cpu-ref) "${train[@]}" --backend cpu-ref ;;
    cpu) "${train[@]}" --backend cpu ;;
    tp2xfsdp2)
      command -v mpirun >/dev/null || { echo "mpirun not found"; return 77; }
      ( . "$HERE/tests/mpi_env.sh"
        timeout -k 5 600 mpirun --allow-run-as-root --oversubscribe -np 4 "$P" train --model "$M" \
          --output-dir "$O/$3" "${COMMON[@]}" --per-device-train-batch-size 1 --backend cpu --tp 2 --fsdp 2 ) ;;
    bf16) "${train[@]}" --backend cpu --precision bf16 ;;
    act-ckpt) "${train[@]}" --backend cpu --activation-checkpointing full ;;
    resume)  # killed after step 4 with checkpoint-3 saved, then resumed from `latest` to the end
      PT_FAULT_KILL_AFTER_STEP=4 "${train[@]}" --backend cpu --save-steps 3
      [ "$(cat "$O/$3/latest" 2>/dev/null)" = checkpoint-3 ] || { echo "no checkpoint-3 after the kill"; return 1; }
      "${train[@]}" --backend cpu --save-steps 3 --resume-from-checkpoint latest ;;
    supervise)
      "${train[@]}" --backend cpu --save-steps 2 --supervise --restart-backoff 0.01 --inject kill:step=3 ;;
    accept)
      timeout -k 5 600 "$P" accept --baseline cpu-ref:fp32 --candidate cpu:fp32 --steps 8 --checkpoint-step 4 \
        --recovery-save-steps 2 --eval-batches 1 --seq-len 16 --per-device-train-batch-size 2 --warmup-steps 2 \
        --model "$M" --train-data "$TRAIN" --eval-data "$DATA/demo/shards/eval" \
        --tokenizer-dir "$DATA/demo/qwen3-tokenizer" --price-table "$PRICES" --output-dir "$O/$3" --quiet ;;
  esac
}

echo "A: ${revs[0]} (${SHA_A:0:12})  B: ${revs[1]} (${SHA_B:0:12})  runs in $WORK" >&2
# Both sides run in the same directory (then moved aside), so that no path in their results differs.
for side in A B; do
  bin=BIN_$side; echo "runs of $side:" >&2
  run_all "${!bin}" "$WORK/run"
  mv "$WORK/run" "$WORK/$side"
done

# cell SIDE RUN KIND: the digest of one result, or why there is none
cell() {
  local O="$WORK/$1" rc path
  rc=$(cat "$O/$2.rc")
  [ "$rc" = 77 ] && { echo "skipped ($(tail -1 "$O/$2.log"))"; return; }
  [ "$rc" = 0 ] || [ "$2" = accept ] || { echo "FAILED rc $rc"; return; }
  case $3 in
    metrics) path="$O/$2/metrics.jsonl" ;;
    weights) path="$O/$2/model.safetensors"; [ "$2" = init ] && path="$O/init/model.safetensors" ;;
    accept) path="$O/$2/report.json" ;;
  esac
  python3 "$HERE/tools/run_digest.py" "$3" "$path" 2>&1 || echo "FAILED rc $rc"
}

rows=()
for r in $RUNS; do
  case $r in
    init) rows+=("init:weights") ;;
    accept) rows+=("accept:accept") ;;
    *) rows+=("$r:metrics" "$r:weights") ;;
  esac
done
status=0
fmt="%-20s | %-46s | %-46s | %s\n"
printf "$fmt" run A B result
printf "$fmt" "--------------------" "----------------------------------------------" \
  "----------------------------------------------" "---------"
for row in "${rows[@]}"; do
  r=${row%%:*} kind=${row#*:}
  a=$(cell A "$r" "$kind") b=$(cell B "$r" "$kind")
  if [[ $a == FAILED* || $b == FAILED* ]]; then res="FAILED (logs: $WORK/{A,B}/$r.log)"; status=1; KEEP=1
  elif [[ $a == skipped* ]] && [ "$a" = "$b" ]; then res=skipped
  elif [ "$a" = "$b" ]; then res=same
  else res=DIFFERENT; status=1; fi
  printf "$fmt" "$r ${kind/accept/report}" "$a" "$b" "$res"
done
[ $status = 0 ] && echo "all runs the same" || echo "DIFFERENT: A and B do not train alike (or a run failed)"
exit $status
