#!/usr/bin/env python3
"""Token-for-token parity of portatrain's tokenizer with Hugging Face `tokenizers`.

How to run (from the repository root):

    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j --target portatrain
    python3 tools/tokenizer_parity.py --portatrain build/portatrain

It pip-installs `tokenizers` if it is missing, builds the >= 5 MB corpus with tools/build_tokenizer_corpus.py
into --corpus-dir (default /tmp/pt-tokcorpus) unless it is already there, and then checks, on the real Qwen3
tokenizer (--tokenizer, default ../shared/assets/qwen3-tokenizer/tokenizer.json):

  1. corpus parity: `portatrain tokenizer encode --batch` ids == HF `encode(text, add_special_tokens=False)` ids
     for every document, where text = raw_bytes.decode("utf-8", errors="replace") (portatrain's documented
     invalid-UTF-8 behaviour is exactly that replacement);
  2. round trip: portatrain decode(encode(x)) == HF's NFC of x (the tokenizer's own normalizer) == HF
     decode(ids, skip_special_tokens=False), and it is compared with Python's unicodedata NFC for information;
  3. Unicode sweeps (skip with --skip-sweep): every code point through NFC probes (singles, canonical
     reordering, compositions, Hangul) and in pre-tokenizer contexts with the real tokenizer, and the classes
     \\p{L}, \\p{N}, \\s and [^\\s\\p{L}\\p{N}] through Split(..., "removed") variants;
  4. feature variants (skip with --skip-variants): small tokenizers derived from Qwen3 exercising added-token
     flags (lstrip, rstrip, single_word, normalized), legacy "a b" merges, a GPT-2 style ByteLevel-only
     pre-tokenizer with add_prefix_space, every Split behaviour and invert, Digits, NFKC, ignore_merges,
     byte_fallback, unk_token with and without fuse_unk.

--write-fixtures regenerates tests/fixtures/tokenizer/ (a small document subset with HF's expected ids and
decodes, and the small variant tokenizers with theirs), which tests/test_tokenizer.c checks without Python.

--gen-unicode-tables prints the generated C tables of src/data/tokenizer.c (between the BEGIN/END GENERATED
markers): the code points HF's NFC (Unicode 9 data) does not know, and the general categories that
HF's regex engine (Oniguruma, Unicode 16) knows for code points utf8proc leaves unassigned. Use
--update-source to rewrite them in place.

Exit status: 0 when everything is identical, 1 otherwise.
"""
import argparse
import copy
import ctypes
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

try:
    import tokenizers  # noqa: F401
except ImportError:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "tokenizers"])
from tokenizers import Tokenizer, normalizers, pre_tokenizers, Regex  # noqa: E402


# ------------------------------------------------------------------------------------------------
# records and the portatrain CLI

def read_records(path):
    data = open(path, "rb").read()
    out, i = [], 0
    while i < len(data):
        (n,) = struct.unpack_from("<I", data, i)
        i += 4
        out.append(data[i:i + n])
        i += n
    return out


def pack_records(docs):
    return b"".join(struct.pack("<I", len(d)) + d for d in docs)


def pack_ids(ids_lists):
    return b"".join(struct.pack("<I%dI" % len(ids), len(ids), *ids) for ids in ids_lists)


class CLI:
    def __init__(self, exe):
        self.exe = exe

    def encode(self, tok_path, docs):
        r = subprocess.run([self.exe, "tokenizer", "encode", "--batch", "--tokenizer", tok_path],
                           input=pack_records(docs), capture_output=True)
        if r.returncode != 0:
            raise RuntimeError("portatrain encode failed: " + r.stderr.decode(errors="replace"))
        lines = r.stdout.decode().split("\n")[:-1]
        assert len(lines) == len(docs), (len(lines), len(docs))
        return [[int(x) for x in l.split()] for l in lines]

    def decode(self, tok_path, ids_lists):
        inp = "".join(" ".join(map(str, ids)) + "\n" for ids in ids_lists).encode()
        r = subprocess.run([self.exe, "tokenizer", "decode", "--batch", "--tokenizer", tok_path],
                           input=inp, capture_output=True)
        if r.returncode != 0:
            raise RuntimeError("portatrain decode failed: " + r.stderr.decode(errors="replace"))
        out, i, data = [], 0, r.stdout
        while i < len(data):
            (n,) = struct.unpack_from("<I", data, i)
            out.append(data[i + 4:i + 4 + n])
            i += 4 + n
        assert len(out) == len(ids_lists)
        return out


