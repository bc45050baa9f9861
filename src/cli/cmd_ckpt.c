// portatrain ckpt inspect|verify DIR
#include "cli/cli.h"
#include "train/outdir.h"
#include "backend/backend.h"
#include "io/checkpoint.h"
#include "io/dcp.h"
#include "model/qwen3.h"
#include "train/train_state.h"
#include "util/common.h"
#include "util/fileio.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf("usage: portatrain ckpt inspect DIR [--json]\n"
           "       portatrain ckpt verify DIR\n"
           "       portatrain ckpt bench --config CONFIG.json --output-dir DIR [--reps N]\n\n"
           "inspect prints a checkpoint's step, training state, files and tensors; verify checks every\n"
           "tensor slice against its checksum, that every tensor is fully covered and that every value is\n"
           "finite (no NaN/Inf weights or moments) and that every tensor state.model_config requires is\n"
           "there with its shape; exit 1 if not. A checkpoint without training state or model config\n"
           "(e.g. from bench) passes with a note saying it cannot be resumed or exported.\n"
           "DIR may be a checkpoint directory or an output dir (its `latest` checkpoint is used).\n"
           "bench saves and restores the full training state (weights + AdamW moments) of a randomly\n"
           "initialised model of CONFIG N times and prints save and restore GB/s (restore reads cold:\n"
           "the files are evicted from the page cache first) as JSON.\n");
}

// A checkpoint dir, or an output dir whose `latest` names one.
static char *resolve(const char *dir) {
    char *man = pt_path_join(dir, "checkpoint.json");
    const bool is_ckpt = pt_file_exists(man);
    free(man);
    char *name = is_ckpt ? NULL : ckpt_latest_name(dir);
    char *r = name ? pt_path_join(dir, name) : strdup(dir);
    free(name);
    return r;
}

static void evict_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char *p = pt_path_join(dir, e->d_name);
        int fd = open(p, O_RDONLY);
        if (fd >= 0) {
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            close(fd);
        }
        free(p);
    }
    closedir(d);
}

// Every tensor value finite (a checkpoint must never hold NaN/Inf weights or
// moments; the trainer refuses to write one, this checks one on disk).
static int verify_finite(ckpt *c) {
    cJSON *d = ckpt_describe(c);
    const cJSON *it;
    int rc = 0;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(d, "tensors")) {
        const char *name = cJSON_GetObjectItemCaseSensitive(it, "name")->valuestring;
        int64_t shape[CKPT_MAX_DIMS], off[CKPT_MAX_DIMS] = {0}, n = 1;
        const int nd = ckpt_tensor_shape(c, name, shape);
        for (int k = 0; k < nd; k++) n *= shape[k];
        float *buf = pt_malloc(sizeof(float) * (size_t)(n ? n : 1));
        rc = ckpt_read(c, name, nd, off, shape, buf);
        for (int64_t i = 0; !rc && i < n; i++)
            if (!isfinite(buf[i])) {
                pt_set_error("%s: tensor \"%s\" holds a non-finite value (%g at element %lld)", ckpt_dir(c), name,
                             buf[i], (long long)i);
                rc = -1;
            }
        free(buf);
        if (rc) break;
    }
    cJSON_Delete(d);
    return rc;
}

