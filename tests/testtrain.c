#include "testtrain.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "train/trainer.h"
#include "util/common.h"
#include "util/fileio.h"

int test_train(const char *backend, const char *model, const char *data, int B, int T, int steps, double *loss,
               char **fp, char **outdir) {
    char *tmp = test_tmpdir("parity-train");
    pt_train_args a;
    pt_train_args_defaults(&a);
    a.model_dir = model;
    a.data_path = data;
    a.output_dir = tmp;
    a.backend = backend;
    a.learning_rate = 3e-3;
    a.weight_decay = 0.1;
    a.adam_beta2 = 0.95;
    a.max_grad_norm = 1.0;
    a.per_device_train_batch_size = B;
    a.max_steps = steps;
    a.warmup_steps = 5;
    a.lr_scheduler_type = "cosine";
    a.seq_len = T;
    a.quiet = true;
    CHECK(pt_train(&a) == 0, "train %s: %s", backend, pt_last_error());
    char *mp = pt_path_join(tmp, "metrics.jsonl");
    FILE *f = fopen(mp, "r");
    size_t cap = 1 << 16, len = 0;
    char *s = malloc(cap), line[1024];
    s[0] = 0;
    int n = 0;
    while (f && fgets(line, sizeof line, f) && n < steps) {
        char *l = strstr(line, "\"loss\": ");
        loss[n++] = l ? strtod(l + 8, NULL) : NAN;
        char *e = strstr(line, ", \"tokens\"");  // keep step, loss, grad_norm, lr (not timings)
        if (e) *e = 0;
        size_t k = strlen(line);
        if (len + k + 2 > cap) s = realloc(s, cap = 2 * (len + k + 2));
        memcpy(s + len, line, k);
        len += k;
        s[len++] = '\n';
        s[len] = 0;
    }
    if (f) fclose(f);
    free(mp);
    *fp = s;
    if (outdir) *outdir = tmp;
    else test_rmdir(tmp);
    return n;
}

void test_rmdir(char *dir) {
    char rm[4200];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", dir);
    free(dir);
}

char *test_slurp(const char *dir, const char *name, size_t *n) {
    char *p = pt_path_join(dir, name);
    char *b = pt_read_file(p, n);
    free(p);
    if (!b) *n = 0;
    return b;
}
