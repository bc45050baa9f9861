// libFuzzer target: the run-log importers of `portatrain compare` (HF trainer_state.json, TorchTitan console
// logs, CSV, JSON Lines and format detection) on arbitrary bytes. The first byte picks the format.
#include "fuzz_tmp.h"
#include "harness/runlog.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *formats[] = {"auto", "hf", "torchtitan", "csv", "jsonl"};
    if (size < 1) return 0;
    const char *fmt = formats[data[0] % 5];
    const char *path = fuzz_write_tmp("log", data + 1, size - 1);
    pt_runlog r;
    if (pt_runlog_load(path, fmt, &r) == 0) {
        // What compare relies on: at least one point, sorted by step, one point per step, steps >= 0.
        if (r.n < 1) abort();
        for (int i = 0; i < r.n; i++) {
            if (r.pts[i].step < 0) abort();
            if (i > 0 && r.pts[i].step <= r.pts[i - 1].step) abort();
            if (r.pts[i].window < 0) abort();
        }
    }
    pt_runlog_free(&r);
    return 0;
}
