// libFuzzer target: the HF config.json parser on arbitrary bytes.
#include "model/config.h"
#include "util/common.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qwen3_config c;
    if (qwen3_config_parse(&c, (const char *)data, size, "fuzz/config.json") == 0) {
        // A config that parses must be usable: validate it again.
        if (qwen3_config_validate(&c, "fuzz") != 0) abort();
    }
    return 0;
}
