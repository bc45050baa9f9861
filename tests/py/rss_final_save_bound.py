"""rss_final_save_bound.py METRICS.jsonl MAXRSS_KIB MODEL_BYTES TOPO.json LABEL: rank 0's lifetime peak RSS over
its peak in training (what the final save added) is at most topo's final save buffers + 10% of the model."""
import json, sys
train = json.loads(open(sys.argv[1]).readline())["peak_rss_mib_per_rank"][0]
life = int(sys.argv[2]) / 1024
model = int(sys.argv[3]) / 2**20
save = json.load(open(sys.argv[4]))["memory_bytes_per_rank"]["final_save_buffers_rank0"] / 2**20
bound = save + 0.1 * model
print("%s: rank 0's peak RSS %.1f MiB, in training %.1f: the final save added %.1f MiB; bound %.1f (topo's save "
      "buffers %.1f + 10%% of the %.1f MiB model)" % (sys.argv[5], life, train, life - train, bound, save, model))
sys.exit(0 if life - train <= bound else 1)
