#include "train/manifest.h"

#include "backend/backend.h"
#include "data/dataset.h"
#include "io/hf_model.h"
#include "util/common.h"
#include "util/fileio.h"
#include "util/sysinfo.h"
#include "util/hash.h"
#include "util/json.h"

#include <omp.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

// Set by CMakeLists.txt on this file only (so a new commit recompiles one file).
#ifndef PT_VERSION
#define PT_VERSION "0.1.0"
#endif
#ifndef PT_GIT_COMMIT
#define PT_GIT_COMMIT "unknown"
#endif
#ifndef PT_GIT_DIRTY
#define PT_GIT_DIRTY -1  // unknown
#endif

const char *pt_version(void) { return PT_VERSION; }

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

// {"name", "bytes", "sha256"} of one file; NULL + error naming it.
static cJSON *file_entry(const char *path, const char *name) {
    struct stat st;
    char hex[65];
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
        pt_set_error("%s: not a readable file", path);
        return NULL;
    }
    if (pt_sha256_file_hex(path, hex) != 0) return NULL;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", name ? name : base_name(path));
    cJSON_AddNumberToObject(e, "bytes", (double)st.st_size);
    cJSON_AddStringToObject(e, "sha256", hex);
    return e;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// The weight files of an HF model directory (as io/hf_model.c finds them).
static cJSON *weights_entries(const char *dir) {
    char *single = pt_path_join(dir, "model.safetensors");
    char *index = pt_path_join(dir, "model.safetensors.index.json");
    cJSON *arr = cJSON_CreateArray();
    int ok = 0;
    if (pt_file_exists(single)) {
        cJSON *e = file_entry(single, NULL);
        if (e) { cJSON_AddItemToArray(arr, e); ok = 1; }
    } else if (pt_file_exists(index)) {
        cJSON *root = pt_json_parse_file(index);
        const cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
        if (root && !cJSON_IsObject(wm)) pt_set_error("%s: missing \"weight_map\" object", index);
        if (cJSON_IsObject(wm)) {
            int cap = cJSON_GetArraySize(wm), n = 0;
            char **names = pt_calloc(cap ? (size_t)cap : 1, sizeof(char *));
            const cJSON *it;
            ok = 1;
            cJSON_ArrayForEach(it, wm) {
                if (!cJSON_IsString(it)) { pt_set_error("%s: weight_map entry \"%s\" is not a string", index, it->string); ok = 0; break; }
                int seen = 0;
                for (int i = 0; i < n; i++) seen |= !strcmp(names[i], it->valuestring);
                if (!seen) names[n++] = it->valuestring;
            }
            if (ok) qsort(names, (size_t)n, sizeof(char *), cmp_str);
            for (int i = 0; ok && i < n; i++) {
                char *p = pt_path_join(dir, names[i]);
                cJSON *e = file_entry(p, names[i]);
                free(p);
                if (!e) ok = 0;
                else cJSON_AddItemToArray(arr, e);
            }
            free(names);
        }
        cJSON_Delete(root);
    } else {
        pt_set_error("%s: no model.safetensors or model.safetensors.index.json", dir);
    }
    free(single);
    free(index);
    if (!ok) { cJSON_Delete(arr); return NULL; }
    return arr;
}

// The shard files --data resolves to (data/loader.h): one shard file, or the
// shards of a data set (dataset.json, a directory holding one, or a directory of *.bin).
static cJSON *data_entries(const char *path) {
    cJSON *arr = cJSON_CreateArray();
    if (!pt_dataset_path_is_index(path)) {
        cJSON *e = file_entry(path, NULL);
        if (!e) { cJSON_Delete(arr); return NULL; }
        cJSON_AddItemToArray(arr, e);
        return arr;
    }
    pt_dataset d;
    memset(&d, 0, sizeof d);
    if (pt_dataset_load(&d, path) != 0) { pt_dataset_free(&d); cJSON_Delete(arr); return NULL; }
    for (int i = 0; i < d.num_shards; i++) {
        cJSON *e = file_entry(d.shards[i].path, d.shards[i].file);
        if (!e) { pt_dataset_free(&d); cJSON_Delete(arr); return NULL; }
        cJSON_AddItemToArray(arr, e);
    }
    pt_dataset_free(&d);
    return arr;
}

static void add_u64(cJSON *o, const char *k, uint64_t v) {
    if (v <= (1ull << 53)) cJSON_AddNumberToObject(o, k, (double)v);
    else {  // a double would round it: keep every digit
        char b[32];
        snprintf(b, sizeof b, "%llu", (unsigned long long)v);
        cJSON_AddStringToObject(o, k, b);
    }
}

