#!/usr/bin/env python3
"""Assemble the tokenizer parity corpus (>= 5 MB) from real text on a Debian machine plus synthetic edge cases.

Usage:
    python3 tools/build_tokenizer_corpus.py --out /tmp/pt-tokcorpus [--scale 1.0]

Writes, under --out:
    corpus.bin       the documents as records: uint32 little-endian length, then the raw bytes
    manifest.jsonl   one JSON object per document: index, category, source, bytes

Every source is real text installed by Debian packages or the Python standard library, read in a fixed
(sorted) order, so the corpus is the same on machines with the same packages. Nothing is downloaded.

Categories:
    en_prose     Debian package documentation (copyright, README, NEWS, changelogs) - English prose
    en_man       English manual pages (roff source)
    code_python  Python standard library sources
    code_c       C headers from /usr/include
    man_<lang>   translated manual pages (ja, ko, zh_CN, zh_TW, ru, de, fr, pl, ...)
    po_<lang>    gettext translations (.mo catalogs, parsed with Python's gettext): Chinese, Japanese,
                 Korean, Arabic, Hindi, Hebrew, Thai, Bengali, Tamil, Russian, Greek, Persian, ...
    nfd          NFD-decomposed copies of accented / Hangul / kana text (NFC matters)
    synthetic    emoji and ZWJ sequences, combining marks, whitespace runs, tabs, \\r\\n, digit runs,
                 contractions in any case, inline special tokens, control characters, long words
    invalid_utf8 real documents with invalid UTF-8 bytes injected, and Latin-1 encoded text
"""
import argparse
import gettext
import glob
import gzip
import json
import os
import random
import struct
import sys
import sysconfig
import unicodedata

MAX_DOC = 16 * 1024


def read_text(path):
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                data = f.read()
        else:
            with open(path, "rb") as f:
                data = f.read()
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError):
        return None


def split_docs(text, max_doc=MAX_DOC):
    """Splits text into documents of at most max_doc UTF-8 bytes at line boundaries."""
    docs, cur, size = [], [], 0
    for line in text.splitlines(keepends=True):
        b = len(line.encode("utf-8"))
        if cur and size + b > max_doc:
            docs.append("".join(cur))
            cur, size = [], 0
        cur.append(line)
        size += b
    if cur:
        docs.append("".join(cur))
    return docs


class Corpus:
    def __init__(self):
        self.docs = []  # (category, source, bytes)

    def add(self, cat, src, data):
        if isinstance(data, str):
            data = data.encode("utf-8")
        if data:
            self.docs.append((cat, src, data))

    def fill(self, cat, paths, budget, reader=read_text, max_doc=MAX_DOC):
        used = 0
        for p in paths:
            if used >= budget:
                break
            text = reader(p)
            if not text or not text.strip():
                continue
            for d in split_docs(text, max_doc):
                if used >= budget:
                    break
                self.add(cat, p, d)
                used += len(d.encode("utf-8"))
        return used


def mo_reader(path):
    try:
        with open(path, "rb") as f:
            t = gettext.GNUTranslations(f)
    except Exception:
        return None
    out = []
    for k, v in sorted(t._catalog.items(), key=lambda kv: str(kv[0])):
        if k == "" or not isinstance(v, str):
            continue
        out.append(v)
    return "\n".join(out) + "\n"


