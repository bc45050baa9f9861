// Training helpers of the backend parity test (test_backend_parity.c);
// linked with the trainer, unlike testutil.c (which
// gradcheck_double also uses).
#pragma once
#include <stddef.h>

// Trains `steps` steps of the parity recipe (AdamW lr 3e-3, weight decay 0.1,
// beta2 0.95, clipping at 1.0, 5 warm-up steps then cosine) on `backend`.
// Per-step losses go to loss[], the step/loss/grad_norm/lr part of each
// metrics.jsonl line (no timings) to *fp (malloc'd text, one line a step).
// The output directory goes to *outdir (malloc'd; the caller removes it with
// test_rmdir) or, with outdir NULL, is removed. Returns the steps read.
int test_train(const char *backend, const char *model, const char *data, int B, int T, int steps, double *loss,
               char **fp, char **outdir);
// rm -rf dir, then free(dir).
void test_rmdir(char *dir);
// The bytes of dir/name (malloc'd, *n its length), or NULL with *n = 0.
char *test_slurp(const char *dir, const char *name, size_t *n);