static cJSON *frozen_json(const pt_train_args *a, bool epochs_change_rows) {
    cJSON *f = cJSON_CreateObject();
    // the config the model was built from (--config, else MODEL/config.json), under its usual name: the same
    // config given either way is the same frozen input
    char *p = hf_model_config_path(a->model_dir, a->model_config);
    cJSON *e = p ? file_entry(p, "config.json") : NULL;
    free(p);
    if (!e) goto fail;
    cJSON_AddItemToObject(f, "config", e);
    cJSON *w = weights_entries(a->model_dir);
    if (!w) goto fail;
    cJSON_AddItemToObject(f, "weights", w);
    p = pt_path_join(a->model_dir, "tokenizer.json");
    if (pt_file_exists(p)) {
        e = file_entry(p, "tokenizer.json");
        free(p);
        if (!e) goto fail;
        cJSON_AddItemToObject(f, "tokenizer", e);
    } else {
        free(p);
        cJSON_AddNullToObject(f, "tokenizer");
    }
    cJSON *d = data_entries(a->data_path);
    if (!d) goto fail;
    cJSON_AddItemToObject(f, "data", d);
    add_u64(f, "seed", a->seed);
    cJSON *h = cJSON_AddObjectToObject(f, "hyperparameters");
    cJSON_AddNumberToObject(h, "learning_rate", a->learning_rate);
    cJSON_AddStringToObject(h, "lr_scheduler_type", a->lr_scheduler_type);
    if (a->lr_scheduler_kwargs && *a->lr_scheduler_kwargs)  // validated by the trainer: a JSON object
        cJSON_AddItemToObject(h, "lr_scheduler_kwargs", cJSON_Parse(a->lr_scheduler_kwargs));
    cJSON_AddNumberToObject(h, "warmup_steps", (double)a->warmup_steps);
    cJSON_AddNumberToObject(h, "max_steps", (double)a->max_steps);
    cJSON_AddNumberToObject(h, "per_device_train_batch_size", a->per_device_train_batch_size);
    cJSON_AddNumberToObject(h, "gradient_accumulation_steps", a->gradient_accumulation_steps);
    cJSON_AddNumberToObject(h, "seq_len", a->seq_len);
    cJSON_AddNumberToObject(h, "weight_decay", a->weight_decay);
    // Only where it differs from HF's groups (absent, as in manifests written before the option: "hf").
    if (a->weight_decay_params == PT_WD_ALL) cJSON_AddStringToObject(h, "weight_decay_params", "all");
    cJSON_AddNumberToObject(h, "adam_beta1", a->adam_beta1);
    cJSON_AddNumberToObject(h, "adam_beta2", a->adam_beta2);
    cJSON_AddNumberToObject(h, "adam_epsilon", a->adam_epsilon);
    cJSON_AddNumberToObject(h, "max_grad_norm", a->max_grad_norm);
    cJSON_AddStringToObject(h, "data_mode", pt_data_mode_name(a));
    cJSON_AddBoolToObject(h, "shuffle", a->shuffle);
    // Only where they change the rows read (else absent, as in manifests written before they existed: compare
    // reads an absent pair as "wrap", false, and the rows are then the same under either).
    if (epochs_change_rows) {
        cJSON_AddStringToObject(h, "epoch_boundary", pt_epoch_boundary_name(a->epoch_boundary));
        cJSON_AddBoolToObject(h, "dataloader_drop_last", a->dataloader_drop_last > 0);
    }
    return f;
fail:
    cJSON_Delete(f);
    return NULL;
}

static int has_flag(const char *flags, const char *f) {
    size_t n = strlen(f);
    for (const char *p = flags; p && (p = strstr(p, f)); p += n)
        if ((p == flags || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return 1;
    return 0;
}

static cJSON *device_json(void) {
    cJSON *d = cJSON_CreateObject();
    char *model = pt_cpuinfo_value("model name"), *flags = pt_cpuinfo_value("flags");
    if (model) cJSON_AddStringToObject(d, "cpu_model", model);
    else cJSON_AddNullToObject(d, "cpu_model");
    cJSON *fl = cJSON_AddArrayToObject(d, "cpu_flags");
    static const char *simd[] = {"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16"};
    for (size_t i = 0; flags && i < sizeof simd / sizeof simd[0]; i++)
        if (has_flag(flags, simd[i])) cJSON_AddItemToArray(fl, cJSON_CreateString(simd[i]));
    free(model);
    free(flags);
    cJSON_AddNumberToObject(d, "nproc", (double)sysconf(_SC_NPROCESSORS_ONLN));
    cJSON_AddNumberToObject(d, "omp_threads", omp_get_max_threads());
    double mem = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) { mem = (double)kb * 1024.0; break; }
        fclose(f);
    }
    if (mem > 0) cJSON_AddNumberToObject(d, "memory_total_bytes", mem);
    else cJSON_AddNullToObject(d, "memory_total_bytes");
    return d;
}

