// libFuzzer target: the tokenizer.json loader on arbitrary bytes (users bring their own tokenizer). A tokenizer
// that loads must encode and decode.
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pt_tokenizer *t = tokenizer_load_json((const char *)data, size, "fuzz/tokenizer.json");
    if (!t) return 0;
    static const char text[] = "Hello, world! 123 \xe4\xbd\xa0\xe5\xa5\xbd <|endoftext|>\n";
    uint32_t *ids = NULL;
    size_t n = 0;
    if (tokenizer_encode(t, text, sizeof text - 1, &ids, &n) == 0) {
        for (size_t i = 0; i < n; i++)
            if (ids[i] >= tokenizer_vocab_size(t)) abort();
        char *out = NULL;
        size_t len = 0;
        if (tokenizer_decode(t, ids, n, &out, &len) == 0 && !tokenizer_utf8_valid(out, len)) abort();
        free(out);
    }
    free(ids);
    tokenizer_free(t);
    return 0;
}