def hf_encode(tok, texts):
    return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]


def first_diff(a, b):
    for j in range(min(len(a), len(b))):
        if a[j] != b[j]:
            return j
    return min(len(a), len(b))


def report(name, labels, c_ids, hf_ids, tok=None, limit=8):
    bad = [k for k in range(len(c_ids)) if c_ids[k] != hf_ids[k]]
    print("%-34s %6d docs  %6d identical  (%.2f%%)" % (name, len(c_ids), len(c_ids) - len(bad),
                                                      100.0 * (len(c_ids) - len(bad)) / max(1, len(c_ids))))
    for k in bad[:limit]:
        j = first_diff(c_ids[k], hf_ids[k])
        show = lambda ids: [(x, tok.id_to_token(x)) if tok else x for x in ids[j:j + 4]]
        print("    MISMATCH %s at token %d: portatrain %s  hf %s" % (labels[k], j, show(c_ids[k]), show(hf_ids[k])))
    return bad


# ------------------------------------------------------------------------------------------------
# 1-2: corpus parity and round trip

def corpus_parity(cli, tok_path, tok, corpus_dir):
    docs = read_records(os.path.join(corpus_dir, "corpus.bin"))
    man = [json.loads(l) for l in open(os.path.join(corpus_dir, "manifest.jsonl"))]
    texts = [d.decode("utf-8", "replace") for d in docs]
    total = sum(len(d) for d in docs)
    cats = {}
    for m in man:
        k = m["category"]
        cats.setdefault(k, [0, 0])
        cats[k][0] += 1
        cats[k][1] += m["bytes"]
    print("corpus: %d documents, %.2f MB, %d categories" % (len(docs), total / 1e6, len(cats)))
    t0 = time.time()
    hf = hf_encode(tok, texts)
    t1 = time.time()
    c = cli.encode(tok_path, docs)
    t2 = time.time()
    print("  encode: hf %.2fs (encode_batch, all threads), portatrain %.2fs (CLI, 1 thread, incl. load)" % (t1 - t0, t2 - t1))
    labels = ["#%d %s %s" % (m["index"], m["category"], m["source"][-50:]) for m in man]
    bad = report("corpus ids", labels, c, hf, tok)
    by_cat = {}
    for k in bad:
        by_cat[man[k]["category"]] = by_cat.get(man[k]["category"], 0) + 1
    if by_cat:
        print("  mismatches by category:", by_cat)
    # round trip
    dec = cli.decode(tok_path, c)
    hf_dec = tok.decode_batch(hf, skip_special_tokens=False)
    norm = tok.normalizer
    rt_bad = rt_hfdec = rt_py = 0
    for k in range(len(docs)):
        got = dec[k].decode("utf-8")
        want = norm.normalize_str(texts[k]) if norm else texts[k]
        if got != want:
            rt_bad += 1
            if rt_bad <= 5:
                j = first_diff(got, want)
                print("    ROUNDTRIP %s at char %d: %r vs %r" % (labels[k], j, got[j:j + 10], want[j:j + 10]))
        if got != hf_dec[k]:
            rt_hfdec += 1
        if got != unicodedata.normalize("NFC", texts[k]):
            rt_py += 1
    print("%-34s %6d docs  %6d identical" % ("round trip == HF NFC(x)", len(docs), len(docs) - rt_bad))
    print("%-34s %6d docs  %6d identical" % ("decode == HF decode", len(docs), len(docs) - rt_hfdec))
    print("%-34s %6d docs  %6d identical  (info: Python %s NFC)" % (
        "round trip == unicodedata NFC(x)", len(docs), len(docs) - rt_py, unicodedata.unidata_version))
    return len(bad) + rt_bad + rt_hfdec, {"docs": len(docs), "bytes": total, "categories": cats,
                                          "mismatches": len(bad), "roundtrip_mismatches": rt_bad}