def synthetic_docs(rng):
    docs = []
    emoji = ["😀", "👍", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸", "🇯🇵", "1️⃣", "❤️", "🧑🏿‍🚀", "👩‍💻", "🐈‍⬛",
             "🤷‍♀️", "🫠", "🦀", "✈︎", "☺", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "👁‍🗨", "🙇🏻‍♂️"]
    marks = [chr(c) for c in range(0x300, 0x370)] + ["\u0483", "\u0591", "\u05b0", "\u0610", "\u064b", "\u0670",
                                                     "\u093c", "\u094d", "\u0e31", "\u0e48", "\u1ab0", "\u20d0",
                                                     "\u302a", "\u3099", "\u309a", "\ufe20"]
    words = ["the", "The", "THE", "tokenizer", "naïve", "café", "résumé", "Straße", "İstanbul", "ǅemal", "ﬁne",
             "東京", "北京大学", "こんにちは", "カタカナ", "한국어", "مرحبا", "नमस्ते", "Привет", "γειά", "שלום",
             "สวัสดี", "ሰላም", "ᏣᎳᎩ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝟙𝟚𝟛", "x²", "½", "Ⅻ", "①", "٣٤٥", "१२३", "１２３"]
    specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
                "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|vision_start|>", "<|image_pad|>",
                "<|im_sta", "<think", "think>", "<|", "|>", "<<think>>", "<|im_start|><|im_end|>", "<think></think>"]
    contractions = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL", "'D",
                    "'Re", "'rE", "'Ll", "'lL", "'Ve", "'ſ", "’s", "'x", "''s", "' s"]
    spaces = [" ", "  ", "\t", "\t\t", "\n", "\r\n", "\r", "\n\n", " \n", "\u00a0", "\u3000", "\u2003", "\u200b",
              "\u0085", "\u2028", "\u2029", "\u180e", "\ufeff", "\x0b", "\x0c", "\x1f", "\x00"]

    # 1. emoji and ZWJ sequences in prose
    for i in range(40):
        parts = []
        for _ in range(rng.randint(50, 300)):
            r = rng.random()
            if r < 0.3:
                parts.append(rng.choice(emoji))
            elif r < 0.8:
                parts.append(rng.choice(words))
            else:
                parts.append(rng.choice(spaces[:6]))
            if rng.random() < 0.6:
                parts.append(" ")
        docs.append(("synthetic", "emoji", "".join(parts)))
    # 2. combining marks (stacked, reordered, on all sorts of bases)
    bases = "aeiouAEIOUnNcCsSzZyYkKgGhHwWxXαβγабвאבت한अक" + "0 ._-"
    for i in range(40):
        parts = []
        for _ in range(rng.randint(100, 600)):
            parts.append(rng.choice(bases))
            for _ in range(rng.choice([0, 0, 1, 1, 2, 3, 5])):
                parts.append(rng.choice(marks))
            if rng.random() < 0.2:
                parts.append(" ")
        docs.append(("synthetic", "combining", "".join(parts)))
    # 3. whitespace: long runs, tabs, CRLF, mixed Unicode spaces
    for n in [1, 2, 3, 7, 16, 100, 1000, 5000, 20000]:
        docs.append(("synthetic", "spaces%d" % n, "a" + " " * n + "b" + " " * n + "\n" + " " * n))
        docs.append(("synthetic", "tabs%d" % n, "x\t" + "\t" * n + "y" + "\t \t" * (n // 3 + 1) + "z"))
        docs.append(("synthetic", "newlines%d" % n, "p" + "\n" * n + "q" + "\r\n" * n + "r" + " \r\n" * n))
    for i in range(30):
        parts = []
        for _ in range(rng.randint(200, 800)):
            parts.append(rng.choice(spaces) * rng.choice([1, 1, 2, 3, 8]))
            parts.append(rng.choice(words + ["a", "1", ".", "-", "'", "'s"]))
        docs.append(("synthetic", "whitespace-mix", "".join(parts)))
    crlf = "line one\r\nline two\r\n\r\n  indented\r\n\tTabbed\r\nend\r\n"
    docs.append(("synthetic", "crlf", crlf * 200))
    # 4. digits
    for i in range(20):
        parts = []
        for _ in range(rng.randint(100, 400)):
            k = rng.choice([1, 2, 3, 4, 5, 8, 12, 20, 64])
            parts.append("".join(rng.choice("0123456789") for _ in range(k)))
            parts.append(rng.choice([" ", ",", ".", "-", "/", ":", "e", "E+", "x", "\n", "", "%", "$", "٫"]))
            if rng.random() < 0.1:
                parts.append(rng.choice(["٣٤٥", "१२३", "１２３", "²³", "½", "Ⅻ", "①②", "𝟙𝟚", "᪐᪑"]))
        docs.append(("synthetic", "digits", "".join(parts)))
    docs.append(("synthetic", "digits-long", "".join(rng.choice("0123456789") for _ in range(30000))))
    # 5. contractions in upper and lower case
    for i in range(20):
        parts = []
        for _ in range(rng.randint(200, 600)):
            w = rng.choice(["I", "you", "we", "they", "it", "that", "don", "can", "won", "IT", "THEY", "O", "y",
                            "rock", "n", "", " ", "ROCK"])
            parts.append(w + rng.choice(contractions) + rng.choice([" ", "", ",", ".", "\n", "s", "S", "'"]))
        docs.append(("synthetic", "contractions", "".join(parts)))
    # 6. special tokens inline, chat templates
    for i in range(40):
        parts = []
        for _ in range(rng.randint(50, 250)):
            r = rng.random()
            if r < 0.35:
                parts.append(rng.choice(specials))
            elif r < 0.7:
                parts.append(rng.choice(words))
            else:
                parts.append(rng.choice(spaces[:8] + marks[:4]))
        docs.append(("synthetic", "specials", "".join(parts)))
    chat = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat's 2+2? "
            "Don't think too long.<|im_end|>\n<|im_start|>assistant\n<think>\nThe user asks 2+2. That's 4.\n"
            "</think>\n\n2 + 2 = **4**.<|im_end|>\n<|endoftext|>")
    docs.append(("synthetic", "chat", chat * 60))
    # 7. long words, URLs, base64, hex, code-like punctuation runs
    alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/"
    for i in range(10):
        docs.append(("synthetic", "base64", "".join(rng.choice(alnum) for _ in range(rng.randint(2000, 12000)))))
    docs.append(("synthetic", "long-word", "a" * 20000 + " " + "ab" * 5000 + " " + "東" * 3000 + "!" * 4000))
    docs.append(("synthetic", "punct", "".join(rng.choice("!@#$%^&*()[]{};:'\",.<>/?\\|`~-_=+") for _ in range(20000))))
    docs.append(("synthetic", "urls", " ".join("https://example.org/%s?q=%d&x=%s#frag" % (
        "".join(rng.choice(alnum[:36]) for _ in range(12)), rng.randint(0, 10 ** 6), rng.choice(words))
        for _ in range(400))))
    # 8. control characters, noncharacters, private use, unassigned, surrogate-free odd code points
    odd = [chr(c) for c in list(range(0, 32)) + [0x7f, 0x80, 0x9f, 0xad, 0x34f, 0x61c, 0x200d, 0x200e, 0x2066,
                                                0xfe0f, 0xfff9, 0xfffc, 0xfffd, 0xfffe, 0xffff, 0xe000, 0xf8ff,
                                                0xf0000, 0x10ffff, 0x1fffe, 0xe0001, 0xe0041, 0x0378, 0x2fffe]]
    for i in range(10):
        docs.append(("synthetic", "odd", "".join(rng.choice(odd + words + [" "]) for _ in range(rng.randint(500, 2000)))))
    # 9. random code points from many blocks
    ranges = [(0x20, 0x7e), (0xa0, 0x24f), (0x370, 0x52f), (0x590, 0x6ff), (0x900, 0xdff), (0xe00, 0xeff),
              (0x1100, 0x11ff), (0x1e00, 0x1fff), (0x2000, 0x2bff), (0x3000, 0x30ff), (0x4e00, 0x9fff),
              (0xac00, 0xd7a3), (0xf900, 0xfaff), (0xfb00, 0xfdff), (0xfe00, 0xffef), (0x10000, 0x1047f),
              (0x1d400, 0x1d7ff), (0x1f300, 0x1faff), (0x20000, 0x2a6df)]
    for i in range(40):
        lo, hi = rng.choice(ranges)
        s = []
        for _ in range(rng.randint(300, 2000)):
            if rng.random() < 0.15:
                lo, hi = rng.choice(ranges)
            s.append(chr(rng.randint(lo, hi)))
        docs.append(("synthetic", "random-codepoints", "".join(s)))
    return docs


def corrupt(data, rng):
    bad = [b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xed\xbf\xbf",
           b"\xf4\x90\x80\x80", b"\xf5", b"\xff", b"\xfe", b"\xc3", b"\xe4\xb8", b"\xf0\x9f\x98", b"\xf0\x9f",
           b"\xe2\x82", b"\xc2", b"\x80\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xfc\x84\x80\x80\x80\x80"]
    b = bytearray(data)
    for _ in range(max(1, len(b) // 300)):
        pos = rng.randint(0, len(b))
        if rng.random() < 0.3 and pos < len(b):
            # cut in the middle of a multi-byte character, or drop a byte
            del b[pos]
        else:
            b[pos:pos] = rng.choice(bad)
    return bytes(b)


def build(out_dir, scale=1.0):
    rng = random.Random(20240503)
    c = Corpus()
    S = lambda n: int(n * scale)

    docs = sorted(glob.glob("/usr/share/doc/*/copyright"))
    docs += sorted(glob.glob("/usr/share/doc/*/README*") + glob.glob("/usr/share/doc/*/NEWS*"))
    docs += sorted(glob.glob("/usr/share/doc/*/changelog*"))
    c.fill("en_prose", docs, S(1_600_000))
    c.fill("en_man", sorted(glob.glob("/usr/share/man/man1/*.gz")) + sorted(glob.glob("/usr/share/man/man5/*.gz")),
           S(500_000))
    stdlib = sysconfig.get_paths()["stdlib"]
    py = sorted(glob.glob(os.path.join(stdlib, "*.py"))) + sorted(glob.glob(os.path.join(stdlib, "*", "*.py")))
    c.fill("code_python", py, S(1_000_000))
    hdr = sorted(glob.glob("/usr/include/*.h")) + sorted(glob.glob("/usr/include/*/*.h"))
    c.fill("code_c", hdr, S(400_000))
    for lang, budget in [("ja", 120_000), ("ko", 100_000), ("zh_CN", 100_000), ("zh_TW", 60_000), ("ru", 80_000),
                         ("de", 60_000), ("fr", 60_000), ("pl", 40_000), ("uk", 40_000), ("es", 40_000)]:
        c.fill("man_" + lang, sorted(glob.glob("/usr/share/man/%s/man*/*.gz" % lang)), S(budget))
    po_langs = [("zh_CN", 150_000), ("zh_TW", 100_000), ("ja", 150_000), ("ko", 150_000), ("ar", 150_000),
                ("hi", 150_000), ("he", 80_000), ("th", 80_000), ("bn", 80_000), ("ta", 80_000), ("ru", 100_000),
                ("el", 60_000), ("fa", 60_000), ("vi", 60_000), ("uk", 60_000), ("ka", 40_000), ("am", 30_000),
                ("km", 30_000), ("my", 30_000), ("si", 30_000), ("te", 30_000), ("ml", 30_000), ("gu", 30_000),
                ("pa", 30_000), ("ur", 30_000), ("tr", 40_000), ("pt_BR", 40_000), ("fr", 40_000), ("de", 40_000)]
    for lang, budget in po_langs:
        c.fill("po_" + lang, sorted(glob.glob("/usr/share/locale/%s/LC_MESSAGES/*.mo" % lang)), S(budget),
               reader=mo_reader, max_doc=8 * 1024)
    # NFD copies: accented Latin, Vietnamese, Hangul, kana with dakuten
    nfd_src = [d for d in c.docs if d[0] in ("po_vi", "po_fr", "po_de", "po_ko", "po_ja", "man_de", "man_fr",
                                             "po_pt_BR", "po_tr", "po_el")]
    used = 0
    for cat, src, data in nfd_src[::3]:
        if used >= S(300_000):
            break
        d = unicodedata.normalize("NFD", data.decode("utf-8")).encode("utf-8")
        c.add("nfd", src + " (NFD)", d)
        used += len(d)
    for cat, src, text in synthetic_docs(rng):
        c.add(cat, src, text)
    # invalid UTF-8: corrupted real documents, and Latin-1 encoded French/German
    real = [d for d in c.docs if d[0].startswith(("po_", "man_", "en_", "code_"))]
    used = 0
    for cat, src, data in rng.sample(real, min(len(real), 60)):
        if used >= S(200_000):
            break
        d = corrupt(data[:8192], rng)
        c.add("invalid_utf8", src + " (corrupted)", d)
        used += len(d)
    for cat, src, data in [d for d in c.docs if d[0] in ("po_fr", "po_de", "man_fr", "man_de")][:20]:
        try:
            c.add("invalid_utf8", src + " (latin-1)", data.decode("utf-8").encode("latin-1"))
        except UnicodeEncodeError:
            pass
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "corpus.bin"), "wb") as f, open(os.path.join(out_dir, "manifest.jsonl"), "w") as m:
        for i, (cat, src, data) in enumerate(c.docs):
            f.write(struct.pack("<I", len(data)))
            f.write(data)
            m.write(json.dumps({"index": i, "category": cat, "source": src, "bytes": len(data)}) + "\n")
    return c.docs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="/tmp/pt-tokcorpus")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every category budget")
    a = ap.parse_args()
    docs = build(a.out, a.scale)
    total = sum(len(d[2]) for d in docs)
    cats = {}
    for cat, _, data in docs:
        k = cat.split("_")[0] if cat.startswith(("po_", "man_")) else cat
        cats.setdefault(k, [0, 0])
        cats[k][0] += 1
        cats[k][1] += len(data)
    for k, (n, b) in sorted(cats.items()):
        print("%-14s %6d docs %10d bytes" % (k, n, b))
    print("total          %6d docs %10d bytes -> %s" % (len(docs), total, os.path.join(a.out, "corpus.bin")))


if __name__ == "__main__":
    sys.exit(main())
