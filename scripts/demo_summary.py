#!/usr/bin/env python3
"""The end of `make demo`: one line per experiment (verdict, wall time, report) and, with --prune, the
checkpoints no report links to removed, then how much the output directory holds.

usage: demo_summary.py [--prune] OUT...     (OUT: a `portatrain accept --output-dir`)

What a report links to is kept: its baseline and candidate run directories (report.json's run_dir), their
final weights, metrics, eval and manifest, and their checkpoint-M (M = the report's checkpoint_step: the
checkpoint its portability rows are about, which a later `accept --baseline-run` restores from). Every
other checkpoint-K directory inside OUT is removed: the final checkpoints (the final weights are
model.safetensors), the portability copies and the recovery run's. Each is a few times the model's size
(weights plus both AdamW moments), most of a demo's disk. An OUT without report.json (an experiment
that did not finish) is listed and left untouched. A `checkpoint-K` symlink (a --baseline-run's files are
linked, not copied) is never followed; it is removed only when what it pointed to is gone. A run's
`latest` that named a removed checkpoint is pointed at the newest one kept (written as the trainer writes
it: temp file, rename), so `ckpt verify RUN` and `--resume-from-checkpoint latest` find what is there.
"""
import json
import os
import re
import shutil
import sys

CKPT = re.compile(r"^checkpoint-[0-9]+$")


def human(n):
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def tree_bytes(path):
    """Bytes of the regular files under path (symlinks not followed: a linked baseline counts once)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            if not os.path.islink(p):
                total += os.lstat(p).st_size
    return total


def minutes(s):
    s = int(round(s))
    return f"{s // 60}m{s % 60:02d}s"


def load_report(out):
    path = os.path.join(out, "report.json")
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def kept_checkpoints(out, report):
    """Real paths of the checkpoints the report links to: checkpoint-M of its baseline and candidate (as
    recorded, and the same run's name under OUT, should OUT have been moved since)."""
    steps = {report.get("settings", {}).get("checkpoint_step")}
    steps |= {p.get("checkpoint_step") for p in report.get("portability", [])}
    keep = set()
    for side in ("baseline", "candidate"):
        run = report.get(side, {}).get("run_dir")
        for m in steps - {None}:
            for d in (run, os.path.join(out, os.path.basename(run.rstrip("/")))) if run else ():
                keep.add(os.path.realpath(os.path.join(d, f"checkpoint-{int(m)}")))
    return keep


def checkpoint_dirs(out):
    """checkpoint-K directories under out (real ones, not symlinks), each holding checkpoint.json."""
    for root, dirs, _files in os.walk(out):
        for d in list(dirs):
            p = os.path.join(root, d)
            if CKPT.match(d) and not os.path.islink(p) and os.path.isfile(os.path.join(p, "checkpoint.json")):
                dirs.remove(d)  # nothing of a checkpoint's inside is a run
                yield p


def dangling_checkpoint_links(out):
    for root, dirs, files in os.walk(out):
        for name in dirs + files:  # os.walk lists a dangling link among the files
            p = os.path.join(root, name)
            if CKPT.match(name) and os.path.islink(p) and not os.path.exists(p):
                yield p


def prune(outs, reports):
    keep = set()
    for out, r in reports.items():
        keep |= kept_checkpoints(out, r)
    freed = 0
    for out in outs:
        if out not in reports:
            continue
        for p in list(checkpoint_dirs(out)):
            if os.path.realpath(p) not in keep:
                freed += tree_bytes(p)
                shutil.rmtree(p)
    for out in outs:
        if out in reports:
            for p in list(dangling_checkpoint_links(out)):
                os.unlink(p)
            repoint_latest(out)
    return freed


def repoint_latest(out):
    for root, dirs, files in os.walk(out):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
        if "latest" not in files or os.path.islink(os.path.join(root, "latest")):
            continue
        with open(os.path.join(root, "latest")) as f:
            name = f.read().strip()
        if os.path.isdir(os.path.join(root, name)):
            continue
        kept = sorted((int(d.split("-")[1]), d) for d in os.listdir(root)
                      if CKPT.match(d) and os.path.isdir(os.path.join(root, d)))
        if not kept:
            os.unlink(os.path.join(root, "latest"))
            continue
        tmp = os.path.join(root, ".latest.tmp-demo")
        with open(tmp, "w") as f:
            f.write(kept[-1][1] + "\n")
        os.replace(tmp, os.path.join(root, "latest"))


def candidate_cost(r):
    """The candidate's own cost (its phases in this experiment, report.json cost.by_side): the same basis in every
    experiment, whether its baseline ran in it or was recorded before (a recorded baseline's training is not
    billed again, so experiment totals are not comparable)."""
    c = r.get("cost", {})
    v = c.get("by_side", {}).get("candidate", {}).get("cost")
    if v is None:
        return "-"
    return f"{c.get('currency', 'USD')} {v:.4f}"


def main(argv):
    do_prune = "--prune" in argv
    outs = [a.rstrip("/") or "/" for a in argv if a != "--prune"]
    if not outs:
        print("usage: demo_summary.py [--prune] OUT...", file=sys.stderr)
        return 2
    reports = {}
    for out in outs:
        if not os.path.isdir(out):
            continue
        try:
            r = load_report(out)
        except (OSError, ValueError) as e:
            print(f"demo: {out}/report.json: unreadable ({e})", file=sys.stderr)
            r = None
        if r is not None:
            reports[out] = r
    freed = prune(outs, reports) if do_prune else 0
    print("\nsummary (verdict, wall time, the candidate's own cost: its phases at configs/prices.json, the same basis "
          "in every experiment):")
    for out in outs:
        r = reports.get(out)
        if r is None:
            print(f"  {'-':<9} {'-':>8}  {out}: no report.json (did not finish)")
            continue
        title = f"{r.get('baseline', {}).get('spec', '?')} -> {r.get('candidate', {}).get('spec', '?')}"
        print(f"  {r.get('verdict', '?'):<9} {minutes(r.get('wall_s', 0)):>8}  {candidate_cost(r):>11}  {out}/report.html  ({title})")
    present = [o for o in outs if os.path.isdir(o)]
    parent = os.path.commonpath([os.path.dirname(os.path.abspath(o)) for o in present]) if present else None
    if parent:
        shown = os.path.relpath(parent)
        shown = parent if shown.startswith("..") else shown
        line = f"  {shown}/ holds {human(tree_bytes(parent))}"
        if do_prune:
            line += f" (removed {human(freed)} of checkpoints no report links to)"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
