// portatrain ckpt inspect|verify DIR
#include "cli/cli.h"
#include "io/checkpoint.h"
#include "util/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf("usage: portatrain ckpt inspect DIR [--json]\n"
           "       portatrain ckpt verify DIR\n\n"
           "inspect prints a checkpoint's step, training state, files and tensors; verify checks every\n"
           "tensor slice against its checksum and that every tensor is fully covered (exit 1 if not).\n"
           "DIR may be a checkpoint directory or an output dir (its `latest` checkpoint is used).\n");
}

// A checkpoint dir, or an output dir whose `latest` names one.
static char *resolve(const char *dir) {
    char *man = malloc(strlen(dir) + 32);
    sprintf(man, "%s/checkpoint.json", dir);
    FILE *f = fopen(man, "r");
    free(man);
    if (f) {
        fclose(f);
        return strdup(dir);
    }
    char *lp = malloc(strlen(dir) + 16);
    sprintf(lp, "%s/latest", dir);
    f = fopen(lp, "r");
    free(lp);
    if (!f) return strdup(dir);
    char name[256] = "";
    if (!fgets(name, sizeof name, f)) name[0] = 0;
    fclose(f);
    name[strcspn(name, "\r\n")] = 0;
    char *r = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(r, "%s/%s", dir, name);
    return r;
}

int cmd_ckpt(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        help();
        return argc < 2 ? 2 : 0;
    }
    const char *sub = argv[1];
    const char *dir = NULL;
    bool json = false;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (argv[i][0] != '-' && !dir) dir = argv[i];
        else return cli_usage_error("ckpt", "unexpected argument '%s'", argv[i]);
    }
    if (!dir) return cli_usage_error("ckpt", "%s needs a checkpoint directory", sub);
    if (strcmp(sub, "inspect") != 0 && strcmp(sub, "verify") != 0)
        return cli_usage_error("ckpt", "unknown subcommand '%s' (inspect, verify)", sub);
    char *path = resolve(dir);
    ckpt *c = ckpt_open(path);
    free(path);
    if (!c) return cli_fail();
    int rc = 0;
    if (!strcmp(sub, "verify")) {
        double t0 = pt_now_s();
        if (ckpt_verify(c) != 0) rc = cli_fail();
        else printf("%s: OK (step %ld, verified in %.3f s)\n", ckpt_dir(c), ckpt_step(c), pt_now_s() - t0);
    } else {
        cJSON *d = ckpt_describe(c);
        if (json) {
            char *t = cJSON_Print(d);
            printf("%s\n", t);
            free(t);
        } else {
            const cJSON *st = cJSON_GetObjectItemCaseSensitive(d, "state");
            printf("checkpoint  %s\nstep        %ld\nbytes       %.0f\n", ckpt_dir(c), ckpt_step(c),
                   cJSON_GetObjectItemCaseSensitive(d, "total_bytes")->valuedouble);
            const cJSON *lr = cJSON_GetObjectItemCaseSensitive(st, "lr_scheduler");
            const cJSON *dl = cJSON_GetObjectItemCaseSensitive(st, "data_loader");
            const cJSON *mh = cJSON_GetObjectItemCaseSensitive(st, "manifest");
            const cJSON *it;
            cJSON_ArrayForEach(it, lr) if (cJSON_IsNumber(it)) printf("lr.%-18s %g\n", it->string, it->valuedouble);
            else if (cJSON_IsString(it)) printf("lr.%-18s %s\n", it->string, it->valuestring);
            cJSON_ArrayForEach(it, dl) if (cJSON_IsNumber(it)) printf("data.%-16s %g\n", it->string, it->valuedouble);
            else if (cJSON_IsString(it)) printf("data.%-16s %s\n", it->string, it->valuestring);
            cJSON_ArrayForEach(it, mh) if (cJSON_IsString(it)) printf("%-21s %s\n", it->string, it->valuestring);
            printf("tensors:\n");
            cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(d, "tensors")) {
                char shape[64] = "";
                const cJSON *x;
                cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(it, "shape"))
                    snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%.0f", shape[0] ? "," : "",
                             x->valuedouble);
                printf("  %-60s [%s] %d slice(s)\n", cJSON_GetObjectItemCaseSensitive(it, "name")->valuestring, shape,
                       (int)cJSON_GetObjectItemCaseSensitive(it, "slices")->valuedouble);
            }
        }
        cJSON_Delete(d);
    }
    ckpt_close(c);
    return rc;
}
