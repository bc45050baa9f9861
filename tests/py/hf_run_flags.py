"""hf_run_flags.py HF_RUN.json [extended]: prints the train flags of the HF run's recipe (--key value, each value
as Python writes it, without quotes). 'extended' adds data_mode and epoch_boundary where the run has them,
num_train_epochs instead of max_steps when HF resolved the steps from it, and --dataloader-drop-last."""
import json
import sys

r = json.load(open(sys.argv[1]))
extended = sys.argv[2:] == ["extended"]
keys = ["seq_len", "per_device_train_batch_size", "gradient_accumulation_steps", "max_steps", "learning_rate",
        "warmup_steps", "lr_scheduler_type", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon",
        "max_grad_norm", "seed"]
if not extended:
    print(" ".join(f"--{k.replace('_', '-')} {r[k]!r}".replace("'", "") for k in keys))
    sys.exit(0)
keys += ["data_mode", "epoch_boundary"]
if r["max_steps"] <= 0:  # HF resolved it from num_train_epochs: so must portatrain
    keys[keys.index("max_steps")] = "num_train_epochs"
flags = " ".join(f"--{k.replace('_', '-')} {r[k]!r}".replace("'", "") for k in keys if k in r)
print(flags + (" --dataloader-drop-last" if r.get("dataloader_drop_last") else ""))
