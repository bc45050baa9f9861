#define _POSIX_C_SOURCE 200809L
#include "train/faults.h"
#include "backend/backend.h"
#include "util/common.h"

#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *const VARS[PT_FAULT_NKINDS] = {
    "PT_FAULT_KILL_AFTER_STEP", "PT_FAULT_KILL_IN_SAVE_STEP", "PT_FAULT_HANG_AFTER_STEP",
    "PT_FAULT_NAN_STEP",        "PT_FAULT_NAN_GRAD_STEP",     "PT_FAULT_NAN_WEIGHTS_STEP",
    "PT_FAULT_CORRUPT_CKPT_STEP", "PT_FAULT_ENOSPC_STEP"};
static const char *const NAMES[PT_FAULT_NKINDS] = {"kill", "kill-save", "hang", "nan", "nan-grad", "nan-weights",
                                                   "corrupt-checkpoint", "enospc"};

const char *pt_fault_env_var(int kind) { return kind >= 0 && kind < PT_FAULT_NKINDS ? VARS[kind] : NULL; }
const char *pt_fault_name(int kind) { return kind >= 0 && kind < PT_FAULT_NKINDS ? NAMES[kind] : "?"; }

bool pt_fault_ends_attempt(int kind) {
    return kind == PT_FAULT_KILL || kind == PT_FAULT_KILL_SAVE || kind == PT_FAULT_HANG || kind == PT_FAULT_ENOSPC;
}

bool pt_fault_recurs(int kind) { return kind == PT_FAULT_NAN || kind == PT_FAULT_NAN_GRAD; }

int pt_fault_parse(const char *spec, pt_fault *out, int max, int *n) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *save = NULL, *f = strtok_r(buf, ",", &save); f; f = strtok_r(NULL, ",", &save)) {
        int kind;
        if (!strncmp(f, "kill:", 5)) kind = strstr(f, "phase=save") ? PT_FAULT_KILL_SAVE : PT_FAULT_KILL;
        else if (!strncmp(f, "hang:", 5)) kind = PT_FAULT_HANG;
        else if (!strncmp(f, "nan:", 4))
            kind = strstr(f, "target=weights") ? PT_FAULT_NAN_WEIGHTS
                   : strstr(f, "target=grad")  ? PT_FAULT_NAN_GRAD
                                               : PT_FAULT_NAN;
        else if (!strncmp(f, "corrupt-checkpoint:", 19)) kind = PT_FAULT_CORRUPT_CKPT;
        else if (!strncmp(f, "enospc:", 7)) kind = PT_FAULT_ENOSPC;
        else {
            pt_set_error("--inject %s: unknown fault (kill, hang, nan, corrupt-checkpoint, enospc)", f);
            return -1;
        }
        const char *s = strstr(f, "step=");
        if (!s) { pt_set_error("--inject %s: needs step=S", f); return -1; }
        if (*n >= max) { pt_set_error("--inject: more than %d faults", max); return -1; }
        long step = -1;
        if (strncmp(s + 5, "random", 6) != 0) {
            char *end;
            step = strtol(s + 5, &end, 10);
            if (end == s + 5 || step < 1 || (*end && *end != ':')) {
                pt_set_error("--inject %s: step must be a positive integer or random", f);
                return -1;
            }
        }
        int rank = -1;
        const char *r = strstr(f, "rank=");
        if (r) {
            if (!strncmp(r + 5, "random", 6)) {
                rank = -2;
            } else {
                char *end;
                rank = (int)strtol(r + 5, &end, 10);
                if (end == r + 5 || rank < 0 || (*end && *end != ':')) {
                    pt_set_error("--inject %s: rank must be a world rank >= 0 or random", f);
                    return -1;
                }
            }
        }
        out[*n].kind = kind;
        out[*n].rank = rank;
        out[(*n)++].step = step;
    }
    return 0;
}

void pt_fault_sort(pt_fault *f, int n) {
    for (int i = 1; i < n; i++)  // insertion sort: stable, n <= 64
        for (int j = i; j > 0 && f[j - 1].step > f[j].step; j--) {
            const pt_fault t = f[j];
            f[j] = f[j - 1];
            f[j - 1] = t;
        }
}

int pt_fault_resolve_random(pt_fault *f, int n, long max_steps, int world) {
    for (int i = 0; i < n && max_steps <= 0; i++)
        if (f[i].step < 0) {
            pt_set_error("--inject step=random needs --max-steps");
            return -1;
        }
    const char *e = getenv("PT_INJECT_SEED");
    uint64_t x = e ? strtoull(e, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    for (int i = 0; i < n; i++) {
        if (f[i].step < 0) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;  // LCG; the high bits are good enough
            f[i].step = 1 + (long)((x >> 33) % (uint64_t)max_steps);
            fprintf(stderr, "inject: %s:step=random -> step %ld\n", pt_fault_name(f[i].kind), f[i].step);
        }
        if (f[i].rank == -2) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            f[i].rank = world > 0 ? (int)((x >> 33) % (uint64_t)world) : 0;
            fprintf(stderr, "inject: %s:rank=random -> rank %d\n", pt_fault_name(f[i].kind), f[i].rank);
        }
    }
    return 0;
}

int pt_fault_my_rank(void) {
    const int r = pt_env_rank();
    return r >= 0 ? r : 0;
}

