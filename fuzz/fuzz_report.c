// libFuzzer target: `portatrain report` on an arbitrary report.json: the check, then rendering report.html and
// report.md (user text in every field must not break the renderer).
#include <stdlib.h>
#include <string.h>

#include "fuzz_tmp.h"
#include "harness/report.h"
#include "util/common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cJSON *r = cJSON_ParseWithLength((const char *)data, size);
    if (!r) return 0;
    if (pt_report_check(r, "fuzz/report.json") == 0) {
        static char dir[128];
        if (!dir[0]) {
            const char *p = fuzz_write_tmp("report.json", data, size);
            snprintf(dir, sizeof dir, "%.*s", (int)(strrchr(p, '/') - p), p);
        }
        if (pt_report_render(r, dir) != 0) abort();  // a checked report must render
    }
    cJSON_Delete(r);
    return 0;
}
