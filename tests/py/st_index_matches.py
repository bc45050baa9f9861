"""st_index_matches.py DIR: prints True when DIR/model.safetensors.index.json's weight_map names each tensor's
model-*.safetensors file and its metadata holds total_size (tensor bytes) and total_parameters, as transformers
writes them; False otherwise."""
import glob
import json
import os
import struct
import sys

idx = json.load(open(os.path.join(sys.argv[1], "model.safetensors.index.json")))
size = params = 0; where = {}
for f in glob.glob(os.path.join(sys.argv[1], "model-*.safetensors")):
    raw = open(f, "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
    for k, v in json.loads(raw[8:8 + n]).items():
        if k == "__metadata__": continue
        size += v["data_offsets"][1] - v["data_offsets"][0]; where[k] = os.path.basename(f)
        p = 1
        for d in v["shape"]: p *= d
        params += p
print(idx["metadata"] == {"total_parameters": params, "total_size": size} and idx["weight_map"] == where)