# ------------------------------------------------------------------------------------------------
# 3: Unicode sweeps

SKIP = set(range(0xD800, 0xE000))


def all_cps():
    return [c for c in range(0x110000) if c not in SKIP]


def chunked(items, n):
    return [items[i:i + n] for i in range(0, len(items), n)]


def sweep(cli, tok_path, tok, name, items, per_doc=128, sep=""):
    """items: list of strings; docs are concatenations; mismatching docs are bisected to single items."""
    groups = chunked(items, per_doc)
    docs = [sep.join(g).encode("utf-8") for g in groups]
    c = cli.encode(tok_path, docs)
    hf = hf_encode(tok, [d.decode("utf-8") for d in docs])
    bad_docs = [k for k in range(len(docs)) if c[k] != hf[k]]
    culprits = []
    if bad_docs:
        singles = [s for k in bad_docs for s in groups[k]]
        sd = [s.encode("utf-8") for s in singles]
        c1 = cli.encode(tok_path, sd)
        h1 = hf_encode(tok, singles)
        culprits = [singles[i] for i in range(len(singles)) if c1[i] != h1[i]]
    print("%-34s %6d docs  %6d identical  (%d items, %d differing items)" % (
        name, len(docs), len(docs) - len(bad_docs), len(items), len(culprits)))
    for s in culprits[:12]:
        print("    DIFF", [hex(ord(x)) for x in s])
    return len(bad_docs), culprits


def qwen_variant(base, pre_tokenizer, normalizer="keep", added="keep"):
    j = copy.deepcopy(base)
    j["pre_tokenizer"] = pre_tokenizer
    if normalizer != "keep":
        j["normalizer"] = normalizer
    if added != "keep":
        j["added_tokens"] = added
    return j


def unicode_sweeps(cli, tok_path, tok, base_json, workdir):
    fails = 0
    cps = [c for c in all_cps() if c not in (0,)]
    marks = [c for c in cps if unicodedata.combining(chr(c)) or 0x300 <= c < 0x370]
    # NFC probes with the real tokenizer
    items = [chr(c) + " " for c in cps]
    f, _ = sweep(cli, tok_path, tok, "sweep NFC single code points", items, per_doc=512)
    fails += f
    lib = utf8proc()
    ccc_marks = [c for c in cps if lib.ccc(c) > 0] if lib else marks
    items = ["a" + chr(m) + "\u0316 " for m in ccc_marks] + ["a\u0345" + chr(m) + " " for m in ccc_marks]
    f, _ = sweep(cli, tok_path, tok, "sweep NFC canonical ordering", items, per_doc=256)
    fails += f
    decomp = [unicodedata.normalize("NFD", chr(c)) for c in cps]
    items = [d + " " for c, d in zip(cps, decomp) if d != chr(c)]
    items += [chr(l) + chr(v) + chr(t) + " " for l in range(0x1100, 0x1113) for v in (0x1161, 0x1175)
              for t in range(0x11A7, 0x11C4)] + ["\uac00" + chr(t) + " " for t in range(0x1100, 0x1200)]
    f, _ = sweep(cli, tok_path, tok, "sweep NFC compositions, Hangul", items, per_doc=256)
    fails += f
    # pre-tokenizer contexts with the real tokenizer
    items = ["a%sb %s%s 1%s'%s ' %s\n\t%s" % ((chr(c),) * 7) for c in cps]
    f, _ = sweep(cli, tok_path, tok, "sweep pre-tokenizer contexts", items, per_doc=128)
    fails += f
    # classes through Split(..., removed)
    for pat in [r"\p{L}", r"\p{N}", r"\s", r"[^\s\p{L}\p{N}]", r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"]:
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pat}, "behavior": "Removed", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
        j = qwen_variant(base_json, pre, normalizer=None, added=[])
        path = os.path.join(workdir, "class.json")
        json.dump(j, open(path, "w"), ensure_ascii=False)
        vt = Tokenizer.from_file(path)
        if pat.startswith("(?i"):
            items = ["'" + chr(c) + " " for c in cps if chr(c).lower() in "stremldv" or chr(c).upper() in "STREMLDV"]
            items += ["'" + a + b + " " for a in "rRvVlL" for b in "eElL"]
        else:
            items = [chr(c) + "|" for c in cps]
        f, _ = sweep(cli, path, vt, "sweep class %s" % pat, items, per_doc=512)
        fails += f
    return fails


