#!/usr/bin/env python3
"""Golden learning rates from Hugging Face transformers' get_scheduler, for tests/test_lr_schedules.sh.

For each case (scheduler name, lr_scheduler_kwargs, learning rate, warmup steps, total steps) the rate
LambdaLR applies at optimizer steps 0..total-1 (get_last_lr() before each step), the rate portatrain's
metrics.jsonl records as "lr". Needs torch and transformers (pip install torch transformers).

  tools/hf_lr_schedules.py tests/fixtures/lr/hf_schedules.json
"""
import json
import sys

import torch
import transformers
from transformers import get_scheduler

# (name, kwargs, lr, warmup, total): every schedule portatrain names, HF's defaults and the keyword
# arguments that change the formula
CASES = [
    ("linear", {}, 3e-3, 3, 12),
    ("cosine", {}, 3e-3, 3, 12),
    ("cosine", {"num_cycles": 1.5}, 3e-3, 2, 12),
    ("constant", {}, 3e-3, 0, 12),
    ("constant_with_warmup", {}, 3e-3, 4, 12),
    ("cosine_with_restarts", {}, 3e-3, 2, 12),
    ("cosine_with_restarts", {"num_cycles": 3}, 3e-3, 2, 12),
    ("polynomial", {}, 3e-3, 2, 12),
    ("polynomial", {"lr_end": 1e-4, "power": 2.0}, 3e-3, 2, 12),
    ("inverse_sqrt", {}, 3e-3, 3, 12),
    ("inverse_sqrt", {}, 3e-3, 0, 12),
    ("inverse_sqrt", {"timescale": 5}, 3e-3, 2, 12),
    ("cosine_with_min_lr", {"min_lr_rate": 0.1}, 3e-3, 2, 12),
    ("cosine_with_min_lr", {"min_lr": 1e-4}, 3e-3, 2, 12),
    ("cosine_warmup_with_min_lr", {"min_lr_rate": 0.1}, 3e-3, 3, 12),
    ("cosine_warmup_with_min_lr", {"min_lr": 1e-4, "warmup_lr_rate": 0.2}, 3e-3, 3, 12),
    ("warmup_stable_decay", {"num_decay_steps": 4}, 3e-3, 2, 12),
    ("warmup_stable_decay", {"num_decay_steps": 5, "num_stable_steps": 3, "warmup_type": "cosine",
                             "decay_type": "1-sqrt", "min_lr_ratio": 0.1}, 3e-3, 2, 12),
    ("warmup_stable_decay", {"num_decay_steps": 4, "warmup_type": "1-sqrt", "decay_type": "linear"}, 3e-3, 3, 12),
]


def rates(name, kwargs, lr, warmup, total):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=lr)
    sched = get_scheduler(name, opt, num_warmup_steps=warmup, num_training_steps=total,
                          scheduler_specific_kwargs=dict(kwargs))
    out = []
    for _ in range(total):
        out.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    return out


def main():
    cases = [{"name": n, "kwargs": k, "lr": lr, "warmup_steps": w, "max_steps": t, "rates": rates(n, k, lr, w, t)}
             for n, k, lr, w, t in CASES]
    doc = {"source": "transformers %s get_scheduler, torch %s" % (transformers.__version__, torch.__version__),
           "cases": cases}
    with open(sys.argv[1], "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