// Beyond intact files: resume needs the training state and every tensor of
// the model config in model/, optim/exp_avg/ and optim/exp_avg_sq/; export
// needs the model config and the model/ tensors. A tensor the config requires
// that is absent or misshaped fails (-1); a checkpoint without training state
// or model config (e.g. from `ckpt bench`) is intact but not usable for
// those, which `lacks` says ("" when it is complete).
static int verify_contents(ckpt *c, char *lacks, size_t n) {
    const cJSON *st = ckpt_state(c);
    const cJSON *dl = cJSON_GetObjectItemCaseSensitive(st, "data_loader");
    const bool train_state = cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(st, "step")) &&
                             cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(st, "optimizer_step")) &&
                             cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(dl, "rows_per_step")) &&
                             cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(dl, "seq_len")) &&
                             cJSON_IsString(cJSON_GetObjectItemCaseSensitive(dl, "data_sha256")) &&
                             cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(st, "manifest"));
    const cJSON *mc = cJSON_GetObjectItemCaseSensitive(st, "model_config");
    lacks[0] = 0;
    if (!cJSON_IsObject(mc)) {
        snprintf(lacks, n, "not resumable or exportable: checkpoint.json has no state.model_config%s",
                 train_state ? "" : " and no training state (state.step, optimizer_step, data_loader, manifest)");
        return 0;
    }
    char what[4200];
    snprintf(what, sizeof what, "%s/checkpoint.json: state.model_config", ckpt_dir(c));
    char *text = cJSON_PrintUnformatted(mc);
    qwen3_config cfg;
    int rc = qwen3_config_parse(&cfg, text, strlen(text), what);
    free(text);
    if (rc) return -1;
    pt_backend *be = pt_backend_create("cpu-ref");
    qwen3_model m;
    rc = qwen3_create_layout(&m, &cfg, be);
    static const char *groups[3] = {"model/", "optim/exp_avg/", "optim/exp_avg_sq/"};
    for (int g = 0; g < 3 && !rc; g++)
        for (int i = 0; i < m.num_tensors && !rc; i++) {
            const qwen3_param_info *t = &m.tensors[i];
            char name[160];
            snprintf(name, sizeof name, "%s%s", groups[g], t->name);
            int64_t shape[CKPT_MAX_DIMS];
            const int nd = ckpt_tensor_shape(c, name, shape);
            if (nd < 0) {
                pt_set_error("%s: tensor \"%s\" that state.model_config requires is missing from the manifest",
                             ckpt_dir(c), name);
                rc = -1;
            } else if (nd != t->ndim || shape[0] != t->shape[0] || (nd == 2 && shape[1] != t->shape[1])) {
                pt_set_error("%s: tensor \"%s\" has a different shape from the one state.model_config implies",
                             ckpt_dir(c), name);
                rc = -1;
            }
        }
    if (m.be) qwen3_free(&m);
    pt_backend_destroy(be);
    if (!rc && !train_state)
        snprintf(lacks, n, "exportable but not resumable: checkpoint.json has no training state "
                           "(state.step, optimizer_step, data_loader, manifest)");
    return rc;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int bench(int argc, char **argv) {
    pt_argparse p;
    argp_init(&p, argc, argv);
    p.i = 2;
    const char *config = NULL, *out = NULL;
    int reps = 3;
    const char *o;
    while ((o = argp_next(&p))) {
        if (!strcmp(o, "--config")) config = argp_value(&p);
        else if (!strcmp(o, "--output-dir")) out = argp_value(&p);
        else if (!strcmp(o, "--reps")) reps = (int)argp_int_range(&p, 1, 1000000);
        else return argp_unknown(&p, o);
    }
    if (!config || !out || reps < 1) return cli_usage_error("ckpt", "bench needs --config and --output-dir");
    // Its saves keep one checkpoint and move `latest`: in a training run's directory that would
    // delete the run's checkpoints.
    if (pt_outdir_has_run(out)) {
        fprintf(stderr, "portatrain: error: %s: holds a training run (checkpoint-*, latest or metrics.jsonl); "
                "ckpt bench needs an empty or new scratch directory\n", out);
        return 2;
    }
    qwen3_config cfg;
    if (qwen3_config_load(&cfg, config) != 0) return cli_fail();
    pt_backend *be = pt_backend_create("cpu-ref");
    qwen3_model m;
    if (qwen3_create(&m, &cfg, be) != 0) return cli_fail();
    qwen3_init_weights(&m, 1);
    pt_adamw opt;
    pt_adamw_init(&opt, &m);
    be->ops->copy(be, opt.m, m.params, sizeof(real_t) * m.num_params);
    be->ops->copy(be, opt.v, m.params, sizeof(real_t) * m.num_params);
    double *save = pt_calloc(reps, sizeof(double)), *load = pt_calloc(reps, sizeof(double));
    uint64_t bytes = 0;
    int rc = 0;
    for (int r = 0; r < reps && !rc; r++) {
        ckpt_save_stats st;
        cJSON *state = cJSON_CreateObject();
        rc = pt_save_train_state(out, r + 1, &m, &opt, state, 1, &st);
        cJSON_Delete(state);
        if (rc) break;
        save[r] = st.seconds;
        bytes = st.bytes;
        evict_dir(st.path);
        double t0 = pt_now_s();
        ckpt *c = ckpt_open_resume(out, "latest");  // opens and verifies every checksum
        rc = !c || pt_load_train_state(c, &m, &opt) != 0;
        load[r] = pt_now_s() - t0;
        ckpt_close(c);
        fprintf(stderr, "rep %d: save %.3f s (%.3f GB/s), restore %.3f s (%.3f GB/s)\n", r + 1, save[r],
                bytes / save[r] / 1e9, load[r], bytes / load[r] / 1e9);
    }
    if (rc) rc = cli_fail();
    else {
        qsort(save, reps, sizeof(double), cmp_double);
        qsort(load, reps, sizeof(double), cmp_double);
        printf("{\"parameters\": %zu, \"bytes\": %llu, \"reps\": %d, \"save_s_median\": %.4f, "
               "\"save_gb_per_s\": %.4f, \"restore_s_median\": %.4f, \"restore_gb_per_s\": %.4f}\n",
               m.num_params, (unsigned long long)bytes, reps, save[reps / 2], bytes / save[reps / 2] / 1e9,
               load[reps / 2], bytes / load[reps / 2] / 1e9);
    }
    free(save);
    free(load);
    pt_adamw_free(&opt);
    qwen3_free(&m);
    pt_backend_destroy(be);
    return rc;
}

int cmd_ckpt(int argc, char **argv) {
    if (argc < 2) {
        help();
        return 2;
    }
    for (int i = 1; i < argc; i++)  // `ckpt verify --help` is a request for help, not a bad argument
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            help();
            return 0;
        }
    const char *sub = argv[1];
    if (!strcmp(sub, "bench")) return bench(argc, argv);
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
    const bool dcp = !c && dcp_is_checkpoint_dir(path);  // a foreign format, refused by ckpt_open: a usage error
    free(path);
    if (!c) {
        const int rc = cli_fail();
        return dcp ? 2 : rc;
    }
    int rc = 0;
    if (!strcmp(sub, "verify")) {
        double t0 = pt_now_s();
        char lacks[512];
        if (ckpt_verify(c) != 0 || verify_contents(c, lacks, sizeof lacks) != 0 || verify_finite(c) != 0)
            rc = cli_fail();
        else if (lacks[0])
            printf("%s: OK (step %ld, checksums and finite values verified in %.3f s); %s\n", ckpt_dir(c),
                   ckpt_step(c), pt_now_s() - t0, lacks);
        else printf("%s: OK (step %ld, checksums, finite values and the tensors of state.model_config verified in "
                    "%.3f s)\n", ckpt_dir(c), ckpt_step(c), pt_now_s() - t0);
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
