"""hf_frozen_inputs.py HF_RUN.json CONFIG.json MODEL.safetensors DATA: the three files' sha256 equal the ones the
HF run recorded; prints each."""
import hashlib, json, sys
rec = json.load(open(sys.argv[1]))["sha256"]
for key, path in zip(("config.json", "model.safetensors", "data"), sys.argv[2:]):
    got = hashlib.sha256(open(path, "rb").read()).hexdigest()
    print(f"{key}: {'ok' if got == rec[key] else 'DIFFERS'} ({got[:16]}..., HF run {rec[key][:16]}...)")
    if got != rec[key]:
        sys.exit(1)
