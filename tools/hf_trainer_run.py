#!/usr/bin/env python3
"""Train a Qwen3 model with Hugging Face's own `transformers.Trainer` on exactly the batches
`portatrain train` would use, and write its `trainer_state.json`.

What it is for: the cross-check of docs/COMPARE.md ("HF Trainer cross-check"). `portatrain compare
HF_OUT PT_RUN --format-a hf` then judges a portatrain run against a real HF Trainer run of the same
model, data and hyperparameters; tests/fixtures/compare/hf_trainer/ holds one such trainer_state.json.

Run (needs torch, transformers, accelerate; nothing in the build or the tests needs them):

    python3 tools/hf_trainer_run.py --model tests/fixtures/golden/untied \\
        --data tests/fixtures/golden/untied/data.bin --output-dir out/hf --seq-len 16 \\
        --per-device-train-batch-size 2 --gradient-accumulation-steps 2 --max-steps 30 \\
        --learning-rate 1e-2 --warmup-steps 5 --lr-scheduler-type cosine --weight-decay 0.1 \\
        --max-grad-norm 1.0 --seed 42

The flags carry portatrain train's names and meanings (docs: README.md, "Commands"); pass the same
values to `portatrain train`. Data: one v1 token shard (docs/DATA.md), unshuffled, in portatrain's
packed mode (default) or padded mode (`--data-mode padded --eos-id E`; portatrain takes E from a
dataset.json over the same shard, default buckets, long documents split). `--logging-steps N` is HF's:
its logged loss is then the mean over the N steps since its previous log (portatrain compare accounts for it).

How the batches match portatrain's loader (src/data/loader.{h,c}, packed mode, no --shuffle):
  - the shard's N tokens are cut into R = (N-1) // T windows of T+1 tokens with stride T;
  - global row g (g = s*B + j for optimizer step s, B = batch x accumulation) is window g mod R;
  - micro-batch m of step s holds rows s*B + m*batch .. s*B + (m+1)*batch - 1;
  - inputs are window[0:T], targets window[1:T+1]: all T positions are predicted.
HF's causal-LM loss shifts `labels` internally (position T-1 would get no target), so each example
carries `shift_labels` = window[1:T+1], which transformers' ForCausalLMLoss uses as the targets
unshifted and which the Trainer counts for `num_items_in_batch` (the targets of the whole optimizer
step): each micro-batch's loss is its summed cross-entropy over that count, and the logged loss of a
step is their sum, the mean over the step's targets, which is portatrain's loss. `labels` (= the
inputs, the usual HF convention) must be present for the model to compute a loss at all; it is not
used when `shift_labels` is given.
The examples come from an IterableDataset in that order, so the Trainer's sampler cannot shuffle them.

A Qwen3-MoE model (config.json model_type "qwen3_moe") trains as Qwen3MoeForCausalLM. With
output_router_logits its loss per micro-batch is the above + router_aux_loss_coef x aux_loss; the Trainer
(the model accepts loss kwargs and num_items_in_batch is given) does not divide it by the accumulation
steps, so a step's logged loss is the mean cross-entropy + coef x the SUM of its micro-batches' aux_loss.
Each log entry also gets `aux_loss`: the mean of the aux_loss of the micro-batches since the previous log
(read off the model's outputs; the Trainer itself does not log it).

`--epoch-boundary hf` (portatrain's default since it exists; the above is `wrap`): the Trainer gets a
map-style Dataset of the R rows of one epoch and builds its own DataLoader with a SequentialSampler
(`train_sampling_strategy="sequential"`), so HF itself decides the epochs: ceil(R / batch) micro-batches
per epoch (floor with `--dataloader-drop-last`), the last one short, num_update_steps_per_epoch =
ceil(micro-batches / accumulation), the last step of an epoch with the remaining micro-batches, the next
epoch from row 0 again, and `--num-train-epochs` resolved by HF (max_steps -1). Padded rows are padded to
T (the largest bucket) by the dataset: portatrain pads a step to its bucket; trailing padding with labels
-100 changes no number but the summation order.
"""
import argparse
import hashlib
import json
import os
import struct
import sys