static cJSON *platform_json(const pt_train_args *a, const char *backend, const char *device, const int layout[3]) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "backend", backend ? backend : "");
    if (device && *device) cJSON_AddStringToObject(p, "backend_device", device);
    else cJSON_AddNullToObject(p, "backend_device");
    cJSON_AddStringToObject(p, "precision", a->precision ? a->precision : "fp32");
    cJSON *par = cJSON_AddObjectToObject(p, "parallel");
    const int tp = layout ? layout[0] : 1, fsdp = layout ? layout[1] : 1, dp = layout ? layout[2] : 1;
    cJSON_AddNumberToObject(par, "tp", tp);
    cJSON_AddNumberToObject(par, "dp", dp);
    cJSON_AddNumberToObject(par, "fsdp", fsdp);
    cJSON_AddNumberToObject(p, "world_size", tp * fsdp * dp);
    cJSON *ranks = cJSON_AddArrayToObject(p, "ranks");
    cJSON *r0 = cJSON_CreateObject();
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "unknown");
    cJSON_AddNumberToObject(r0, "rank", 0);
    cJSON_AddStringToObject(r0, "hostname", host);
    cJSON_AddItemToArray(ranks, r0);
    cJSON_AddItemToObject(p, "device", device_json());
    cJSON_AddBoolToObject(p, "tf32", a->tf32);  // --tf32: fp32 GEMMs on TF32 tensor cores (cuda)
    return p;
}

static cJSON *software_json(void) {
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "portatrain_version", PT_VERSION);
    cJSON_AddStringToObject(s, "git_commit", PT_GIT_COMMIT);
    if (PT_GIT_DIRTY < 0) cJSON_AddNullToObject(s, "git_dirty");
    else cJSON_AddBoolToObject(s, "git_dirty", PT_GIT_DIRTY > 0);
#ifdef __VERSION__
#if defined(__clang__)
    cJSON_AddStringToObject(s, "compiler", "clang " __VERSION__);
#elif defined(__GNUC__)
    cJSON_AddStringToObject(s, "compiler", "gcc " __VERSION__);
#else
    cJSON_AddStringToObject(s, "compiler", __VERSION__);
#endif
#else
    cJSON_AddNullToObject(s, "compiler");
#endif
    const char *blas = pt_backend_blas_config();
    if (blas) cJSON_AddStringToObject(s, "openblas", blas);
    else cJSON_AddNullToObject(s, "openblas");
    cJSON_AddStringToObject(s, "cjson", cJSON_Version());
    cJSON_AddStringToObject(s, "openssl", OpenSSL_version(OPENSSL_VERSION));
    return s;
}

cJSON *pt_manifest_build(const pt_train_args *a, const char *backend, const char *device, bool epochs_change_rows,
                         const int layout[3]) {
    cJSON *frozen = frozen_json(a, epochs_change_rows);
    if (!frozen) {
        pt_prefix_error("manifest: ");
        return NULL;
    }
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "format", PT_MANIFEST_FORMAT);
    cJSON_AddNumberToObject(m, "version", PT_MANIFEST_VERSION);
    char ts[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cJSON_AddStringToObject(m, "created_utc", ts);
    cJSON_AddItemToObject(m, "frozen", frozen);
    cJSON_AddItemToObject(m, "platform", platform_json(a, backend, device, layout));
    cJSON_AddItemToObject(m, "software", software_json());
    cJSON *run = cJSON_AddObjectToObject(m, "run");
    cJSON_AddStringToObject(run, "output_dir", a->output_dir);
    cJSON_AddStringToObject(run, "model", a->model_dir);
    cJSON_AddStringToObject(run, "data", a->data_path);
    if (a->resume_from_checkpoint) cJSON_AddStringToObject(run, "resume_from_checkpoint", a->resume_from_checkpoint);
    else cJSON_AddNullToObject(run, "resume_from_checkpoint");
    return m;
}

int pt_manifest_write(const pt_train_args *a, const char *backend, const char *device, bool epochs_change_rows,
                      const int layout[3]) {
    cJSON *m = pt_manifest_build(a, backend, device, epochs_change_rows, layout);
    if (!m) return -1;
    char *p = pt_path_join(a->output_dir, PT_MANIFEST_FILE);
    int rc = pt_json_write_file(p, m);  // errors name the path
    free(p);
    cJSON_Delete(m);
    return rc;
}

int pt_manifest_add_compile(const char *output_dir, struct pt_backend *be) {
    pt_compile_stats cs;
    be->ops->compile_stats(be, &cs);
    char *p = pt_path_join(output_dir, PT_MANIFEST_FILE);
    if (!pt_file_exists(p)) {  // a process that writes no manifest (e.g. a non-zero rank)
        free(p);
        return 0;
    }
    cJSON *m = pt_json_parse_file(p);
    cJSON *plat = m ? cJSON_GetObjectItemCaseSensitive(m, "platform") : NULL;
    int rc = -1;
    if (cJSON_IsObject(plat)) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "compile_s", cs.compile_seconds);
        cJSON_AddNumberToObject(c, "cache_hits", cs.cache_hits);
        cJSON_AddNumberToObject(c, "cache_misses", cs.cache_misses);
        cJSON_AddNumberToObject(c, "recompilations", cs.recompilations);
        cJSON_DeleteItemFromObjectCaseSensitive(plat, "compile");
        cJSON_AddItemToObject(plat, "compile", c);
        rc = pt_json_write_file(p, m);
    } else if (m) {
        pt_set_error("%s: no \"platform\" object", p);
    }
    cJSON_Delete(m);
    free(p);
    return rc;
}