# ------------------------------------------------------------------------------------------------
# 4: feature variants on small tokenizers derived from Qwen3

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


B2U = bytes_to_unicode()
U2B = {v: k for k, v in B2U.items()}


def mini_base(base_json, n_merges=400):
    model = base_json["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"][:n_merges]]
    toks = set(B2U.values())
    for a, b in merges:
        toks.add(a + b)
    order = sorted(toks, key=lambda t: model["vocab"][t])
    vocab = {t: i for i, t in enumerate(order)}
    j = copy.deepcopy({k: v for k, v in base_json.items() if k != "model"})
    j["model"] = dict(model, vocab=vocab, merges=[list(m) for m in merges])
    j["added_tokens"] = []
    return j


def with_added(j, specs):
    j = copy.deepcopy(j)
    nxt = len(j["model"]["vocab"])
    out = []
    for s in specs:
        t = {"id": None, "content": s["content"], "single_word": s.get("single_word", False),
             "lstrip": s.get("lstrip", False), "rstrip": s.get("rstrip", False),
             "normalized": s.get("normalized", False), "special": s.get("special", False)}
        if t["content"] in j["model"]["vocab"]:
            t["id"] = j["model"]["vocab"][t["content"]]
        else:
            t["id"] = nxt
            nxt += 1
        out.append(t)
    j["added_tokens"] = out
    return j


QWEN_SPLIT = {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
              "behavior": "Isolated", "invert": False}
BL = lambda aps=False, rx=False: {"type": "ByteLevel", "add_prefix_space": aps, "trim_offsets": False, "use_regex": rx}

ADDED = [
    {"content": "<|endoftext|>", "special": True},
    {"content": "<|im_start|>", "special": True},
    {"content": "<mask>", "lstrip": True, "rstrip": True, "special": True},
    {"content": "<mask>x"},
    {"content": "<word>", "single_word": True},
    {"content": "ab", "single_word": True},
    {"content": "cafe\u0301", "normalized": True},
    {"content": "[sep]", "normalized": True, "special": True, "lstrip": True},
    {"content": " pad ", "rstrip": True},
    {"content": "Ġhi"},
    {"content": "é~ é", "normalized": True, "rstrip": True, "single_word": True},
]