SHARD_MAGIC, SHARD_VERSION = 20241202, 1


def read_shard(path):
    """Tokens of a portatrain v1 token shard (docs/DATA.md): 256 int32 header, then N x uint32."""
    import numpy as np

    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 1024:
        sys.exit(f"{path}: shorter than the 1024-byte header")
    hdr = struct.unpack("<256i", raw[:1024])
    if hdr[0] != SHARD_MAGIC or hdr[1] != SHARD_VERSION or hdr[3] != 4:
        sys.exit(f"{path}: not a v1 portatrain shard (magic {hdr[0]}, version {hdr[1]}, bytes/token {hdr[3]})")
    n = hdr[2]
    if len(raw) != 1024 + 4 * n:
        sys.exit(f"{path}: {len(raw)} bytes, header says {n} tokens ({1024 + 4 * n} bytes)")
    return np.frombuffer(raw, dtype="<u4", offset=1024, count=n).astype(np.int64)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="HF model dir (config.json + model.safetensors)")
    ap.add_argument("--data", required=True, help="a portatrain v1 token shard (one .bin file)")
    ap.add_argument("--output-dir", required=True)
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--max-steps", type=int, required=True, help="-1 with --num-train-epochs")
    ap.add_argument("--per-device-train-batch-size", type=int, default=8)
    ap.add_argument("--gradient-accumulation-steps", type=int, default=1)
    # Defaults: portatrain train's (pt_train_args_defaults in src/train/trainer.c), the same as
    # TrainingArguments' for these fields.
    ap.add_argument("--learning-rate", type=float, default=5e-5)
    ap.add_argument("--warmup-steps", type=int, default=0)
    ap.add_argument("--lr-scheduler-type", default="linear",
                    choices=["linear", "cosine", "constant", "constant_with_warmup"])
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--adam-beta1", type=float, default=0.9)
    ap.add_argument("--adam-beta2", type=float, default=0.999)
    ap.add_argument("--adam-epsilon", type=float, default=1e-8)
    ap.add_argument("--max-grad-norm", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--optim", default=None,
                    help="TrainingArguments.optim (default: the Trainer's own default, adamw_torch_fused "
                         "with torch >= 2.8)")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    ap.add_argument("--data-mode", default="packed", choices=["packed", "padded"],
                    help="portatrain's --data-mode (unshuffled either way; padded: default buckets, long "
                         "documents split)")
    ap.add_argument("--eos-id", type=int, default=None,
                    help="padded mode: the end-of-document id (portatrain takes it from dataset.json's eos_id)")
    ap.add_argument("--epoch-boundary", default="wrap", choices=["wrap", "hf"],
                    help="wrap: the IterableDataset above (portatrain --epoch-boundary wrap); hf: HF's own "
                         "DataLoader over one epoch's rows (portatrain's default)")
    ap.add_argument("--dataloader-drop-last", action="store_true", help="TrainingArguments.dataloader_drop_last "
                    "(needs --epoch-boundary hf)")
    ap.add_argument("--num-train-epochs", type=float, default=None,
                    help="--epoch-boundary hf: train this many epochs (HF resolves max_steps; give --max-steps -1)")
    ap.add_argument("--lr-schedule", default="hf", choices=["hf", "torchtitan"],
                    help="torchtitan: TorchTitan 0.3.0's warm-up k/W then linear decay to 0 with one peak step "
                         "(docs/TRAINING.md), as a LambdaLR the Trainer is given, instead of --lr-scheduler-type")
    ap.add_argument("--lr-step-offset", type=int, default=0,
                    help="--lr-schedule torchtitan: the Trainer's step k trains with the rate of step k + OFFSET of a "
                         "--schedule-steps run (a continuation from another platform's step-OFFSET checkpoint)")
    ap.add_argument("--schedule-steps", type=int, default=None, help="--lr-schedule torchtitan: its N (--max-steps)")
    ap.add_argument("--weight-decay-params", default="hf", choices=["hf", "all"],
                    help="all: one AdamW group that decays every parameter, as TorchTitan's default optimizer")
    ap.add_argument("--save-steps", type=int, default=0,
                    help="save an HF checkpoint (OUT/checkpoint-N: model.safetensors + config.json) every N steps")
    ap.add_argument("--eval-data", default=None,
                    help="a v1 shard of held-out windows: evaluated (eval_loss in log_history) every --eval-steps")
    ap.add_argument("--eval-steps", type=int, default=0)
    ap.add_argument("--per-device-eval-batch-size", type=int, default=4)
    ap.add_argument("--logging-steps", type=int, default=1,
                    help="TrainingArguments.logging_steps: HF logs the loss averaged over the steps since its "
                         "last log (portatrain's metrics.jsonl has every step)")
    args = ap.parse_args()
    if args.epoch_boundary == "wrap" and (args.dataloader_drop_last or args.num_train_epochs or args.max_steps <= 0):
        sys.exit("--dataloader-drop-last and --num-train-epochs need --epoch-boundary hf; wrap needs --max-steps")

    import numpy as np
    import torch
    import transformers
    from torch.utils.data import IterableDataset
    from transformers import Qwen3ForCausalLM, Qwen3MoeForCausalLM, Trainer, TrainingArguments

    if args.threads:
        torch.set_num_threads(args.threads)
    T, batch, accum = args.seq_len, args.per_device_train_batch_size, args.gradient_accumulation_steps
    B = batch * accum
    tokens = read_shard(args.data)
    R = (len(tokens) - 1) // T
    if R == 0 and args.data_mode == "packed":
        sys.exit(f"{args.data}: {len(tokens)} tokens are too few for one window of {T + 1}")

    if args.data_mode == "padded":
        # portatrain's padded loader (src/data/loader.c, docs/DATA.md), unshuffled, no group_by_bucket:
        # documents end at (and include) each EOS; tokens after the last EOS form a final document; a
        # document of n tokens gives n-1 inputs d[0:n-1], labels d[1:n], split into pieces of at most the
        # largest bucket (T); single-token documents give no row. Row g is piece g mod R. A step's row
        # length is the smallest default bucket (T/8, T/4, T/2, T) that holds its longest row; rows are
        # padded at the end with inputs EOS and labels -100.
        if args.eos_id is None:
            sys.exit("--data-mode padded needs --eos-id")
        eos = args.eos_id
        buckets = []
        for d in (8, 4, 2, 1):
            if T // d >= 1 and (not buckets or T // d > buckets[-1]):
                buckets.append(T // d)
        pieces, start = [], 0
        ends = [i + 1 for i, t in enumerate(tokens.tolist()) if t == eos]
        if not ends or ends[-1] < len(tokens):
            ends.append(len(tokens))
        for end in ends:
            m = end - start - 1
            off = 0
            while off < m:
                pieces.append((start + off, min(m - off, buckets[-1])))
                off += buckets[-1]
            start = end
        R = len(pieces)
        if R == 0:
            sys.exit(f"{args.data}: no document of 2 or more tokens")

        def padded_row(p, n, L):
            """A document piece (start p, n inputs) padded to L: EOS inputs, -100 labels after it."""
            ids = np.full(L, eos, dtype=np.int64)
            lab = np.full(L, -100, dtype=np.int64)
            ids[:n] = tokens[p:p + n]
            lab[:n] = tokens[p + 1:p + n + 1]
            ids = torch.from_numpy(ids)
            return {"input_ids": ids, "labels": ids.clone(), "shift_labels": torch.from_numpy(lab)}

        class Rows(IterableDataset):
            def __iter__(self):
                for s in range(args.max_steps):
                    rows = [pieces[(s * B + j) % R] for j in range(B)]
                    L = next(b for b in buckets if b >= max(n for _, n in rows))
                    for p, n in rows:
                        yield padded_row(p, n, L)

            def __len__(self):
                return args.max_steps * B

        dataset = Rows()

    class Windows(IterableDataset):
        """Rows 0 .. max_steps*B-1 in order; row g is window g mod R (portatrain's unshuffled packing)."""

        def __iter__(self):
            for g in range(args.max_steps * B):
                w = tokens[(g % R) * T:(g % R) * T + T + 1]
                ids = torch.from_numpy(np.ascontiguousarray(w[:T]))
                yield {"input_ids": ids, "labels": ids.clone(),
                       "shift_labels": torch.from_numpy(np.ascontiguousarray(w[1:T + 1]))}

        def __len__(self):
            return args.max_steps * B

    if args.data_mode == "packed":
        dataset = Windows()

    if args.epoch_boundary == "hf":
        from torch.utils.data import Dataset

        class EpochRows(Dataset):
            """One epoch's R rows (windows, or padded pieces padded to T); HF's DataLoader cuts the epochs."""

            def __len__(self):
                return R

            def __getitem__(self, i):
                if args.data_mode == "packed":
                    w = tokens[i * T:i * T + T + 1]
                    ids = torch.from_numpy(np.ascontiguousarray(w[:T]))
                    return {"input_ids": ids, "labels": ids.clone(),
                            "shift_labels": torch.from_numpy(np.ascontiguousarray(w[1:T + 1]))}
                p, n = pieces[i]
                return padded_row(p, n, T)

        dataset = EpochRows()

    def collate(rows):
        return {k: torch.stack([r[k] for r in rows]) for k in rows[0]}

    with open(os.path.join(args.model, "config.json")) as f:
        model_type = json.load(f).get("model_type", "qwen3")
    if model_type not in ("qwen3", "qwen3_moe"):
        sys.exit(f"{args.model}/config.json: model_type {model_type!r} is neither qwen3 nor qwen3_moe")
    model_cls = Qwen3MoeForCausalLM if model_type == "qwen3_moe" else Qwen3ForCausalLM
    model = model_cls.from_pretrained(args.model, dtype=torch.float32, attn_implementation="eager")
    extra = {"optim": args.optim} if args.optim else {}
    eval_set = None
    if args.eval_data:
        ev = read_shard(args.eval_data)
        Re = (len(ev) - 1) // T

        class EvalWindows(torch.utils.data.Dataset):
            def __len__(self):
                return Re

            def __getitem__(self, i):
                w = ev[i * T:i * T + T + 1]
                ids = torch.from_numpy(np.ascontiguousarray(w[:T]))
                return {"input_ids": ids, "labels": ids.clone(),
                        "shift_labels": torch.from_numpy(np.ascontiguousarray(w[1:T + 1]))}

        eval_set = EvalWindows()
        extra.update(eval_strategy="steps", eval_steps=args.eval_steps,
                     per_device_eval_batch_size=args.per_device_eval_batch_size)
    if args.save_steps:
        extra.update(save_strategy="steps", save_steps=args.save_steps, save_only_model=True)
    optimizers = (None, None)
    if args.lr_schedule == "torchtitan" or args.weight_decay_params == "all":
        params = [p for p in model.parameters() if p.requires_grad]
        if args.weight_decay_params == "all":
            groups = [{"params": params, "weight_decay": args.weight_decay}]
        else:
            decay = set(Trainer.get_decay_parameter_names(None, model))
            named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
            groups = [{"params": [p for n, p in named if n in decay], "weight_decay": args.weight_decay},
                      {"params": [p for n, p in named if n not in decay], "weight_decay": 0.0}]
        opt = torch.optim.AdamW(groups, lr=args.learning_rate, betas=(args.adam_beta1, args.adam_beta2),
                                eps=args.adam_epsilon)
        N, W, off = args.schedule_steps or args.max_steps, args.warmup_steps, args.lr_step_offset

        def titan_factor(i):
            """LambdaLR's i (0 for the first step) -> TorchTitan's factor of step k = i + 1 + off."""
            k = i + 1 + off
            if k <= W:
                return k / W
            D = N - W
            peak = N + 1 - W - D
            j = k - W - peak
            return 1.0 if j <= 0 else max(0.0, 1.0 - j / D)

        sched = (torch.optim.lr_scheduler.LambdaLR(opt, titan_factor) if args.lr_schedule == "torchtitan"
                 else transformers.get_scheduler(args.lr_scheduler_type, opt, args.warmup_steps, args.max_steps))
        optimizers = (opt, sched)
    if args.epoch_boundary == "hf":
        extra.update(train_sampling_strategy="sequential", dataloader_drop_last=args.dataloader_drop_last)
        if args.num_train_epochs:
            extra["num_train_epochs"] = args.num_train_epochs
    targs = TrainingArguments(
        output_dir=args.output_dir, max_steps=args.max_steps,
        per_device_train_batch_size=batch, gradient_accumulation_steps=accum,
        learning_rate=args.learning_rate, warmup_steps=args.warmup_steps,
        lr_scheduler_type=args.lr_scheduler_type, weight_decay=args.weight_decay,
        adam_beta1=args.adam_beta1, adam_beta2=args.adam_beta2, adam_epsilon=args.adam_epsilon,
        max_grad_norm=args.max_grad_norm, seed=args.seed, data_seed=args.seed,
        logging_steps=args.logging_steps, logging_first_step=True,
        **({} if args.save_steps else {"save_strategy": "no"}), **({} if args.eval_data else {"eval_strategy": "no"}),
        report_to="none", use_cpu=True, dataloader_num_workers=0, remove_unused_columns=False,
        disable_tqdm=True, **extra)
    class AuxLoggingTrainer(Trainer):
        """The Trainer, unchanged in what it computes; it also logs the MoE aux_loss (mean since the last log)."""

        aux_seen = []

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss, out = super().compute_loss(model, inputs, True, num_items_in_batch)
            if model.training and getattr(out, "aux_loss", None) is not None:
                self.aux_seen.append(float(out.aux_loss))
            return (loss, out) if return_outputs else loss

        def log(self, logs, *a, **kw):
            if "loss" in logs and self.aux_seen:
                logs = {**logs, "aux_loss": sum(self.aux_seen) / len(self.aux_seen)}
                self.aux_seen.clear()
            super().log(logs, *a, **kw)

    trainer = AuxLoggingTrainer(model=model, args=targs, train_dataset=dataset, eval_dataset=eval_set, data_collator=collate,
                      optimizers=optimizers)
    trainer.train()
    os.makedirs(args.output_dir, exist_ok=True)
    trainer.state.save_to_json(os.path.join(args.output_dir, "trainer_state.json"))
    with open(os.path.join(args.output_dir, "training_args.json"), "w") as f:  # TrainingArguments as JSON
        f.write(trainer.args.to_json_string())
    opt = trainer.optimizer
    opt = getattr(opt, "optimizer", opt)  # accelerate's wrapper
    run = {
        **{k: v for k, v in vars(args).items() if k not in ("output_dir", "optim")},
        "tool": "tools/hf_trainer_run.py",
        "model_type": model_type,
        "transformers_version": transformers.__version__, "torch_version": torch.__version__,
        "optim": getattr(trainer.args.optim, "value", trainer.args.optim),
        "optimizer": f"{type(opt).__module__}.{type(opt).__name__}"
                     f"(fused={opt.defaults.get('fused')}, foreach={opt.defaults.get('foreach')})",
        "decay_parameters": sorted(trainer.get_decay_parameter_names(model)),
        "num_windows": R,  # padded mode: the number of pieces (rows)
        "hf_max_steps": trainer.state.max_steps,  # as HF resolved it (--num-train-epochs)
        "hf_num_train_epochs": trainer.state.num_train_epochs,
        "num_tokens": int(len(tokens)),
        # the frozen inputs, so a later portatrain run can check it trains on the same bytes
        "sha256": {name: sha256_file(path) for name, path in (
            ("config.json", os.path.join(args.model, "config.json")),
            ("model.safetensors", os.path.join(args.model, "model.safetensors")),
            ("data", args.data)) if os.path.exists(path)},
    }
    with open(os.path.join(args.output_dir, "hf_run.json"), "w") as f:
        json.dump(run, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {os.path.join(args.output_dir, 'trainer_state.json')}")


if __name__ == "__main__":
    main()
