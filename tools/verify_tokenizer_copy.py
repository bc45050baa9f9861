#!/usr/bin/env python3
"""Check that two Hugging Face tokenizer.json files define the same tokenizer.

    python3 tools/verify_tokenizer_copy.py CANDIDATE REFERENCE

Exit 0 when the files are byte-identical (same sha256), or when their parsed
contents agree on everything that decides the token ids: the model (type,
vocabulary, merges -- "a b" strings and ["a","b"] pairs are treated alike --,
unk/byte_fallback/ignore_merges/dropout/prefix/suffix), the added tokens, the
normalizer, the pre-tokenizer, the post-processor and the decoder. Exit 1 with
the first differences otherwise, 2 on a usage or read error. Standard library
only (no `tokenizers` needed).
"""
import hashlib
import json
import sys


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def merges(model):
    out = []
    for m in model.get("merges") or []:
        if isinstance(m, str):
            a, sep, b = m.partition(" ")
            if not sep:
                raise ValueError(f"merge without a space: {m!r}")
            out.append((a, b))
        else:
            out.append(tuple(m))
    return out


def canonical(tok):
    model = dict(tok.get("model") or {})
    fields = {
        "model.type": model.get("type"),
        "model.vocab": model.get("vocab"),
        "model.merges": merges(model),
    }
    for k in ("unk_token", "byte_fallback", "ignore_merges", "dropout", "continuing_subword_prefix",
              "end_of_word_suffix", "fuse_unk"):
        fields["model." + k] = model.get(k)
    fields["added_tokens"] = sorted((t.get("id"), json.dumps(t, sort_keys=True)) for t in tok.get("added_tokens") or [])
    for k in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        fields[k] = json.dumps(tok.get(k), sort_keys=True)
    return fields


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    cand, ref = argv[1], argv[2]
    try:
        hc, hr = sha256(cand), sha256(ref)
    except OSError as e:
        print(f"verify_tokenizer_copy: {e}", file=sys.stderr)
        return 2
    print(f"candidate {hc}  {cand}")
    print(f"reference {hr}  {ref}")
    if hc == hr:
        print("identical: same sha256")
        return 0
    try:
        with open(cand, encoding="utf-8") as f:
            a = canonical(json.load(f))
        with open(ref, encoding="utf-8") as f:
            b = canonical(json.load(f))
    except (OSError, ValueError) as e:
        print(f"verify_tokenizer_copy: cannot parse: {e}", file=sys.stderr)
        return 2
    diffs = [k for k in a if a[k] != b[k]]
    if not diffs:
        va, ma = len(a["model.vocab"] or {}), len(a["model.merges"])
        print(f"equivalent: different bytes, same parsed tokenizer ({va} tokens, {ma} merges, "
              f"{len(a['added_tokens'])} added tokens)")
        return 0
    for k in diffs:
        x, y = a[k], b[k]
        if isinstance(x, dict) and isinstance(y, dict):
            only_a = len(set(x) - set(y))
            only_b = len(set(y) - set(x))
            changed = sum(1 for t in set(x) & set(y) if x[t] != y[t])
            print(f"DIFFERS {k}: {only_a} entries only in the candidate, {only_b} only in the reference, {changed} changed")
        elif isinstance(x, list) and isinstance(y, list):
            first = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
            print(f"DIFFERS {k}: lengths {len(x)} vs {len(y)}, first difference at index {first}")
        else:
            print(f"DIFFERS {k}: {str(x)[:200]} vs {str(y)[:200]}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