def variants(base_json):
    m = mini_base(base_json)
    v = {}
    v["mini_added"] = with_added(m, ADDED)
    j = copy.deepcopy(m)
    j["model"]["merges"] = ["#version: 0.2"] + [" ".join(x) for x in j["model"]["merges"]]
    j["normalizer"] = None
    j["pre_tokenizer"] = BL(True, True)
    j["decoder"] = BL(True, True)
    v["mini_gpt2_legacy"] = with_added(j, [{"content": "<|endoftext|>", "special": True}])
    j = copy.deepcopy(m)
    j["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKC"}]}
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\d+"}, "behavior": "MergedWithPrevious", "invert": False},
        {"type": "Split", "pattern": {"String": ", "}, "behavior": "MergedWithNext", "invert": False},
        {"type": "Split", "pattern": {"Regex": "[aeiou]"}, "behavior": "Contiguous", "invert": True},
        {"type": "Split", "pattern": {"Regex": "x+|^q|z$"}, "behavior": "Removed", "invert": False},
        {"type": "Split", "pattern": {"Regex": "\\s"}, "behavior": "Isolated", "invert": True},
        {"type": "Digits", "individual_digits": True},
        {"type": "Split", "pattern": {"Regex": "y*"}, "behavior": "Isolated", "invert": False},
        BL(True, False)]}
    v["mini_behaviours"] = with_added(j, [{"content": "<|endoftext|>", "special": True}])
    j = copy.deepcopy(m)
    j["model"]["ignore_merges"] = True
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [QWEN_SPLIT, {"type": "Digits", "individual_digits": False}, BL()]}
    v["mini_ignore_merges"] = j
    # byte fallback / unk: drop every token containing a byte >= 0x80, add <0xXX> tokens and <unk>
    j = copy.deepcopy(m)
    voc = {t: i for t, i in j["model"]["vocab"].items() if all(U2B[ch] < 0x80 for ch in t)}
    order = sorted(voc, key=lambda t: voc[t])
    voc = {t: i for i, t in enumerate(order)}
    for b in [0xC2, 0xC3, 0xC4] + list(range(0x80, 0xC0)):
        voc["<0x%02X>" % b] = len(voc)
    voc["<unk>"] = len(voc)
    j["model"]["vocab"] = voc
    j["model"]["merges"] = [x for x in j["model"]["merges"] if x[0] in voc and x[1] in voc and x[0] + x[1] in voc]
    j["model"]["byte_fallback"] = True
    j["model"]["unk_token"] = "<unk>"
    j["model"]["fuse_unk"] = True
    v["mini_fallback"] = with_added(j, [{"content": "<|endoftext|>", "special": True}])
    k = copy.deepcopy(v["mini_fallback"])
    k["model"]["byte_fallback"] = False
    k["model"]["fuse_unk"] = False
    v["mini_unk"] = k
    k = copy.deepcopy(v["mini_fallback"])
    k["model"]["byte_fallback"] = False
    k["model"]["unk_token"] = None
    v["mini_nounk"] = k
    return v


FEATURE_DOCS = [
    "<mask>", " <mask> ", "a <mask>  b", "a\t<mask>\t<mask>\u2000x", "<mask>x", "<mask> x", "x<mask>x", "<mask><mask>",
    "<word>", " <word> ", "a<word>b", "_<word>", "<word>_", "\u0301<word>", "é<word>", "-<word>-", "ab", " ab ",
    "xab", "abx", "ab.ab", "ab\u0300", "cafe\u0301", "café", "caf\u00e9!", "CAFÉ", "[sep]", "  [sep]", "x  [sep]y",
    " pad ", " pad   x", "  pad  ", "Ġhi", "hi", "é~ é", " é~ é ", "e\u0301~ e\u0301", "xé~ é", "é~ éx",
    "<|endoftext|>", "a<|endoftext|>b", "<|im_start|>user\n", "<|im_start|<|endoftext|>", "",
    "123 4567, 89,, a, b,c", "qq zz z", "xxx yxy", "queue x1x2x3 z", "ﬁ ① ² Ⅻ ｆｕｌｌ", "\u00bd \u2474 \u3392",
    "aeiou bcd aaeebb", "  spaced   out  ", "tab\there", "line\r\nbreak\n\n", "naïve café Ünïcödé",
    "日本語のテキスト", "한국어 텍스트", "مرحبا بالعالم", "emoji 👍🏽 👨‍👩‍👧", "\x80\xff", "bytes \u0100\u0101 \u00e9",
    "don't I'M we'LL", "x" * 300, "1" * 100, "  " * 50,
]


FIXTURE_CORPUS_DOCS = 25


