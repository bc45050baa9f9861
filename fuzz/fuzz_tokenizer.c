// libFuzzer target for the tokenizer: encodes arbitrary bytes, decodes the result, and decodes arbitrary ids.
//
//   cmake -S . -B build-fuzz -DPT_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug \
//         -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link,address,undefined
//   cmake --build build-fuzz --target fuzz_tokenizer
//   ./build-fuzz/fuzz_tokenizer -max_total_time=60 -max_len=4096
//
// (the CMAKE_C_FLAGS line instruments the libraries too, so that libFuzzer sees coverage inside them).
// The tokenizer is loaded once: $PT_TOKENIZER, else ../shared/assets/qwen3-tokenizer/tokenizer.json, else
// tests/fixtures/tokenizer/mini_added.json (both relative to the current directory, i.e. run it from the
// repository root). Checked invariants:
//   - encode never fails on any input, and every id is < vocab size;
//   - decode(encode(x)) succeeds and is valid UTF-8;
//   - with the Qwen3 tokenizer (ASCII special tokens, no strip/single_word flags): encode(decode(encode(x)))
//     == encode(x) (normalization is idempotent and invalid UTF-8 was replaced once);
//   - decoding arbitrary ids never crashes (it fails cleanly for ids out of range).
#include "data/tokenizer.h"
#include "util/common.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pt_tokenizer *g_tok;
static int g_strict;

static void load_once(void) {
    if (g_tok) return;
    pt_set_quiet(true);
    const char *env = getenv("PT_TOKENIZER");
    const char *cands[] = {env, "../shared/assets/qwen3-tokenizer/tokenizer.json",
                           "tests/fixtures/tokenizer/mini_added.json"};
    for (size_t i = 0; i < sizeof cands / sizeof cands[0] && !g_tok; i++) {
        if (!cands[i] || access(cands[i], R_OK) != 0) continue;
        g_tok = tokenizer_load(cands[i]);
        if (!g_tok) {
            fprintf(stderr, "fuzz_tokenizer: %s\n", pt_last_error());
            abort();
        }
        g_strict = strstr(cands[i], "qwen3-tokenizer") != NULL;
        fprintf(stderr, "fuzz_tokenizer: loaded %s\n", cands[i]);
    }
    if (!g_tok) {
        fprintf(stderr, "fuzz_tokenizer: no tokenizer found (set PT_TOKENIZER)\n");
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    load_once();
    uint32_t V = tokenizer_vocab_size(g_tok);
    uint32_t *ids;
    size_t n;
    if (tokenizer_encode(g_tok, (const char *)data, size, &ids, &n) != 0) {
        fprintf(stderr, "encode failed: %s\n", pt_last_error());
        abort();
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= V) abort();
    char *out;
    size_t on;
    if (tokenizer_decode(g_tok, ids, n, &out, &on) != 0) {
        fprintf(stderr, "decode failed: %s\n", pt_last_error());
        abort();
    }
    if (!tokenizer_utf8_valid(out, on)) abort();
    if (g_strict) {
        uint32_t *ids2;
        size_t n2;
        if (tokenizer_encode(g_tok, out, on, &ids2, &n2) != 0) abort();
        if (n2 != n || (n && memcmp(ids, ids2, n * sizeof(uint32_t)) != 0)) {
            fprintf(stderr, "encode(decode(encode(x))) != encode(x)\n");
            abort();
        }
        free(ids2);
    }
    free(out);
    free(ids);
    // arbitrary ids (some beyond the vocabulary)
    size_t m = size / 4;
    if (m) {
        uint32_t *raw = malloc(m * sizeof(uint32_t));
        for (size_t i = 0; i < m; i++) {
            uint32_t v;
            memcpy(&v, data + 4 * i, 4);
            raw[i] = v % (V + 16);
        }
        if (tokenizer_decode(g_tok, raw, m, &out, &on) == 0) {
            if (!tokenizer_utf8_valid(out, on)) abort();
            free(out);
        }
        free(raw);
    }
    return 0;
}
