"""hf_dataset_json.py HF_RUN.json DATA_DIR: writes DATA_DIR/dataset.json for the HF run's one-shard token data
(vocab 128, the run's eos id and token count, the shard body's sha256)."""
import hashlib, json, sys
r, d = json.load(open(sys.argv[1])), sys.argv[2]
body = open(d + "/shard-00000.bin", "rb").read()[1024:]
json.dump({"format": "portatrain-dataset", "version": 1, "tokenizer_sha256": "", "vocab_size": 128,
           "eos_id": r["eos_id"], "num_tokens": r["num_tokens"],
           "shards": [{"file": "shard-00000.bin", "num_tokens": r["num_tokens"],
                       "sha256": hashlib.sha256(body).hexdigest()}]}, open(d + "/dataset.json", "w"))
