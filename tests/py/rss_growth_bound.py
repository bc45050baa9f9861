"""rss_growth_bound.py EXTRA_MIB BASE.jsonl RUN.jsonl MODEL_BYTES TOPO.json LABEL: the run's peak RSS over the
base run's is at most its state + activations + topo's start-up load buffers + 10% of the model + EXTRA_MIB."""
import json, sys
extra = float(sys.argv[1])
base = json.loads(open(sys.argv[2]).readline())
run = json.loads(open(sys.argv[3]).readline())
model = int(sys.argv[4]) / 2**20
load = json.load(open(sys.argv[5]))["memory_bytes_per_rank"]["startup_load_buffers"] / 2**20
grown = max(run["peak_rss_mib_per_rank"]) - max(base["peak_rss_mib_per_rank"])
state = (run["state_bytes_per_rank"] + run["activation_bytes"]) / 2**20
bound = state + load + 0.1 * model + extra
print("%s: peak RSS over the fixture's %.1f MiB = state + activations %.1f + %.1f; bound %.1f MiB (+ start-up "
      "buffers %.1f + 10%% of the %.1f MiB model + %.0f)" % (sys.argv[6], grown, state, grown - state, bound, load,
      model, extra))
sys.exit(0 if grown <= bound else 1)