void pt_fault_arm(const pt_fault *f) {
    const char *var = VARS[f->kind], *old = getenv(var);
    char v[2048], one[48];
    if (f->rank >= 0) snprintf(one, sizeof one, "%ld@%d", f->step, f->rank);
    else snprintf(one, sizeof one, "%ld", f->step);
    if (old && *old) snprintf(v, sizeof v, "%s,%s", old, one);
    else snprintf(v, sizeof v, "%s", one);
    setenv(var, v, 1);
}

void pt_fault_disarm_all(void) {
    for (int k = 0; k < PT_FAULT_NKINDS; k++) unsetenv(VARS[k]);
    unsetenv("PT_CKPT_CRASH_AT");
}

// Is `step` in the comma-separated list of variable `kind`?
static bool armed(int kind, long step) {
    const char *v = getenv(VARS[kind]);
    while (v && *v) {
        char *end;
        long s = strtol(v, &end, 10);
        if (end == v) return false;
        int rank = -1;
        if (*end == '@') rank = (int)strtol(end + 1, &end, 10);
        if (s == step && (rank < 0 || rank == pt_fault_my_rank())) return true;
        v = *end == ',' ? end + 1 : end;
    }
    return false;
}

static bool g_enospc_set;

void pt_fault_before_save(long step) {
    // Test-only: PT_FAULT_SLOW_SAVE_S=X starts every checkpoint save X seconds late (a slow disk).
    const char *slow = getenv("PT_FAULT_SLOW_SAVE_S");
    if (slow && atof(slow) > 0) {
        const double x = atof(slow);
        struct timespec ts = {(time_t)x, (long)((x - (double)(time_t)x) * 1e9)};
        while (nanosleep(&ts, &ts) != 0) {}
    }
    // Reuses the checkpoint writer's own crash switch: dies after the tensors
    // are written but before the manifest, the nastiest moment of a save.
    if (armed(PT_FAULT_KILL_SAVE, step)) setenv("PT_CKPT_CRASH_AT", "tensors-written", 1);
    // And its ENOSPC switch: the tensor file write fails after 4 KiB, as on a full disk.
    if (g_enospc_set) { unsetenv("PT_FAULT_ENOSPC_AFTER"); g_enospc_set = false; }
    if (armed(PT_FAULT_ENOSPC, step)) {
        setenv("PT_FAULT_ENOSPC_AFTER", "4096", 1);
        g_enospc_set = true;
    }
}

void pt_fault_after_save(long step, const char *dir) {
    static long fired = -1;  // once per process: a re-save of the step (after a rollback) is clean
    if (fired == step || !armed(PT_FAULT_CORRUPT_CKPT, step)) return;
    fired = step;
    char path[4096];
    snprintf(path, sizeof path, "%s/rank00000.safetensors", dir);
    int fd = open(path, O_RDWR);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || sb.st_size < 64) {
        if (fd >= 0) close(fd);
        fprintf(stderr, "inject: corrupt-checkpoint: cannot open %s\n", path);
        return;
    }
    // Flip 16 bytes inside the last tensor's data (the file ends with tensor data).
    unsigned char b[16];
    const off_t off = sb.st_size - 48;
    if (pread(fd, b, sizeof b, off) == (ssize_t)sizeof b) {
        for (size_t i = 0; i < sizeof b; i++) b[i] ^= 0xA5;
        if (pwrite(fd, b, sizeof b, off) != (ssize_t)sizeof b) fprintf(stderr, "inject: corrupt-checkpoint: write failed\n");
    }
    fsync(fd);
    close(fd);
    fprintf(stderr, "inject: corrupted %s (16 bytes at offset %lld)\n", path, (long long)off);
}

static void poison(pt_backend *be, real_t *p) {
    const real_t nan = (real_t)NAN;
    be->ops->upload(be, p, &nan, sizeof nan);
}

void pt_fault_after_backward(long step, qwen3_model *m, double *loss) {
    const bool all = armed(PT_FAULT_NAN, step);
    if (!all && !armed(PT_FAULT_NAN_GRAD, step)) return;
    poison(m->be, m->grads);
    if (all) *loss = NAN;
}

void pt_fault_after_update(long step, qwen3_model *m) {
    static long fired = -1;
    if (fired == step || !armed(PT_FAULT_NAN_WEIGHTS, step)) return;
    fired = step;
    poison(m->be, m->params);
    qwen3_params_changed(m);
}

void pt_fault_after_step(long step) {
    if (armed(PT_FAULT_KILL, step)) raise(SIGKILL);
    if (armed(PT_FAULT_HANG, step))
        for (;;) pause();  // a hung rank: alive, no progress
}

double pt_fault_lr_scale(const char *backend) {
    static double scale = NAN;  // read once: every step of a run uses the same scale
    if (!isnan(scale)) return scale;
    scale = 1.0;
    const char *v = getenv("PT_FAULT_LR_SCALE");
    if (!v || !*v) return scale;
    char *end;
    const double f = strtod(v, &end);
    if (end == v || !(f > 0) || !isfinite(f) || (*end && *end != '@')) {
        fprintf(stderr, "portatrain: error: PT_FAULT_LR_SCALE=%s: expected F or F@BACKEND with F > 0\n", v);
        exit(1);
    }
    if (*end == '@' && (!backend || strcmp(end + 1, backend) != 0)) return scale;
    scale = f;
    fprintf(stderr, "warning: PT_FAULT_LR_SCALE=%s: training at %g x the learning rate (test only)\n", v, f);
    return scale;
}
