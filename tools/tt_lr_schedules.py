#!/usr/bin/env python3
"""Golden learning rates from TorchTitan's own scheduler, for tests/test_lr_schedules.sh.

For each case (lr_scheduler fields, learning rate, warmup steps, training steps) this builds TorchTitan's
LRSchedulersContainer from its Config over a real OptimizersContainer (default_adamw) and records the rate
applied at optimizer steps 0..steps-1 (get_last_lr() before each step, as TorchTitan's train loop steps the
optimizer, then the scheduler), the rate portatrain's metrics.jsonl records as "lr" for

  portatrain train --lr-scheduler-type torchtitan --warmup-steps W --max-steps N --learning-rate LR
                   --lr-scheduler-kwargs '{"decay_type": ..., "min_lr_factor": ..., "decay_ratio": ..., "total_steps": ...}'

The keyword arguments are TorchTitan's lr_scheduler field names; --warmup-steps is its warmup_steps and
--max-steps its training.steps. Needs torch and torchtitan (/work/venv-tt has torchtitan 0.3.0):

  /work/venv-tt/bin/python tools/tt_lr_schedules.py tests/fixtures/lr/tt_schedules.json
"""
import json
import logging
import sys

import torch
import torchtitan
from torchtitan.components.optimizer import LRSchedulersContainer, OptimizersContainer, default_adamw

# (kwargs, lr, warmup, steps): each decay type, min_lr_factor, the warmup-stable-decay shape (decay_ratio,
# with a round-half-to-even tie: 10 x 0.25), no warmup, warmup beyond the steps, warmup + decay beyond the
# steps, and a schedule longer and shorter than the run (total_steps)
CASES = [
    ({}, 3e-3, 3, 12),
    ({}, 3e-3, 0, 10),
    ({"decay_type": "sqrt", "min_lr_factor": 0.1}, 3e-3, 2, 12),
    ({"decay_type": "cosine"}, 3e-3, 3, 12),
    ({"decay_type": "cosine", "min_lr_factor": 0.1, "decay_ratio": 0.5}, 3e-3, 2, 12),
    ({"decay_ratio": 0.25}, 3e-3, 2, 10),
    ({"decay_type": "cosine", "decay_ratio": 0.35}, 3e-3, 1, 10),
    ({"decay_type": "sqrt", "decay_ratio": 0.8}, 3e-3, 4, 10),
    ({"decay_ratio": 0.0}, 3e-3, 2, 10),
    ({}, 3e-3, 15, 12),
    ({"total_steps": 20, "min_lr_factor": 0.2}, 3e-3, 2, 12),
    ({"decay_type": "cosine", "total_steps": 8}, 3e-3, 2, 10),
]


def rates(kwargs, lr, warmup, steps):
    model = torch.nn.Linear(2, 2)
    opt_cfg = default_adamw(lr=lr)
    opt_cfg.implementation = "for-loop"  # any; the scheduler sets the same lr
    opts = OptimizersContainer(opt_cfg, model_parts=[model])
    sched = LRSchedulersContainer.Config(warmup_steps=warmup, **kwargs).build(optimizers=opts,
                                                                              training_steps=steps)
    out = []
    for _ in range(steps):
        out.append(sched.schedulers[0].get_last_lr()[0])
        opts.step()
        sched.step()
    return out


def main():
    logging.disable(logging.WARNING)  # its notes on clamped warmup and decay steps
    cases = [{"name": "torchtitan", "kwargs": k, "lr": lr, "warmup_steps": w, "max_steps": n,
              "rates": rates(k, lr, w, n)} for k, lr, w, n in CASES]
    version = getattr(torchtitan, "__version__", None)
    if version is None:
        from importlib.metadata import version as dist_version
        version = dist_version("torchtitan")
    doc = {"source": "torchtitan %s LRSchedulersContainer, torch %s" % (version, torch.__version__),
           "cases": cases}
    with open(sys.argv[1], "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
