#!/usr/bin/env bash
# topo and train resolve a layout's unset dimensions the same way (pt_mesh_resolve): for worlds 1..16 and
# every combination of set and unset --tp/--fsdp/--dp (values dividing the world), topo's mesh is the rule
# train runs by; a few real MPI jobs tie the rule to train's own record (train_args.json "parallel").
B=${PORTATRAIN:?}; S=${PT_SOURCE_DIR:?}; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
# a model every tp up to 16 splits (heads, KV heads, intermediate, vocabulary: lcm(1..16) = 720720), so topo
# refuses no layout for the model's sake
n=720720
python3 "$S/tests/py/json_edit.py" "$S/configs/tiny.json" "$T/c16.json" num_attention_heads=$n num_key_value_heads=$n \
    head_dim=2 hidden_size=8 intermediate_size=$n vocab_size=$n num_hidden_layers=1

# The rule (docs/DISTRIBUTED.md): tp, fsdp default to 1; an unset dp takes what tp x fsdp leave (none set:
# the whole world); an unset fsdp takes what tp x dp leave when both are set.
expect() { # world tp fsdp dp (0 = unset) -> "tp fsdp dp"
    local w=$1 t=$2 f=$3 d=$4 tp fsdp dp
    tp=$((t > 0 ? t : 1)); fsdp=$((f > 0 ? f : 1))
    if [ "$d" -gt 0 ]; then dp=$d
    elif [ "$t" -gt 0 ] || [ "$f" -gt 0 ]; then dp=$((w % (tp * fsdp) == 0 ? w / (tp * fsdp) : 1))
    else dp=$w; fi
    if [ "$f" -eq 0 ] && [ "$d" -gt 0 ] && [ "$t" -gt 0 ] && [ $((w % (tp * dp))) -eq 0 ]; then fsdp=$((w / (tp * dp))); fi
    echo "$tp $fsdp $dp"
}
# topo's mesh: its "mesh:" line, or the one its refusal names
topo_mesh() {
    "$B" topo --config "$T/c16.json" "$@" 2>&1 | sed -n -e 's/^mesh: [0-9]* ranks = tp \([0-9]*\) x fsdp \([0-9]*\) x dp \([0-9]*\),.*/\1 \2 \3/p' \
        -e 's/.*the layout tp \([0-9]*\) x fsdp \([0-9]*\) x dp \([0-9]*\) = .*/\1 \2 \3/p'
}
n=0; bad=0
for w in $(seq 1 16); do
    divs="0"; for v in $(seq 1 "$w"); do [ $((w % v)) -eq 0 ] && divs="$divs $v"; done
    for t in $divs; do for f in $divs; do for d in $divs; do
        args=(--world "$w"); [ "$t" -gt 0 ] && args+=(--tp "$t"); [ "$f" -gt 0 ] && args+=(--fsdp "$f")
        [ "$d" -gt 0 ] && args+=(--dp "$d")
        got=$(topo_mesh "${args[@]}"); want=$(expect "$w" "$t" "$f" "$d"); n=$((n + 1))
        if [ "$got" != "$want" ]; then echo "FAIL: topo ${args[*]}: '$got', train resolves '$want'"; bad=$((bad + 1)); fi
    done; done; done
done
[ "$bad" -eq 0 ] && echo "ok: topo resolves all $n layouts of worlds 1..16 as train does" || fail=1
[ "$n" -ge 1400 ] || { echo "FAIL: only $n layouts checked"; fail=1; }

# the case topo refused: 8 ranks, --tp 2 --dp 2 -> fsdp 2 (as train runs it)
got=$("$B" topo --world 8 --tp 2 --dp 2 --config "$S/configs/tiny.json" 2>&1 | head -1)
case "$got" in "mesh: 8 ranks = tp 2 x fsdp 2 x dp 2,"*) echo "ok: topo --world 8 --tp 2 --dp 2: fsdp 2";;
    *) echo "FAIL: topo --world 8 --tp 2 --dp 2: $got"; fail=1;; esac

# train under mpirun records the layout it ran: the same as topo's for the same flags
if ! command -v mpirun >/dev/null; then echo "skip: mpirun not found: train's own resolution not run"; exit $fail; fi
. "$S/tests/mpi_env.sh"
# Under ASan+UBSan the ranks keep address and UB checking but not LeakSanitizer: OpenMPI's own allocations
# at exit are not ours to fix (as in test_dist.sh).
[ -n "${PT_SANITIZED:-}" ] && export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
G="$S/tests/fixtures/golden/untied"
"$B" init --config "$S/configs/tiny.json" --seed 3 --output-dir "$T/init" >/dev/null 2>&1 || { echo "FAIL: init"; exit 1; }
for flags in "--tp 2 --dp 2" "--fsdp 2" "" "--tp 2" "--dp 4 --fsdp 2" "--tp 2 --fsdp 2 --dp 2"; do
    out="$T/run${flags// /}"
    # shellcheck disable=SC2086
    timeout -k 5 300 mpirun --allow-run-as-root --oversubscribe -np 8 "$B" train --model "$T/init" --data "$G/data.bin" \
        --output-dir "$out" --max-steps 1 --seq-len 16 --per-device-train-batch-size 1 --quiet $flags >"$T/mpi.out" 2>&1
    ran=$(python3 -c "import json,sys; p=json.load(open(sys.argv[1]))['parallel']; print(p['tp'], p['fsdp'], p['dp'])" \
        "$out/train_args.json" 2>/dev/null)
    # shellcheck disable=SC2086
    topo=$(topo_mesh --world 8 $flags)
    if [ -n "$ran" ] && [ "$ran" = "$topo" ]; then echo "ok: mpirun -np 8 train $flags ran tp fsdp dp = $ran, as topo says"
    else echo "FAIL: mpirun -np 8 train $flags ran '$ran', topo says '$topo'"; tail -5 "$T/mpi.out"; fail=1; fi
done
exit $fail
