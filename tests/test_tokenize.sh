#!/usr/bin/env bash
# portatrain tokenize: shard header fields, dataset.json, ids (checked against
# Hugging Face tokenizers 0.23.3), --lines / --text-field, determinism across
# --threads, several shards, the progress bar on a terminal, and the errors.
set -u
BIN="${PORTATRAIN:?PORTATRAIN must name the portatrain binary}"
SHARED="${PT_SHARED_DIR:-$(dirname "$0")/../../shared}"
TOK="$SHARED/assets/qwen3-tokenizer/tokenizer.json"
[ -f "$TOK" ] || { echo "test_tokenize: no tokenizer at $TOK" >&2; exit 1; }
T="$(mktemp -d "${TMPDIR:-/tmp}/pt-tokenize-XXXXXX")"
trap 'rm -rf "$T"' EXIT
checks=0
fails=0
. "$PT_SOURCE_DIR/tests/cli_check.sh"
hdr_int() { od -A n -t d4 -j $((4 * $2)) -N 4 "$1" | tr -d ' '; }      # shard, slot
hdr_hex() { od -A n -t x1 -j $((4 * $2)) -N 32 "$1" | tr -d ' \n'; }   # 32 bytes from slot
body_ids() { od -A n -t u4 -v -j 1024 "$1" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//'; }
json_num() { grep -o "\"$2\":[[:space:]]*-\?[0-9]*" "$1" | head -n1 | grep -o -- '-\?[0-9]*$'; }
tok_sha="$(sha256sum "$TOK" | cut -d' ' -f1)"

# ---- a .txt (one document) and a .jsonl (two documents, a blank line) ----
printf 'Hello world.\nSecond line here\n\nThird.\n' > "$T/a.txt"
printf '{"text": "Doc one", "id": 1}\n\n{"id": 2, "text": "Doc two \\u00e9"}\n' > "$T/b.jsonl"
"$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/out" --threads 2 "$T/a.txt" "$T/b.jsonl" 2> "$T/err"
expect_run "tokenize exits 0 ($(cat "$T/err"))" test $? -eq 0
S="$T/out/shard-00000.bin"
expect_run "shard written" test -f "$S"
expect_run "magic" test "$(hdr_int "$S" 0)" = 20241202
expect_run "version" test "$(hdr_int "$S" 1)" = 1
expect_run "token count" test "$(hdr_int "$S" 2)" = 17
expect_run "bytes per token" test "$(hdr_int "$S" 3)" = 4
expect_run "vocab size (Qwen3 ids 0..151668)" test "$(hdr_int "$S" 4)" = 151669
expect_run "tokenizer sha256 slot = sha256(tokenizer.json)" test "$(hdr_hex "$S" 8)" = "$tok_sha"
body_sha="$(tail -c +1025 "$S" | sha256sum | cut -d' ' -f1)"
expect_run "content sha256 slot = sha256(body)" test "$(hdr_hex "$S" 16)" = "$body_sha"
expect_run "file size" test "$(stat -c %s "$S")" = $((1024 + 17 * 4))
# Ids as HF tokenizers gives them (encode(text, add_special_tokens=False)), <|endoftext|> = 151643 after each.
want="9707 1879 624 15666 1555 1588 271 36975 624 151643 9550 825 151643 9550 1378 3958 151643"
expect_run "token ids equal HF tokenizers' (got: $(body_ids "$S"))" test "$(body_ids "$S")" = "$want"
D="$T/out/dataset.json"
expect_run "dataset.json written" test -f "$D"
expect_run "dataset.json format" grep -q '"format":[[:space:]]*"portatrain-dataset"' "$D"
expect_run "dataset.json tokenizer_sha256" grep -q "\"tokenizer_sha256\":[[:space:]]*\"$tok_sha\"" "$D"
expect_run "dataset.json shard sha256" grep -q "\"sha256\":[[:space:]]*\"$body_sha\"" "$D"
expect_run "dataset.json num_tokens" test "$(json_num "$D" num_tokens)" = 17
expect_run "dataset.json num_documents" test "$(json_num "$D" num_documents)" = 3
expect_run "dataset.json eos_id" test "$(json_num "$D" eos_id)" = 151643
expect_run "dataset.json vocab_size" test "$(json_num "$D" vocab_size)" = 151669
expect_run "dataset.json names the shard" grep -q '"file":[[:space:]]*"shard-00000.bin"' "$D"
expect_run "dataset.json records the inputs" grep -q "\"sha256\":[[:space:]]*\"$(sha256sum "$T/b.jsonl" | cut -d' ' -f1)\"" "$D"
expect_run "nothing on stdout" test -z "$("$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/out" "$T/a.txt" 2>/dev/null)"

# ---- --lines and --text-field ----
"$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/lines" --lines --quiet "$T/a.txt"
expect_run "--lines: one document per non-empty line" test "$(body_ids "$T/lines/shard-00000.bin")" = \
  "9707 1879 13 151643 15666 1555 1588 151643 36975 13 151643"
printf '{"body": "Third."}\n' > "$T/c.jsonl"
"$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/field" --text-field body --quiet "$T/c.jsonl"
expect_run "--text-field" test "$(body_ids "$T/field/shard-00000.bin")" = "36975 13 151643"
# \u0000 inside the text keeps the rest of the document (cJSON's strings stop at a NUL): escaped quotes and
# backslashes, a surrogate pair, the same field name nested and a NUL in another field are decoded around it.
# Ids from HF tokenizers 0.23.3 on Python's json.loads of each line.
cat > "$T/nul.jsonl" <<'JSONL'
{"id": "x\u0000", "meta": {"a": [1, "}\"", {"text": "no"}]}, "text": "a\u0000b \u0000\u0000 c\ud83d\ude00 \"q\\u0000 end\u0000"}
{"text": "\u0000"}
{"text": "x\u0000y"}
JSONL
"$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/nul" --quiet "$T/nul.jsonl"
expect_run "\\u0000 keeps the rest of the document" test "$(body_ids "$T/nul/shard-00000.bin")" = \
  "64 188 65 220 188 188 272 141334 330 80 3770 15 15 15 15 835 188 151643 188 151643 87 188 88 151643"
# A raw NUL byte inside the string (strict JSON forbids raw control characters; cJSON accepts them) is kept
# with the rest of the document too: it used to end the document silently. Ids from HF tokenizers 0.23.3 on
# json.loads(line, strict=False).
printf '{"text": "abc\000def ghi"}\n{"id": "k\000", "text": "\000\tx\000"}\n' > "$T/rawnul.jsonl"
"$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/rawnul" --quiet "$T/rawnul.jsonl"
expect_run "a raw NUL byte keeps the rest of the document" test "$(body_ids "$T/rawnul/shard-00000.bin")" = \
  "13683 188 750 342 6023 151643 188 10225 188 151643"

# .json (what HF datasets' to_json writes) and upper-case extensions are JSON Lines, not text documents of JSON
# syntax; a JSON array / pretty-printed file is refused with a hint.
printf '{"text": "Doc one"}\n{"text": "Doc two"}\n' > "$T/hf.json"
cp "$T/hf.json" "$T/up.JSONL"
"$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/json" --quiet "$T/hf.json" "$T/up.JSONL"
expect_run ".json and .JSONL read as JSON Lines" test "$(body_ids "$T/json/shard-00000.bin")" = \
  "9550 825 151643 9550 1378 151643 9550 825 151643 9550 1378 151643"
printf '[\n  {"text": "Doc one"}\n]\n' > "$T/arr.json"
"$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/arr" --quiet "$T/arr.json" 2> "$T/arr.err"
expect_run "a pretty-printed JSON array is refused with a hint ($(cat "$T/arr.err"))" \
  grep -q 'arr.json:1: .*one complete JSON object per line.*--format text reads each input as text' "$T/arr.err"
printf '{"name": "pkg", "version": "1.0"}\n' > "$T/package.json"
"$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/pkg" --quiet "$T/package.json" 2> "$T/pkg.err"
expect_run "a .json that is not JSON Lines names --format text ($(cat "$T/pkg.err"))" \
  grep -q 'package.json:1: no "text" field.*--format text' "$T/pkg.err"

# An unpaired surrogate escape (valid JSON to json.loads, refused by HF tokenizers) is named, not "malformed";
# a line-1 syntax error of a one-line object gets no JSON Lines hint.
printf '{"text": "ok"}\n{"text": "a\\ud800b"}\n' > "$T/sur.jsonl"
"$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/sur" --quiet "$T/sur.jsonl" 2> "$T/sur.err"
expect_run "an unpaired surrogate is named ($(cat "$T/sur.err"))" \
  grep -q "sur.jsonl:2: unpaired UTF-16 surrogate escape '.ud800' at byte 12, in the \"text\" field" "$T/sur.err"
# ... but one in another field does not stop the line (json.loads reads it, only the text is tokenized).
# Ids from HF tokenizers 0.23.3.
printf '%s\n' '{"title": "\udc00", "text": "ok \ud83d\ude00", "x": "\ud800\ud800"}' > "$T/sur2.jsonl"
"$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/sur2" --quiet "$T/sur2.jsonl" 2> "$T/sur2.err"
expect_run "an unpaired surrogate in another field is no error ($(cat "$T/sur2.err"))" \
  test "$(body_ids "$T/sur2/shard-00000.bin" 2>/dev/null)" = "562 90316 151643"
printf '{"text": "a",}\n' > "$T/comma.jsonl"
"$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/comma" --quiet "$T/comma.jsonl" 2> "$T/comma.err"
expect_run "a one-line syntax error gets no JSON Lines hint ($(cat "$T/comma.err"))" \
  grep -q 'comma.jsonl:1: malformed JSON line (near byte [0-9]*)$' "$T/comma.err"

# JSON Lines from a pipe (no .jsonl name): --format jsonl reads it; without, it is text and a warning says so.
cat "$T/hf.json" | "$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/pipe" --quiet --format jsonl /dev/stdin
expect_run "--format jsonl on /dev/stdin" test "$(body_ids "$T/pipe/shard-00000.bin")" = "9550 825 151643 9550 1378 151643"
cat "$T/hf.json" | "$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/pipe2" --quiet /dev/stdin 2> "$T/pipe2.err"
expect_run "JSON Lines read as text by its name: warned ($(cat "$T/pipe2.err"))" \
  grep -q 'stdin: read as text (by its name), but its first line is a JSON object with a "text" string' "$T/pipe2.err"
"$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/astext" --quiet --format text "$T/hf.json" 2> "$T/astext.err"
expect_run "--format text reads a .json as text, no warning" test -s "$T/astext/dataset.json" -a ! -s "$T/astext.err"
"$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/plain" --quiet "$T/a.txt" 2> "$T/plain.err"
expect_run "no warning for plain text" test ! -s "$T/plain.err"

# A named pipe (mkfifo, e.g. fed by zstdcat): the readability check used to open and close it, which killed its
# writer (SIGPIPE), and the read then waited forever.
mkfifo "$T/fifo.jsonl"
cat "$T/hf.json" > "$T/fifo.jsonl" &
writer=$!
timeout 30 "$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/fifo" --quiet "$T/fifo.jsonl" 2> "$T/fifo.err"
frc=$?
kill "$writer" 2> /dev/null; wait "$writer" 2> /dev/null
expect_run "a named pipe is read, not hung on (rc $frc, $(cat "$T/fifo.err"))" \
  test "$frc" = 0 -a "$(body_ids "$T/fifo/shard-00000.bin" 2>/dev/null)" = "9550 825 151643 9550 1378 151643"

# The same file twice (overlapping globs, a symlink) is tokenized twice, with a warning.
ln -s "$T/c.jsonl" "$T/c-link.jsonl"
"$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/dup" --quiet --text-field body "$T/c.jsonl" "$T/c-link.jsonl" \
  2> "$T/dup.err"
expect_run "a file given twice is warned about ($(cat "$T/dup.err"))" \
  grep -q 'input 2 (.*c-link.jsonl) is the same file as input 1 (.*c.jsonl)' "$T/dup.err"
expect_run "... and tokenized twice" test "$(body_ids "$T/dup/shard-00000.bin")" = "36975 13 151643 36975 13 151643"

# NaN / Infinity / -Infinity in other fields (Python's json.dumps writes a float nan/inf so; json.loads reads it)
# do not make the line "malformed"; the same words inside strings are text. Ids from HF tokenizers 0.23.3.
cat > "$T/nan.jsonl" <<'JSONL'
{"text": "Hello NaN world", "score": NaN, "w": Infinity, "m": -Infinity, "s": "Infinity"}
{"a":[NaN,-Infinity],"text":"x\"NaN"}
JSONL
"$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/nan" --quiet "$T/nan.jsonl" 2> "$T/nan.err"
expect_run "NaN/Infinity in other fields are read as json.loads does ($(cat "$T/nan.err"))" \
  test "$(body_ids "$T/nan/shard-00000.bin" 2>/dev/null)" = "9707 32178 1879 151643 87 1 22831 151643"

# A UTF-8 byte order mark opening a text file is not text (Python's "utf-8-sig"; .jsonl already skips it):
# whole-file and --lines documents start after it; a file of just a BOM holds no document. CRLF is kept in a
# whole-file document (HF gives 319 for "\r\n" too). Ids from HF tokenizers 0.23.3 on
# open(f, encoding="utf-8-sig").read().
printf '\xef\xbb\xbfHello world\r\nline two\r\n' > "$T/bom.txt"
printf '\xef\xbb\xbf' > "$T/bomonly.txt"
"$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/bom" --quiet "$T/bom.txt" "$T/bomonly.txt"
expect_run "BOM skipped in a .txt document (got: $(body_ids "$T/bom/shard-00000.bin"))" \
  test "$(body_ids "$T/bom/shard-00000.bin")" = "9707 1879 319 1056 1378 319 151643"
"$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/bomL" --lines --quiet "$T/bom.txt"
expect_run "BOM skipped in the first --lines document (got: $(body_ids "$T/bomL/shard-00000.bin"))" \
  test "$(body_ids "$T/bomL/shard-00000.bin")" = "9707 1879 151643 1056 1378 151643"

# Special-token text in a document: by default it becomes the special ids, as HF encode does (a written
# <|endoftext|> is then a false document end), with a warning counting such documents; with
# --special-tokens-as-text it is ordinary text while non-special added tokens (<think>) still match, as HF with
# encode_special_tokens = True. Ids from HF tokenizers 0.23.3 (both settings).
printf 'foo <|endoftext|> bar<|im_start|>user\n<think> x</think><|endoftext|><|endoftext|' > "$T/sp.txt"
printf 'plain' > "$T/plain.txt"
"$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/sp" --quiet "$T/sp.txt" "$T/plain.txt" 2> "$T/sp.err"
expect_run "special-token text: HF ids by default (got: $(body_ids "$T/sp/shard-00000.bin"))" \
  test "$(body_ids "$T/sp/shard-00000.bin")" = \
  "7975 220 151643 3619 151644 872 198 151667 856 151668 151643 27 91 8691 723 427 91 151643 20772 151643"
expect_run "special-token text: a warning counts the document (got: $(cat "$T/sp.err"))" \
  grep -q 'warning: 1 document contains special-token text.*1 of them the end-of-document id' "$T/sp.err"
"$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/spt" --quiet --special-tokens-as-text "$T/sp.txt" \
  2> "$T/spt.err"
expect_run "--special-tokens-as-text: HF encode_special_tokens ids (got: $(body_ids "$T/spt/shard-00000.bin"))" \
  test "$(body_ids "$T/spt/shard-00000.bin")" = "7975 82639 8691 723 427 91 29 3619 27 91 318 4906 91 29 872 198 \
151667 856 151668 27 91 8691 723 427 91 1784 91 8691 723 427 91 151643"
expect_run "--special-tokens-as-text: no warning" test ! -s "$T/spt.err"

# ---- determinism: --threads 1 vs 2 vs 3, several shards ----
{
  for i in $(seq 1 600); do
    printf '{"text": "Document %d: The quick brown fox %s jumps over the lazy dog. 数字 %d, emoji \\ud83d\\ude00, tabs\\tand\\r\\nnewlines. It'"'"'S DON'"'"'T %s"}\n' \
      "$i" "$(printf 'x%.0s' $(seq 1 $((i % 37))))" $((i * 7919)) "$(printf ' %.0s' $(seq 1 $((i % 5))))"
  done
} > "$T/many.jsonl"
for th in 1 2 3; do
  "$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/th$th" --threads "$th" --shard-tokens 5000 --quiet \
    "$T/many.jsonl" "$T/a.txt"
done
n_shards="$(ls "$T/th1"/shard-*.bin | wc -l)"
expect_run "several shards of --shard-tokens 5000 ($n_shards)" test "$n_shards" -ge 3
expect_run "full shards hold exactly 5000 tokens" test "$(hdr_int "$T/th1/shard-00000.bin" 2)" = 5000
same=1
for th in 2 3; do
  for f in "$T/th1"/*; do cmp -s "$f" "$T/th$th/$(basename "$f")" || same=0; done
  [ "$(ls "$T/th$th" | wc -l)" = "$(ls "$T/th1" | wc -l)" ] || same=0
done
expect_run "shards and dataset.json identical for --threads 1, 2, 3" test "$same" = 1
expect_run "documents counted" test "$(json_num "$T/th1/dataset.json" num_documents)" = 601
total=0
for f in "$T/th1"/shard-*.bin; do total=$((total + $(hdr_int "$f" 2))); done
expect_run "num_tokens = sum of the shards" test "$(json_num "$T/th1/dataset.json" num_tokens)" = "$total"

# ---- progress bar on a terminal ----
if command -v script >/dev/null 2>&1; then
  script -qec "\"$BIN\" tokenize --tokenizer \"$TOK\" --output-dir \"$T/tty\" \"$T/many.jsonl\"" /dev/null \
    < /dev/null > "$T/tty.log" 2>&1
  if [ -f "$T/tty/dataset.json" ]; then
    expect_run "progress bar with MB/s on a terminal" grep -q 'MB/s' "$T/tty.log"
    expect_run "progress bar shows 100%" grep -q '100.0%' "$T/tty.log"
  else
    echo "test_tokenize: note: 'script' could not provide a terminal here; progress bar not checked" >&2
  fi
fi
"$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/notty" "$T/a.txt" 2> "$T/notty.err"
expect_run "no progress bar when stderr is not a terminal" bash -c "! grep -q '\\[#' '$T/notty.err'"

# ---- errors ----
expect_fail() {  # description, expected code, stderr needle, args...
  local what="$1" code="$2" needle="$3"; shift 3
  "$BIN" tokenize "$@" > "$T/e.out" 2> "$T/e.err"
  local rc=$?
  expect_run "$what: exit $code (got $rc)" test "$rc" = "$code"
  expect_run "$what: message mentions '$needle' (got: $(head -c 300 "$T/e.err"))" grep -qF -- "$needle" "$T/e.err"
  expect_run "$what: one line" test "$(wc -l < "$T/e.err")" -le 1
}
expect_fail "missing input" 1 "$T/nope.txt" --tokenizer "$TOK" --output-dir "$T/x1" "$T/a.txt" "$T/nope.txt"
expect_run "missing input: nothing written" test ! -e "$T/x1/dataset.json"
printf '{"text": "fine"}\n{"text": "fine"}\n{"text": broken}\n' > "$T/bad.jsonl"
expect_fail "malformed jsonl" 1 "bad.jsonl:3" --tokenizer "$TOK" --output-dir "$T/x2" "$T/bad.jsonl"
expect_run "malformed jsonl: no shard or index left" test -z "$(ls -A "$T/x2" 2>/dev/null)"
printf '{"text": "fine"}\n{"other": "x"}\n' > "$T/nofield.jsonl"
expect_fail "jsonl without the field" 1 "nofield.jsonl:2" --tokenizer "$TOK" --output-dir "$T/x3" "$T/nofield.jsonl"
printf '{"text": 5}\n' > "$T/num.jsonl"
expect_fail "jsonl field not a string" 1 "num.jsonl:1" --tokenizer "$TOK" --output-dir "$T/x4" "$T/num.jsonl"
printf '{"text": "a"}\n{"text": "first", "id": 2, "text": "last"}\n' > "$T/dup.jsonl"
expect_fail "jsonl field twice" 1 "dup.jsonl:2: field \"text\" appears more than once" --tokenizer "$TOK" \
  --output-dir "$T/x4" "$T/dup.jsonl"
printf '[1, 2]\n' > "$T/arr.jsonl"
expect_fail "jsonl line not an object" 1 "arr.jsonl:1" --tokenizer "$TOK" --output-dir "$T/x5" "$T/arr.jsonl"
: > "$T/empty.txt"
printf '\n\n' > "$T/blank.jsonl"
expect_fail "empty corpus" 1 "empty corpus" --tokenizer "$TOK" --output-dir "$T/x6" "$T/empty.txt" "$T/blank.jsonl"
expect_run "empty corpus: no dataset.json" test ! -e "$T/x6/dataset.json"
printf '\x1f\x8b\x08\x00 rest of a gzip member' > "$T/z.jsonl.gz"
expect_fail "gzip-compressed input" 1 "z.jsonl.gz: gzip-compressed" --tokenizer "$TOK" --output-dir "$T/x10" \
  "$T/z.jsonl.gz"
printf '\x28\xb5\x2f\xfd rest' > "$T/z.txt.zst"
expect_fail "zstd-compressed input (--lines)" 1 "z.txt.zst: zstd-compressed" --tokenizer "$TOK" \
  --output-dir "$T/x10" --lines "$T/z.txt.zst"
printf '\xff\xfeh\x00i\x00' > "$T/u16.txt"
expect_fail "UTF-16 input" 1 "u16.txt: UTF-16/UTF-32 text" --tokenizer "$TOK" --output-dir "$T/x10" "$T/u16.txt"
printf 'hi' | bzip2 -c > "$T/z.txt.bz2" 2>/dev/null || printf 'BZh91AY&SY rest' > "$T/z.txt.bz2"
expect_fail "bzip2-compressed input" 1 "bzip2-compressed" --tokenizer "$TOK" --output-dir "$T/x10" "$T/z.txt.bz2"
printf 'BZh is text' > "$T/bzh.txt"
"$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/bzh" --quiet "$T/bzh.txt"
expect_run "a text starting with BZh is text" test -f "$T/bzh/dataset.json"
expect_run "compressed input: nothing written" test ! -e "$T/x10/dataset.json"
expect_fail "missing tokenizer" 1 "$T/none.json" --tokenizer "$T/none.json" --output-dir "$T/x7" "$T/a.txt"
expect_fail "directory as input" 1 "$T" --tokenizer "$TOK" --output-dir "$T/x8" "$T"
expect_fail "no inputs" 2 "no input" --tokenizer "$TOK" --output-dir "$T/x9"
expect_fail "unknown option" 2 "--bogus" --tokenizer "$TOK" --output-dir "$T/x9" --bogus "$T/a.txt"
expect_fail "unknown --eos token" 1 "no token" --tokenizer "$TOK" --output-dir "$T/x9" --eos "<nope>" "$T/a.txt"
# A re-run over an existing dataset replaces it.
"$BIN" tokenize --tokenizer "$TOK" --output-dir "$T/out" --quiet --text-field body "$T/c.jsonl"
expect_run "re-run replaces the index" test "$(json_num "$T/out/dataset.json" num_tokens)" = 3

echo "test_tokenize: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