def variant_docs(corpus_docs):
    docs = [d.encode("utf-8") for d in FEATURE_DOCS]
    step = max(1, len(corpus_docs) // 60)
    for d in corpus_docs[::step][:60]:
        cut = d[:300]
        docs.append(cut.decode("utf-8", "ignore").encode("utf-8"))
    return docs


def run_variants(cli, base_json, corpus_docs, workdir):
    docs = variant_docs(corpus_docs)
    texts = [d.decode("utf-8", "replace") for d in docs]
    fails = 0
    results = {}
    for name, j in variants(base_json).items():
        path = os.path.join(workdir, name + ".json")
        json.dump(j, open(path, "w"), ensure_ascii=False)
        vt = Tokenizer.from_file(path)
        hf = hf_encode(vt, texts)
        c = cli.encode(path, docs)
        bad = report("variant " + name, ["doc %d %r" % (k, texts[k][:30]) for k in range(len(docs))], c, hf, vt)
        fails += len(bad)
        dec = cli.decode(path, hf)
        hd = vt.decode_batch(hf, skip_special_tokens=False)
        dbad = sum(1 for a, b in zip(dec, hd) if a.decode("utf-8") != b)
        if dbad:
            print("    decode mismatches:", dbad)
            fails += dbad
        results[name] = (path, hf, hd)
    return fails, docs, results


# ------------------------------------------------------------------------------------------------
# fixtures

def write_fixtures(tok_path, tok, corpus_dir, vdocs, vresults):
    out = os.path.join(ROOT, "tests", "fixtures", "tokenizer")
    os.makedirs(out, exist_ok=True)
    docs = read_records(os.path.join(corpus_dir, "corpus.bin"))
    man = [json.loads(l) for l in open(os.path.join(corpus_dir, "manifest.jsonl"))]
    pick, seen, total = [], {}, 0
    for want_per_key in (1, 2):
        for k, m in enumerate(man):
            key = m["category"] if m["category"] != "synthetic" else "synthetic:" + m["source"].rstrip("0123456789")
            if seen.get(key, 0) >= want_per_key or k in pick:
                continue
            d = docs[k][:2500]
            if not m["category"] == "invalid_utf8":
                d = d.decode("utf-8", "ignore").encode("utf-8")
            if total + len(d) > 110_000:
                continue
            seen[key] = seen.get(key, 0) + 1
            pick.append(k)
            total += len(d)
    pick.sort()
    sub = []
    for k in pick:
        d = docs[k][:2500]
        if man[k]["category"] != "invalid_utf8":
            d = d.decode("utf-8", "ignore").encode("utf-8")
        sub.append(d)
    texts = [d.decode("utf-8", "replace") for d in sub]
    ids = hf_encode(tok, texts)
    dec = tok.decode_batch(ids, skip_special_tokens=False)
    open(os.path.join(out, "qwen3_docs.bin"), "wb").write(pack_records(sub))
    open(os.path.join(out, "qwen3_ids.bin"), "wb").write(pack_ids(ids))
    # expected decode: empty record when equal to the U+FFFD-replaced document itself
    open(os.path.join(out, "qwen3_decoded.bin"), "wb").write(
        pack_records([b"" if dec[i] == texts[i] else dec[i].encode("utf-8") for i in range(len(sub))]))
    nfix = len(FEATURE_DOCS) + FIXTURE_CORPUS_DOCS  # a prefix of the variant documents keeps the fixtures small
    open(os.path.join(out, "variant_docs.bin"), "wb").write(pack_records(vdocs[:nfix]))
    for name, (path, hf, hd) in vresults.items():
        hf = hf[:nfix]
        j = json.load(open(path))
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump(j, f, ensure_ascii=False, separators=(",", ":"))
        open(os.path.join(out, name + "_ids.bin"), "wb").write(pack_ids(hf))
    info = {"generated_by": "tools/tokenizer_parity.py --write-fixtures", "tokenizers_version": tokenizers.__version__,
            "qwen3_tokenizer_sha256": sha256(tok_path), "qwen3_docs": [man[k]["category"] + " " + man[k]["source"] for k in pick],
            "variants": sorted(vresults)}
    json.dump(info, open(os.path.join(out, "manifest.json"), "w"), indent=1, ensure_ascii=False)
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print("fixtures: %d Qwen3 documents (%d bytes), %d variants, %d bytes in %s" % (len(sub), total, len(vresults), size, out))


def sha256(path):
    import hashlib
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


# ------------------------------------------------------------------------------------------------
# generated Unicode tables (HF compatibility)

class utf8proc:
    def __new__(cls):
        try:
            lib = ctypes.CDLL("libutf8proc.so.2")
        except OSError:
            return None
        o = super().__new__(cls)
        lib.utf8proc_get_property.restype = ctypes.POINTER(ctypes.c_int16 * 3)
        lib.utf8proc_category.restype = ctypes.c_int
        lib.utf8proc_map.restype = ctypes.c_ssize_t
        lib.utf8proc_map.argtypes = [ctypes.c_char_p, ctypes.c_ssize_t, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
        o.lib = lib
        return o

    def ccc(self, c):
        return self.lib.utf8proc_get_property(c).contents[1]

    def category(self, c):
        return self.lib.utf8proc_category(c)

    def map(self, s, opts):
        b = s.encode("utf-8")
        p = ctypes.c_void_p()
        n = self.lib.utf8proc_map(b, len(b), ctypes.byref(p), opts)
        if n < 0:
            return None
        r = ctypes.string_at(p, n).decode("utf-8")
        ctypes.CDLL(None).free(p)
        return r


CATS = ["Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf",
        "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"]


def onig_matches(pat, cps):
    pt = pre_tokenizers.Split(Regex(pat), "removed")
    keep = set()
    for g in chunked(cps, 4096):
        for piece, (a, b) in pt.pre_tokenize_str("".join(chr(c) for c in g)):
            keep.update(g[a:b])
    return [c for c in cps if c not in keep]


def ranges(cps):
    out = []
    for c in sorted(cps):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def gen_unicode_tables():
    u = utf8proc()
    if not u:
        sys.exit("libutf8proc.so.2 not found")
    N = normalizers.NFC()
    K = normalizers.NFKC()
    NFC, NFKC = 2 | 8, 2 | 8 | 4  # UTF8PROC_STABLE | COMPOSE (| COMPAT)
    cps = [c for c in all_cps() if c not in (10, 13, 0x0b, 0x0c, 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029)]
    inert = set()
    for c in cps:
        s = chr(c)
        if N.normalize_str(s) != u.map(s, NFC) or K.normalize_str(s) != u.map(s, NFKC):
            inert.add(c)
    for c in cps:
        if u.ccc(c) > 0:
            for s in ("a" + chr(c) + "\u0316", "a\u0345" + chr(c)):
                if N.normalize_str(s) != u.map(s, NFC):
                    inert.add(c)
    for c in cps:
        d = unicodedata.normalize("NFD", chr(c))
        if d != chr(c) and N.normalize_str(d) != u.map(d, NFC):
            inert.add(ord(d[-1]))
    for l in range(0x1100, 0x1113):
        for v in (0x1161, 0x1175):
            for t in range(0x11A7, 0x11C4):
                s = chr(l) + chr(v) + chr(t)
                if N.normalize_str(s) != u.map(s, NFC):
                    inert.add(t)
    # categories Oniguruma knows for code points utf8proc leaves unassigned
    unassigned = [c for c in all_cps() if u.category(c) == 0 and not (0xF0000 <= c)]
    assigned_onig = set(unassigned) - set(onig_matches(r"\p{Cn}", unassigned))
    cand = sorted(assigned_onig)
    newcat = {}
    for i, name in enumerate(CATS):
        if i == 0:
            continue
        for c in onig_matches(r"\p{%s}" % name, cand):
            newcat[c] = i
    lines = ["/* BEGIN GENERATED by tools/tokenizer_parity.py --gen-unicode-tables (HF tokenizers %s) */" % tokenizers.__version__,
             "// Code points HF tokenizers' normalizers (Unicode 9 data) leave alone while utf8proc would reorder,",
             "// (de)compose or drop them: copied through unchanged, splitting the text around them.",
             "static const uint32_t hf_norm_inert[][2] = {"]
    rs = ranges(inert)
    for i in range(0, len(rs), 6):
        lines.append("    " + " ".join("{0x%X, 0x%X}," % (a, b) for a, b in rs[i:i + 6]))
    lines += ["};", "// General categories of code points that HF's regex engine (Oniguruma) knows and utf8proc does not.",
              "static const struct {", "    uint32_t lo, hi;", "    uint8_t cat;  // utf8proc_category_t", "} hf_new_cats[] = {"]
    byc = {}
    for c, k in newcat.items():
        byc.setdefault(k, []).append(c)
    items = []
    for k, cs in byc.items():
        for a, b in ranges(cs):
            items.append((a, b, k))
    items.sort()
    for i in range(0, len(items), 5):
        lines.append("    " + " ".join("{0x%X, 0x%X, %d}," % it for it in items[i:i + 5]))
    if not items:
        lines.append("    {0, 0, 0},")
    lines += ["};", "/* END GENERATED */"]
    print("generated: %d inert code points (%d ranges), %d newly assigned code points (%d ranges)" % (
        len(inert), len(rs), len(newcat), len(items)), file=sys.stderr)
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description="portatrain tokenizer vs HF tokenizers parity")
    ap.add_argument("--portatrain", default=None, help="portatrain binary (default: build/portatrain or build-tok/portatrain)")
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "..", "shared", "assets", "qwen3-tokenizer", "tokenizer.json"))
    ap.add_argument("--corpus-dir", default="/tmp/pt-tokcorpus")
    ap.add_argument("--skip-sweep", action="store_true")
    ap.add_argument("--skip-variants", action="store_true")
    ap.add_argument("--write-fixtures", action="store_true")
    ap.add_argument("--gen-unicode-tables", action="store_true")
    ap.add_argument("--update-source", action="store_true", help="with --gen-unicode-tables: rewrite src/data/tokenizer.c")
    ap.add_argument("--json-summary", default=None, help="write a JSON summary here")
    a = ap.parse_args()
    if a.gen_unicode_tables:
        text = gen_unicode_tables()
        if a.update_source:
            p = os.path.join(ROOT, "src", "data", "tokenizer.c")
            src = open(p).read()
            b = src.index("/* BEGIN GENERATED")
            e = src.index("/* END GENERATED */") + len("/* END GENERATED */\n")
            open(p, "w").write(src[:b] + text + src[e:])
            print("updated", p)
        else:
            sys.stdout.write(text)
        return 0
    exe = a.portatrain
    if not exe:
        for cand in ("build/portatrain", "build-tok/portatrain"):
            if os.path.exists(os.path.join(ROOT, cand)):
                exe = os.path.join(ROOT, cand)
                break
    if not exe or not os.path.exists(exe):
        sys.exit("portatrain binary not found; build it and pass --portatrain PATH")
    cli = CLI(exe)
    if not os.path.exists(os.path.join(a.corpus_dir, "corpus.bin")):
        subprocess.check_call([sys.executable, os.path.join(ROOT, "tools", "build_tokenizer_corpus.py"), "--out", a.corpus_dir])
    print("tokenizers %s, tokenizer %s (sha256 %s)" % (tokenizers.__version__, a.tokenizer, sha256(a.tokenizer)[:16]))
    tok = Tokenizer.from_file(a.tokenizer)
    base_json = json.load(open(a.tokenizer))
    fails, summary = corpus_parity(cli, a.tokenizer, tok, a.corpus_dir)
    with tempfile.TemporaryDirectory() as work:
        if not a.skip_sweep:
            fails += unicode_sweeps(cli, a.tokenizer, tok, base_json, work)
        vdocs, vres = None, None
        if not a.skip_variants or a.write_fixtures:
            f, vdocs, vres = run_variants(cli, base_json, read_records(os.path.join(a.corpus_dir, "corpus.bin")), work)
            fails += f
        if a.write_fixtures:
            write_fixtures(a.tokenizer, tok, a.corpus_dir, vdocs, vres)
    if a.json_summary:
        json.dump(dict(summary, failures=fails), open(a.json_summary, "w"), indent=1)
    print("RESULT: %s" % ("all identical" if fails == 0 else "%d differences" % fails))
    return 0 if fails == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
