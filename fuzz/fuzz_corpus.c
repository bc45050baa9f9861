// libFuzzer target: `portatrain tokenize`'s corpus reader on arbitrary bytes. Byte 0 picks JSON Lines, whole-file
// text or text per line; the rest is the file.
#include <stdlib.h>
#include <string.h>

#include "data/corpus.h"
#include "fuzz_tmp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int mode = data[0] % 3;
    const char *path = fuzz_write_tmp("corpus", data + 1, size - 1);
    pt_corpus_reader *r = pt_corpus_open_as(path, mode == 0 ? PT_CORPUS_FORMAT_JSONL : PT_CORPUS_FORMAT_TEXT,
                                            mode == 2, "text");
    if (!r) return 0;  // refused at open: UTF-16/32 or compressed input
    const char *text;
    size_t len, total = 0;
    int rc;
    uint64_t docs = 0;
    while ((rc = pt_corpus_next(r, &text, &len)) == 1) {
        if (len == 0) abort();  // empty documents are skipped
        volatile char last = text[len - 1];  // the document's bytes are readable
        (void)last;
        total += len;
        docs++;
    }
    if (rc == 0) {
        if (pt_corpus_documents(r) != docs) abort();
        if (pt_corpus_bytes(r) != size - 1) abort();  // every byte read, once
        if (mode != 0 && total > size - 1) abort();    // text documents are pieces of the file
    }
    pt_corpus_close(r);
    return 0;
}
