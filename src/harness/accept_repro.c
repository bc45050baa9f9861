// The reproduction block and the MFU of report.json (accept_repro.h).
#define _GNU_SOURCE
#include "harness/accept_repro.h"
#include "backend/cpu_dnnl.h"
#include "model/config.h"
#include "model/qwen3.h"
#include "util/fileio.h"
#include "util/sysinfo.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// The manifest.json of a run, or NULL.
static cJSON *manifest_of(const char *dir) {
    char *mp = pt_path_join(dir, "manifest.json");
    cJSON *man = pt_file_exists(mp) ? pt_json_parse_file(mp) : NULL;
    pt_clear_error();
    free(mp);
    return man;
}

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

// A device backend's own description of its device (OpenCL: device, platform, driver), NULL for the
// CPU backends, whose description is the host CPU's.
static char *backend_device(const run_t *r) {
    if (!strcmp(r->pl->backend, "cpu") || !strcmp(r->pl->backend, "cpu-ref")) return NULL;
    cJSON *man = manifest_of(r->dir);
    const char *d = jstr(cJSON_GetObjectItemCaseSensitive(man, "platform"), "backend_device");
    char *s = d ? pt_strdup(d) : NULL;
    cJSON_Delete(man);
    return s;
}

void acc_run_device(const run_t *r, const char *cpu, int threads, char *out, size_t n) {
    char *dev = backend_device(r);
    const int ranks = pt_platform_ranks(r->pl);
    char host[64];
    if (ranks > 1) snprintf(host, sizeof host, "%d ranks x %d threads", ranks, threads);
    else snprintf(host, sizeof host, "%d threads", threads);
    if (dev) snprintf(out, n, "%s (host: %s)", dev, host);
    else snprintf(out, n, "%s (%s)", cpu, host);
    free(dev);
}

// The CPU backends and an OpenCL device that is the host CPU (PoCL's "pthread-..." / "cpu-..." devices) run on cores whose
// peak is estimated from /proc/cpuinfo; another device's peak is not known here.
static bool on_host_cpu(const run_t *r) {
    if (!strcmp(r->pl->backend, "cpu") || !strcmp(r->pl->backend, "cpu-ref")) return true;
    char *dev = backend_device(r);
    const bool cpu = dev && !strcmp(r->pl->backend, "opencl") && (strstr(dev, " pthread-") || strstr(dev, " cpu-") || strstr(dev, "CPU"));
    free(dev);
    return cpu;
}

void acc_throughput_flops(const acc_ctx *c, const run_t *r, cJSON *side) {
    qwen3_config cfg;
    char *cp = c->model ? pt_path_join(c->model, "config.json") : NULL;
    const int ok = cp && qwen3_config_load(&cfg, cp) == 0;
    pt_clear_error();
    free(cp);
    const double tps = jnum(side, "median_tokens_per_s");
    if (!ok || !isfinite(tps)) return;
    const double fpt = qwen3_train_flops_per_token(&cfg, c->o->seq_len);
    cJSON_AddNumberToObject(side, "flops_per_token", fpt);
    cJSON_AddNumberToObject(side, "model_flops_per_s", fpt * tps);
    char how[256];
    const int cores = acc_run_threads(r->dir) * pt_platform_ranks(r->pl);
    const double peak = on_host_cpu(r) ? pt_cpu_peak_flops(cores, how, sizeof how) : 0;
    if (peak > 0) {
        cJSON_AddNumberToObject(side, "peak_flops_per_s", peak);
        cJSON_AddStringToObject(side, "peak_source", how);
        cJSON_AddNumberToObject(side, "mfu", fpt * tps / peak);
    } else
        cJSON_AddStringToObject(side, "peak_note", on_host_cpu(r) ? how : "the device's peak FLOP/s is not known here");
}

// The exact command of this process (/proc/self/cmdline), each argument shell-quoted where it needs it.
static char *self_command(void) {
    size_t len = 0;
    char *raw = pt_file_exists("/proc/self/cmdline") ? pt_read_file("/proc/self/cmdline", &len) : NULL;
    pt_clear_error();
    if (!raw) return pt_strdup("unknown (no /proc/self/cmdline)");
    char *out = pt_malloc(len * 4 + 16), *w = out;
    for (size_t i = 0; i < len; i += strlen(raw + i) + 1) {
        const char *a = raw + i;
        const bool plain = *a && strspn(a, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:=,@+-") == strlen(a);
        if (w != out) *w++ = ' ';
        if (plain) { strcpy(w, a); w += strlen(a); continue; }
        *w++ = '\'';
        for (; *a; a++) {
            if (*a == '\'') { memcpy(w, "'\\''", 4); w += 4; }
            else *w++ = *a;
        }
        *w++ = '\'';
    }
    *w = 0;
    free(raw);
    return out;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// OUT/logs/*.log, sorted: every run's stdout and stderr, its first line the run's command.
static cJSON *log_paths(const char *logs) {
    cJSON *a = cJSON_CreateArray();
    DIR *d = logs ? opendir(logs) : NULL;
    if (!d) return a;
    char *names[256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256) {
        const size_t l = strlen(e->d_name);
        if (l > 4 && !strcmp(e->d_name + l - 4, ".log")) names[n++] = pt_strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; i < n; i++) {
        char *p = pt_path_join(logs, names[i]);
        cJSON_AddItemToArray(a, cJSON_CreateString(p));
        free(p);
        free(names[i]);
    }
    return a;
}

static cJSON *software(const acc_ctx *c) {
    cJSON *man = manifest_of(c->cand.dir);
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(man, "software");
    cJSON *s = cJSON_IsObject(sw) ? cJSON_Duplicate(sw, 1) : cJSON_CreateObject();
    cJSON_Delete(man);
    const char *dnnl = pt_dnnl_version();
    if (dnnl) cJSON_AddStringToObject(s, "onednn", dnnl);
    else cJSON_AddStringToObject(s, "onednn", "not built in");
    return s;
}

cJSON *acc_reproduction(const acc_ctx *c) {
    cJSON *r = cJSON_CreateObject();
    char *cmd = self_command(), *cwd = getcwd(NULL, 0);
    cJSON_AddStringToObject(r, "command", cmd);
    cJSON_AddStringToObject(r, "cwd", cwd ? cwd : "");
    free(cmd);
    free(cwd);
    cJSON_AddItemToObject(r, "software", software(c));
    cJSON *dev = cJSON_AddObjectToObject(r, "devices");
    const run_t *rs[] = {&c->base, &c->cand};
    for (int i = 0; i < 2; i++) {
        char d[512];
        acc_run_device(rs[i], c->cpu, acc_run_threads(rs[i]->dir), d, sizeof d);
        cJSON_AddStringToObject(dev, rs[i]->role, d);
    }
    cJSON_AddItemToObject(r, "logs", log_paths(c->logs));
    return r;
}

char *acc_docs_dir(void) {
    char *probe = pt_install_path("docs/COMPARE.md");
    if (!probe) return NULL;
    *strrchr(probe, '/') = 0;
    return probe;
}
