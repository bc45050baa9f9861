// portatrain accept: the acceptance suite. Every run is a child `portatrain`
// process (the same binary, /proc/self/exe), so each phase is timed as a
// user would see it and a crash in one run cannot corrupt the judge.
#define _GNU_SOURCE
#include "harness/accept.h"

#include "backend/backend.h"
#include "dist/comm.h"
#include "harness/compare.h"
#include "harness/report.h"
#include "train/metrics.h"
#include "train/schedule.h"
#include "train/train_args.h"
#include "util/common.h"
#include "util/fileio.h"
#include "util/hash.h"
#include "util/json.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// ---------------------------------------------------------------- platforms

int pt_platform_parse(const char *spec, pt_platform *p) {
    memset(p, 0, sizeof *p);
    snprintf(p->precision, sizeof p->precision, "fp32");
    if (!spec || !*spec || strlen(spec) >= sizeof p->text) {
        pt_set_error("platform SPEC '%s': expected backend[:fp32][:tp=N][:dp=N][:fsdp=N]", spec ? spec : "");
        return -1;
    }
    snprintf(p->text, sizeof p->text, "%s", spec);
    char buf[96];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ":", &save); tok; tok = strtok_r(NULL, ":", &save)) {
        if (!p->backend[0]) {
            snprintf(p->backend, sizeof p->backend, "%s", tok);
            continue;
        }
        if (!strcmp(tok, "fp32") || !strcmp(tok, "bf16")) {
            snprintf(p->precision, sizeof p->precision, "%s", tok);
            continue;
        }
        if (!strcmp(tok, "tf32")) {
            p->tf32 = true;
            continue;
        }
        int *dim = !strncmp(tok, "tp=", 3) ? &p->tp : !strncmp(tok, "dp=", 3) ? &p->dp
                   : !strncmp(tok, "fsdp=", 5) ? &p->fsdp : NULL;
        const char *v = dim ? strchr(tok, '=') + 1 : NULL;
        char *end;
        long n = v ? strtol(v, &end, 10) : 0;
        if (!dim || end == v || *end || n < 1 || n > 4096) {
            pt_set_error("platform SPEC '%s': unknown part '%s' (expected fp32, bf16, tf32, tp=N, dp=N or fsdp=N)", spec, tok);
            return -1;
        }
        *dim = (int)n;
    }
    // What this build can run: check now, not after an hour of baseline.
    char avail[128];
    snprintf(avail, sizeof avail, "%s", pt_backend_list());
    bool found = false;
    for (char *s2 = NULL, *b = strtok_r(avail, ",", &s2); b; b = strtok_r(NULL, ",", &s2))
        if (!strcmp(b, p->backend)) found = true;
    if (!found) {
        pt_set_error("platform SPEC '%s': backend '%s' is not built into this binary (available: %s)", spec,
                     p->backend, pt_backend_list());
        return -1;
    }
    // A built cuda backend may still find no device here: say so now too
    // (a probe: this process must not hold a GPU context its runs need).
    if (pt_backend_probe(p->backend) != 0) {
        pt_prefix_error("platform SPEC '%s': ", spec);
        return -1;
    }
    // unset dimensions (0) resolved as train resolves them for a job of the given ones' ranks
    const long ranks = (long)(p->tp ? p->tp : 1) * (p->dp ? p->dp : 1) * (p->fsdp ? p->fsdp : 1);
    if (ranks > 4096) {
        pt_set_error("platform SPEC '%s': tp x dp x fsdp = %ld ranks, more than 4096", spec, ranks);
        return -1;
    }
    pt_mesh m;
    pt_mesh_resolve((int)ranks, p->tp, p->fsdp, p->dp, NULL, &m);
    p->tp = m.tp, p->fsdp = m.fsdp, p->dp = m.dp;
    if (pt_platform_ranks(p) > 1 && !pt_comm_has_mpi()) {
        pt_set_error("platform SPEC '%s': a parallel layout runs its ranks under MPI, and this build has no MPI "
                     "(scripts/deps.sh installs Open MPI)", spec);
        return -1;
    }
    return 0;
}

int pt_platform_ranks(const pt_platform *p) { return p->tp * p->dp * p->fsdp; }

static void layout_text(const pt_platform *p, char *out, size_t n) {
    snprintf(out, n, "tp=%d dp=%d fsdp=%d", p->tp, p->dp, p->fsdp);
}

void pt_accept_defaults(pt_accept_opts *o) {
    memset(o, 0, sizeof *o);
    o->output_dir = "out/accept";
    o->config_path = "configs/tiny.json";
    o->init_seed = 42;
    o->tokenizer_dir = "data/demo/qwen3-tokenizer";
    o->train_data = "data/demo/shards/train";
    o->eval_data = "data/demo/shards/eval";
    o->price_table = "configs/prices.json";
    o->launcher = "mpirun";
    o->steps = 100;
    o->seq_len = 64;
    o->batch = 4;
    o->eval_batches = 16;
    o->learning_rate = 3e-3;
    o->weight_decay = 0.1;
    o->max_grad_norm = 1.0;
    o->warmup_steps = 20;
    o->seed = 42;
}

// ---------------------------------------------------------------- context

typedef struct {
    const pt_accept_opts *o;
    char exe[4096];
    char exe_path[4096];  // the binary's path, for a launcher that starts it on every rank
    char *out;          // report dir
    char *logs;         // OUT/logs
    char *model;        // initial model dir
    bool tty;
    cJSON *phases;      // [{run, phase, seconds, platform}]
    cJSON *reasons;     // verdict reasons
    long tokens;        // tokens trained over the whole experiment
    // The training recipe beyond accept's fixed flags (the data loader's semantics, the LR schedule, gradient
    // accumulation, AdamW's betas and epsilon): the user's --gradient-accumulation-steps etc., else a recorded
    // --baseline-run's values, else train's defaults with a cosine schedule. Every run of the suite trains
    // with it, as train's flags (recipe_argv), and report.json's settings name it.
    cJSON *recipe;
    char *recipe_argv[24];
    int recipe_argc;
} acc_ctx;

static char *xprintf(const char *fmt, ...) PT_PRINTF(1, 2);
static char *xprintf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0) s = NULL;
    va_end(ap);
    if (!s) { fprintf(stderr, "portatrain: out of memory\n"); abort(); }
    return s;
}

static void say(acc_ctx *c, const char *fmt, ...) PT_PRINTF(2, 3);
static void say(acc_ctx *c, const char *fmt, ...) {
    if (c->o->quiet) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static void add_reason(acc_ctx *c, const char *fmt, ...) PT_PRINTF(2, 3);
static void add_reason(acc_ctx *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0) s = NULL;
    va_end(ap);
    if (s) cJSON_AddItemToArray(c->reasons, cJSON_CreateString(s));
    free(s);
}

static void add_phase(acc_ctx *c, const char *run, const pt_platform *pl, const char *phase, double seconds) {
    if (seconds < 0) seconds = 0;
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "run", run);
    cJSON_AddStringToObject(p, "platform", pl->text);
    // Which side's price pays for it: by the platform itself, not its SPEC text (a recorded --baseline-run of
    // the same SPEC ran with its own thread count); shared set-up is billed to the baseline.
    cJSON_AddStringToObject(p, "billed_to", pl == &c->o->candidate ? "candidate" : "baseline");
    cJSON_AddStringToObject(p, "phase", phase);
    cJSON_AddNumberToObject(p, "seconds", seconds);
    // the processes it held: a layout's training runs one per rank; eval and the shared init are one
    cJSON_AddNumberToObject(p, "ranks", strcmp(phase, "eval") && pl->tp > 0 ? pt_platform_ranks(pl) : 1);
    cJSON_AddItemToArray(c->phases, p);
}

// ---------------------------------------------------------------- metrics

typedef struct {
    long step;
    double loss, grad_norm, step_time_s, tokens_per_s, save_time_s, restore_time_s;
    long tokens, save_bytes;
} metric_row;

typedef struct {
    metric_row *rows;
    int n;
} metrics_t;

static double jnum(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

// Reads RUN/metrics.jsonl; -1 with an error naming the file and line.
static int metrics_load(const char *run_dir, metrics_t *m) {
    memset(m, 0, sizeof *m);
    char *path = pt_path_join(run_dir, "metrics.jsonl");
    pt_metrics_log log;
    const int rc = pt_metrics_read(path, 0, &log);
    if (rc == 0 && log.tail == PT_METRICS_TAIL_TORN)  // the run was killed while writing its last record
        pt_warn("%s:%d: ignoring a torn last line (the run was stopped while writing it)", path, log.torn_lineno);
    free(path);
    if (rc != 0) return -1;
    m->rows = pt_calloc((size_t)log.n + 1, sizeof *m->rows);
    for (int i = 0; i < log.n; i++) {
        const pt_metrics_rec *x = &log.recs[i];
        m->rows[i] = (metric_row){.step = x->step, .loss = x->loss, .grad_norm = x->grad_norm,
                                  .step_time_s = x->step_time_s, .tokens_per_s = x->tokens_per_s,
                                  .save_time_s = x->save_time_s, .restore_time_s = x->restore_time_s,
                                  .tokens = x->tokens, .save_bytes = x->save_bytes};
    }
    m->n = log.n;
    pt_metrics_log_free(&log);
    return 0;
}

static const metric_row *metrics_at(const metrics_t *m, long step) {
    for (int i = 0; i < m->n; i++)
        if (m->rows[i].step == step) return &m->rows[i];
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(const metrics_t *m, size_t field_off) {
    double *v = pt_malloc(sizeof(double) * (size_t)(m->n + 1));
    int k = 0;
    for (int i = 0; i < m->n; i++) {
        const double x = *(const double *)((const char *)&m->rows[i] + field_off);
        if (isfinite(x)) v[k++] = x;
    }
    double med = NAN;
    if (k) { qsort(v, (size_t)k, sizeof *v, cmp_double); med = k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]); }
    free(v);
    return med;
}

// Training, checkpoint and start-up seconds of one train process.
static void metrics_phases(const metrics_t *m, long from_step, double *train_s, double *save_s, long *tokens) {
    *train_s = *save_s = 0;
    *tokens = 0;
    for (int i = 0; i < m->n; i++) {
        if (m->rows[i].step <= from_step) continue;  // lines carried over from a checkpoint
        if (isfinite(m->rows[i].step_time_s)) *train_s += m->rows[i].step_time_s;
        if (isfinite(m->rows[i].save_time_s)) *save_s += m->rows[i].save_time_s;
        *tokens += m->rows[i].tokens;
    }
}

// ---------------------------------------------------------------- children

// The step of the last complete line (-1: no file).
static long last_step_in(const char *metrics_path) {
    const long step = pt_metrics_last_step(metrics_path);
    return step > 0 ? step : -1;
}

static void fmt_duration(double s, char *out, size_t n) {
    if (!isfinite(s) || s < 0) { snprintf(out, n, "--"); return; }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(out, n, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(out, n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(out, n, "%lds", t);
}

typedef struct {
    const char *metrics;  // progress source (NULL: none)
    long from, to;        // steps
} progress_src;

static void draw_progress(acc_ctx *c, const char *label, const progress_src *p, double elapsed, bool final) {
    if (c->o->quiet) return;
    long done = 0, total = p->metrics ? p->to - p->from : 0;
    if (p->metrics) {
        long s = last_step_in(p->metrics);
        done = s > p->from ? s - p->from : 0;
        if (done > total) done = total;
    }
    char el[32], eta[32];
    fmt_duration(elapsed, el, sizeof el);
    fmt_duration(done > 0 ? elapsed / (double)done * (double)(total - done) : NAN, eta, sizeof eta);
    if (c->tty) {
        char bar[31];
        const int w = 30, fill = total > 0 ? (int)(w * done / total) : (final ? w : 0);
        for (int i = 0; i < w; i++) bar[i] = i < fill ? '#' : '.';
        bar[w] = 0;
        if (total > 0)
            fprintf(stderr, "\r  %-34s [%s] %4ld/%-4ld %7s ETA %-7s", label, bar, done, total, el, final ? "0s" : eta);
        else
            fprintf(stderr, "\r  %-34s [%s] %7s", label, bar, el);
        if (final) fputc('\n', stderr);
    } else if (final) {
        fprintf(stderr, "  %-34s done in %s\n", label, el);
    } else if (total > 0) {
        fprintf(stderr, "  %-34s %ld/%ld steps, %s elapsed, ETA %s\n", label, done, total, el, eta);
    }
    fflush(stderr);
}

// The last "portatrain: error: ..." line of a child's log (or its last line;
// the first line is the command run_child wrote, not the child's output).
static char *log_error(const char *log_path) {
    FILE *f = fopen(log_path, "r");
    if (!f) return pt_strdup("(no log)");
    char line[2048], last[2048] = "", err[2048] = "";
    for (int lineno = 1; fgets(line, sizeof line, f); lineno++) {
        line[strcspn(line, "\r\n")] = 0;
        if (!*line || (lineno == 1 && line[0] == '$')) continue;
        snprintf(last, sizeof last, "%s", line);
        const char *e = strstr(line, "error: ");
        if (e) snprintf(err, sizeof err, "%s", e + 7);
    }
    fclose(f);
    return pt_strdup(*err ? err : *last ? last : "no output");
}

// Runs `portatrain ARGS...` (ranks > 1: `LAUNCHER -np RANKS portatrain ARGS...`) with stdout to stdout_path
// (or the log) and stderr to the log. Returns the exit status (or 128+signal), -1 if it could not start;
// *wall = seconds it ran.
static int run_child(acc_ctx *c, const char *label, const char *log_name, const char *stdout_path,
                     const progress_src *prog, double *wall, int ranks, char **args) {
    char *log_path = xprintf("%s/%s.log", c->logs, log_name);
    int n = 0;
    while (args[n]) n++;
    char *words = ranks > 1 ? pt_strdup(c->o->launcher) : NULL, np[16];
    snprintf(np, sizeof np, "%d", ranks);
    char **argv = pt_calloc((size_t)n + 4 + (words ? strlen(words) : 0), sizeof *argv);
    int k = 0;
    for (char *sv = NULL, *w = words ? strtok_r(words, " \t", &sv) : NULL; w; w = strtok_r(NULL, " \t", &sv)) argv[k++] = w;
    if (words) {  // every rank starts the binary by its path (/proc/self/exe would be the launcher's daemon)
        argv[k++] = "-np";
        argv[k++] = np;
        argv[k++] = c->exe_path;
    } else argv[k++] = "portatrain";
    for (int i = 0; i < n; i++) argv[k++] = args[i];
    FILE *cmd = fopen(log_path, "w");
    if (cmd) {
        fprintf(cmd, "$");
        for (int i = 0; argv[i]; i++) fprintf(cmd, " %s", argv[i]);
        fprintf(cmd, "\n");
        fclose(cmd);
    }
    const double t0 = pt_now_s();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        pt_set_error("%s: cannot start a child process: %s", label, strerror(errno));
        free(argv); free(log_path);
        return -1;
    }
    if (pid == 0) {
        // A run must not outlive the suite that judges it (killed accept, CI timeout).
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() == 1) _exit(125);
        int lf = open(log_path, O_WRONLY | O_APPEND | O_CREAT, 0644);
        int of = stdout_path ? open(stdout_path, O_WRONLY | O_TRUNC | O_CREAT, 0644) : lf;
        if (lf < 0 || of < 0) _exit(126);
        dup2(of, 1);
        dup2(lf, 2);
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) dup2(nul, 0);
        if (words) execvp(argv[0], argv);
        else execv(c->exe, argv);
        _exit(127);
    }
    int status = 0;
    double last_draw = -1;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) break;
        const double now = pt_now_s();
        // a bar on a terminal; a line every 30 s in a log
        const double every = c->tty ? 0.5 : 30.0;
        if (last_draw < 0) last_draw = t0;
        if (now - last_draw >= every) { draw_progress(c, label, prog, now - t0, false); last_draw = now; }
        usleep(100 * 1000);
    }
    *wall = pt_now_s() - t0;
    draw_progress(c, label, prog, *wall, true);
    free(argv);
    free(words);
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
    if (rc != 0) {
        char *e = log_error(log_path);
        if (WIFSIGNALED(status))
            pt_set_error("killed by signal %d (%s): %s (log: %s)", WTERMSIG(status), strsignal(WTERMSIG(status)), e, log_path);
        else pt_set_error("exit %d: %s (log: %s)", rc, e, log_path);
        free(e);
    }
    free(log_path);
    return rc;
}

// Arguments of one training run; every run of the suite differs only in
// backend, output directory, checkpointing and resume/supervision.
typedef struct {
    char *v[96];  // ~60 at most: the fixed flags, a baseline's inherited ones, resume or supervision
    int n;
    char num[24][32];
    int nn;
} argbuf;

static void ab_add(argbuf *a, const char *s) { if (a->n < 95) a->v[a->n++] = (char *)s; a->v[a->n] = NULL; }
// The shortest text (of %.15g, %.17g) that reads back as the same double: a flag's value as typed.
static void exact_double(char *buf, size_t n, double x) {
    snprintf(buf, n, "%.15g", x);
    if (strtod(buf, NULL) != x) snprintf(buf, n, "%.17g", x);
}

static void ab_num(argbuf *a, const char *flag, const char *fmt, double x) {
    ab_add(a, flag);
    char *slot = a->num[a->nn++ % 24];
    if (!strcmp(fmt, "%ld")) snprintf(slot, 32, "%ld", (long)x);
    else exact_double(slot, 32, x);
    ab_add(a, slot);
}

static void train_args(acc_ctx *c, argbuf *a, const pt_platform *pl, const char *out_dir, long save_steps) {
    const pt_accept_opts *o = c->o;
    memset(a, 0, sizeof *a);
    ab_add(a, "train");
    ab_add(a, "--model"); ab_add(a, c->model);
    ab_add(a, "--data"); ab_add(a, o->train_data);
    ab_add(a, "--output-dir"); ab_add(a, out_dir);
    ab_add(a, "--backend"); ab_add(a, pl->backend);
    ab_add(a, "--precision"); ab_add(a, pl->precision);
    if (pl->tf32) ab_add(a, "--tf32");
    ab_num(a, "--max-steps", "%ld", (double)o->steps);
    ab_num(a, "--seq-len", "%ld", o->seq_len);
    // every platform trains on the same global batch: a layout's data ranks (fsdp x dp) share it
    ab_num(a, "--per-device-train-batch-size", "%ld", o->batch / (pl->fsdp * pl->dp));
    if (pt_platform_ranks(pl) > 1) {
        ab_num(a, "--tp", "%ld", pl->tp);
        ab_num(a, "--fsdp", "%ld", pl->fsdp);
        ab_num(a, "--dp", "%ld", pl->dp);
    }
    ab_num(a, "--learning-rate", "%g", o->learning_rate);
    ab_num(a, "--warmup-steps", "%ld", (double)o->warmup_steps);
    ab_num(a, "--weight-decay", "%g", o->weight_decay);
    ab_num(a, "--max-grad-norm", "%g", o->max_grad_norm);
    ab_num(a, "--seed", "%ld", (double)o->seed);
    ab_num(a, "--save-steps", "%ld", (double)save_steps);
    ab_num(a, "--save-total-limit", "%ld", 0);
    for (int i = 0; i < c->recipe_argc; i++) ab_add(a, c->recipe_argv[i]);
    ab_add(a, "--quiet");
}

// ---------------------------------------------------------------- files

static int copy_file(const char *src, const char *dst) {
    int in = open(src, O_RDONLY);
    if (in < 0) { pt_set_error("%s: %s", src, strerror(errno)); return -1; }
    int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0) { pt_set_error("%s: %s", dst, strerror(errno)); close(in); return -1; }
    char buf[1 << 16];
    ssize_t r;
    int rc = 0;
    while ((r = read(in, buf, sizeof buf)) > 0)
        if (pt_write_all(out, buf, (size_t)r, dst) != 0) { rc = -1; break; }
    if (r < 0) { pt_set_error("%s: %s", src, strerror(errno)); rc = -1; }
    if (close(out) != 0 && rc == 0) { pt_set_error("%s: %s", dst, strerror(errno)); rc = -1; }
    close(in);
    return rc;
}

// Copies the regular files of a (flat) checkpoint directory: the transfer of
// a checkpoint from one platform's storage to another's.
static int copy_dir(const char *src, const char *dst) {
    DIR *d = opendir(src);
    if (!d) { pt_set_error("%s: %s", src, strerror(errno)); return -1; }
    if (pt_mkdir_p(dst) != 0) { closedir(d); return -1; }
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char *s = pt_path_join(src, e->d_name), *t = pt_path_join(dst, e->d_name);
        struct stat st;
        if (stat(s, &st) == 0 && S_ISREG(st.st_mode)) rc = copy_file(s, t);
        free(s); free(t);
    }
    closedir(d);
    return rc;
}

static int remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return 0;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            for (struct dirent *e; (e = readdir(d));) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
                char *s = pt_path_join(path, e->d_name);
                remove_tree(s);
                free(s);
            }
            closedir(d);
        }
        return rmdir(path);
    }
    return unlink(path);
}

// Test-only fault: flip one byte in the middle of a checkpoint's tensor data.
static int corrupt_checkpoint(const char *ckpt_dir, char *what, size_t n) {
    DIR *d = opendir(ckpt_dir);
    if (!d) { pt_set_error("%s: %s", ckpt_dir, strerror(errno)); return -1; }
    char *victim = NULL;
    for (struct dirent *e; !victim && (e = readdir(d));) {
        const size_t l = strlen(e->d_name);
        if (l > 12 && !strcmp(e->d_name + l - 12, ".safetensors")) victim = pt_path_join(ckpt_dir, e->d_name);
    }
    closedir(d);
    if (!victim) { pt_set_error("%s: no .safetensors file to corrupt", ckpt_dir); return -1; }
    int fd = open(victim, O_RDWR);
    struct stat st;
    int rc = -1;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 16) {
        const off_t at = st.st_size - st.st_size / 3;
        unsigned char b;
        if (pread(fd, &b, 1, at) == 1) {
            b ^= 0x5a;
            if (pwrite(fd, &b, 1, at) == 1) { rc = 0; snprintf(what, n, "%s byte %lld", victim, (long long)at); }
        }
    }
    if (rc) pt_set_error("%s: cannot corrupt: %s", victim, strerror(errno));
    if (fd >= 0) close(fd);
    free(victim);
    return rc;
}

// sha256 of a file, or of a directory as the hash of "name sha256\n" lines of
// its regular files in name order (a data shard set).
static int sha256_path(const char *path, char hex[65]) {
    if (!pt_is_dir(path)) return pt_sha256_file_hex(path, hex);
    struct dirent **names = NULL;
    const int n = scandir(path, &names, NULL, alphasort);
    if (n < 0) { pt_set_error("%s: %s", path, strerror(errno)); return -1; }
    pt_sha256 *h = pt_sha256_new();
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (rc == 0 && names[i]->d_name[0] != '.') {
            char *f = pt_path_join(path, names[i]->d_name);
            char fh[65];
            if (!pt_is_dir(f)) {
                if (pt_sha256_file_hex(f, fh) != 0) rc = -1;
                else {
                    char line[512];
                    const int l = snprintf(line, sizeof line, "%s %s\n", names[i]->d_name, fh);
                    pt_sha256_update(h, line, (size_t)l);
                }
            }
            free(f);
        }
        free(names[i]);
    }
    free(names);
    pt_sha256_final_hex(h, hex);
    return rc;
}

static void cpu_model(char *out, size_t n) {
    snprintf(out, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10)) {
            const char *v = strchr(line, ':');
            if (v) {
                v++;
                while (*v == ' ') v++;
                snprintf(out, n, "%s", v);
                out[strcspn(out, "\n")] = 0;
            }
            break;
        }
    }
    fclose(f);
}

static int run_threads(const char *run_dir) {
    char *p = pt_path_join(run_dir, "train_args.json");
    cJSON *j = pt_file_exists(p) ? pt_json_parse_file(p) : NULL;
    free(p);
    const double t = jnum(j, "omp_threads");
    cJSON_Delete(j);
    if (isfinite(t) && t >= 1) return (int)t;
    return omp_get_max_threads();  // what a child started now uses (it inherits OMP_NUM_THREADS)
}

// ---------------------------------------------------------------- phases

typedef struct {
    const pt_platform *pl;
    const char *role;   // "baseline" / "candidate"
    char *dir;
    metrics_t m;
    double eval_loss;
    bool ok;            // trained and evaluated
} run_t;

// platform.compile.compile_s of a run's manifest.json (0 when absent: a
// backend that compiles nothing at run time).
static double compile_seconds(const char *dir) {
    char *mp = pt_path_join(dir, "manifest.json");
    cJSON *man = pt_file_exists(mp) ? pt_json_parse_file(mp) : NULL;
    pt_clear_error();
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(man, "platform"), "compile"), "compile_s");
    const double s = cJSON_IsNumber(v) && v->valuedouble > 0 ? v->valuedouble : 0;
    cJSON_Delete(man);
    free(mp);
    return s;
}

// One training run; records start-up, (compilation,) training and checkpoint phases.
static int train_run(acc_ctx *c, run_t *r, long save_steps) {
    argbuf a;
    train_args(c, &a, r->pl, r->dir, save_steps);
    char label[96];
    snprintf(label, sizeof label, "%s %s", r->role, r->pl->text);
    progress_src pr = {NULL, 0, c->o->steps};
    char *mp = pt_path_join(r->dir, "metrics.jsonl");
    pr.metrics = mp;
    remove_tree(r->dir);
    double wall;
    const int rc = run_child(c, label, r->role, NULL, &pr, &wall, pt_platform_ranks(r->pl), a.v);
    free(mp);
    // A run that failed part-way was still paid for: its steps are billed and
    // its curve kept (a candidate that crashed at step 90 of 100 cost 90 steps).
    char *err = rc != 0 ? pt_strdup(pt_last_error()) : NULL;
    if (metrics_load(r->dir, &r->m) != 0) {
        if (!err) return -1;
        memset(&r->m, 0, sizeof r->m);  // none (or unreadable): the whole wall is start-up
    }
    double tr, sv;
    long tok;
    metrics_phases(&r->m, 0, &tr, &sv, &tok);
    c->tokens += tok;
    // Run-time kernel compilation (opencl) is its own phase: the base program
    // is built during start-up, shape-specialised ones in the first step.
    const double cs = compile_seconds(r->dir);
    double su = wall - tr - sv;
    const double from_su = PT_MIN(cs, PT_MAX(su, 0.0));
    su -= from_su;
    tr -= PT_MIN(cs - from_su, tr);
    if (cs > 0) add_phase(c, r->role, r->pl, "compilation", cs);
    add_phase(c, r->role, r->pl, "start-up", su);
    add_phase(c, r->role, r->pl, "training", tr);
    add_phase(c, r->role, r->pl, "checkpoint", sv);
    if (err) {
        pt_set_error("%s", err);
        free(err);
        return -1;
    }
    return 0;
}

// `portatrain eval` of a run's final model -> RUN/eval.json (what compare reads).
static int eval_run(acc_ctx *c, run_t *r, const char *model_dir, const char *phase_run) {
    char *out = pt_path_join(r->dir, "eval.json");
    char mb[32], sl[32];
    snprintf(mb, sizeof mb, "%d", c->o->eval_batches);
    snprintf(sl, sizeof sl, "%d", c->o->seq_len);
    char *args[] = {"eval", "--model", (char *)model_dir, "--data", (char *)c->o->eval_data, "--seq-len", sl,
                    "--per-device-eval-batch-size", "8", "--max-batches", mb, "--backend", (char *)r->pl->backend,
                    "--precision", (char *)r->pl->precision, NULL};
    char label[96], logn[64];
    snprintf(label, sizeof label, "eval %s %s", r->role, r->pl->text);
    snprintf(logn, sizeof logn, "eval_%s", r->role);
    progress_src pr = {NULL, 0, 0};
    double wall;
    int rc = run_child(c, label, logn, out, &pr, &wall, 1, args);
    add_phase(c, phase_run, r->pl, "eval", wall);
    if (rc == 0) {
        cJSON *j = pt_json_parse_file(out);
        r->eval_loss = jnum(j, "loss");
        cJSON_Delete(j);
        if (!isfinite(r->eval_loss)) { pt_set_error("%s: no finite \"loss\"", out); rc = -1; }
    }
    if (rc != 0) unlink(out);
    free(out);
    return rc;
}

static const char *pair_profile(acc_ctx *c, const pt_platform *a, const pt_platform *b) {
    if (c->o->profile) return c->o->profile;
    if (!strcmp(a->backend, b->backend) && !strcmp(a->precision, b->precision) && a->tf32 == b->tf32 &&
        a->tp == b->tp && a->dp == b->dp && a->fsdp == b->fsdp)
        return "exact";
    // TF32 GEMMs (10-bit mantissa operands) are judged with the reduced-precision profile too
    const bool reduced = !strcmp(a->precision, "bf16") || !strcmp(b->precision, "bf16") || a->tf32 || b->tf32;
    return reduced ? "bf16" : "fp32";
}

// Reader resumes from writer's mid-run checkpoint (copied, as a transfer
// between platforms would), continues to the end; compared with the writer's
// uninterrupted run.
static cJSON *portability(acc_ctx *c, run_t *writer, const pt_platform *reader, const char *name) {
    const long M = c->o->checkpoint_step;
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "writer", writer->pl->text);
    cJSON_AddStringToObject(p, "reader", reader->text);
    cJSON_AddNumberToObject(p, "checkpoint_step", (double)M);
    const metric_row *sr = metrics_at(&writer->m, M);
    if (sr && isfinite(sr->save_time_s)) cJSON_AddNumberToObject(p, "save_time_s", sr->save_time_s);
    if (sr && sr->save_bytes) cJSON_AddNumberToObject(p, "bytes", (double)sr->save_bytes);
    char *base = xprintf("%s/portability/%s", c->out, name);
    char *ckpt = xprintf("%s/checkpoint-%ld", base, M);
    char *cont = xprintf("%s/run", base);
    char *src = xprintf("%s/checkpoint-%ld", writer->dir, M);
    remove_tree(base);
    pt_mkdir_p(base);
    bool ok = false;
    char detail[1024] = "";
    if (!pt_is_dir(src)) {
        snprintf(detail, sizeof detail, "the writer's run has no checkpoint-%ld (%s)", M, src);
    } else if (copy_dir(src, ckpt) != 0) {
        snprintf(detail, sizeof detail, "copying the checkpoint failed: %s", pt_last_error());
    } else {
        char fault[600] = "";
        if (c->o->test_fault && !strcmp(c->o->test_fault, "corrupt-checkpoint")) {
            if (corrupt_checkpoint(ckpt, fault, sizeof fault) != 0) snprintf(fault, sizeof fault, "(%s)", pt_last_error());
            say(c, "  test fault: corrupted %s", fault);
        }
        argbuf a;
        train_args(c, &a, reader, cont, 0);
        ab_add(&a, "--resume-from-checkpoint");
        ab_add(&a, ckpt);
        char label[128];
        snprintf(label, sizeof label, "%s resumes %s", reader->text, writer->pl->text);
        char *mp = pt_path_join(cont, "metrics.jsonl");
        progress_src pr = {mp, M, c->o->steps};
        double wall;
        const int rc = run_child(c, label, name, NULL, &pr, &wall, pt_platform_ranks(reader), a.v);
        free(mp);
        add_phase(c, name, reader, "portability", wall);
        metrics_t cm = {0};
        if (rc != 0) {
            snprintf(detail, sizeof detail, "%s could not restore %s's checkpoint-%ld: %s", reader->text,
                     writer->pl->text, M, pt_last_error());
        } else if (metrics_load(cont, &cm) != 0) {
            snprintf(detail, sizeof detail, "%s", pt_last_error());
        } else {
            double tr, sv;
            long tok;
            metrics_phases(&cm, M, &tr, &sv, &tok);
            c->tokens += tok;
            for (int i = 0; i < cm.n; i++)
                if (cm.rows[i].step == M + 1 && isfinite(cm.rows[i].restore_time_s))
                    cJSON_AddNumberToObject(p, "restore_time_s", cm.rows[i].restore_time_s);
            const char *prof = pair_profile(c, writer->pl, reader);
            pt_compare_opts co = {.profile = prof};
            cJSON *res = NULL;
            const int crc = pt_compare_runs(writer->dir, cont, &co, &res);
            const cJSON *ps = cJSON_GetObjectItemCaseSensitive(res, "per_step");
            const cJSON *pf = cJSON_GetObjectItemCaseSensitive(res, "profile");
            const double mx = jnum(ps, "max_rel_diff"), tol = jnum(pf, "per_step_loss");
            if (isfinite(mx)) cJSON_AddNumberToObject(p, "max_rel_diff", mx);
            if (isfinite(tol)) cJSON_AddNumberToObject(p, "tolerance", tol);
            const long last = cm.n ? cm.rows[cm.n - 1].step : 0;
            if (crc == 0 && last == c->o->steps) {
                ok = true;
                if (mx == 0) snprintf(detail, sizeof detail, "steps %ld-%ld bitwise identical to the writer's run", M + 1, last);
                else snprintf(detail, sizeof detail, "steps %ld-%ld within %s tolerance of the writer's run (max rel diff %.3g)",
                              M + 1, last, prof, mx);
            } else {
                const cJSON *rs = cJSON_GetObjectItemCaseSensitive(res, "reasons");
                const cJSON *r0 = cJSON_IsArray(rs) ? cJSON_GetArrayItem(rs, 0) : NULL;
                snprintf(detail, sizeof detail, "continuation of steps %ld-%ld differs from the writer's run: %s", M + 1,
                         last, cJSON_IsString(r0) ? r0->valuestring : crc == 2 ? pt_last_error() : "run incomplete");
            }
            cJSON_Delete(res);
        }
        free(cm.rows);
    }
    cJSON_AddBoolToObject(p, "ok", ok);
    cJSON_AddStringToObject(p, "detail", detail);
    if (!ok) add_reason(c, "portability: %s", detail);
    say(c, "  portability %s -> %s: %s", writer->pl->text, reader->text, ok ? "ok" : "FAILED");
    free(base); free(ckpt); free(cont); free(src);
    return p;
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static int files_equal(const char *a, const char *b) {
    const void *ma, *mb;
    size_t na, nb;
    if (pt_map_file(a, &ma, &na) != 0) return -1;
    if (pt_map_file(b, &mb, &nb) != 0) { pt_unmap_file(ma, na); return -1; }
    const int eq = na == nb && (na == 0 || memcmp(ma, mb, na) == 0);
    pt_unmap_file(ma, na);
    pt_unmap_file(mb, nb);
    return eq;
}

// The candidate trains again under the supervisor; its worker is killed at a
// seeded random step and restarted from the newest checkpoint.
static cJSON *recovery(acc_ctx *c, run_t *cand) {
    const pt_accept_opts *o = c->o;
    const long R = o->recovery_save_steps;
    // The kill step: seeded, uniform over [R+1, steps-1] minus the checkpoint
    // steps themselves, so a recovery always recomputes at least one step.
    long span = 0;
    for (long k = R + 1; k < o->steps; k++) span += k % R != 0;
    long pick = span ? (long)(splitmix64(o->seed ^ 0x6b696c6cull) % (uint64_t)span) : 0, S = R + 1;
    for (long k = R + 1; k < o->steps; k++)
        if (k % R != 0 && pick-- == 0) { S = k; break; }
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "platform", cand->pl->text);
    cJSON_AddStringToObject(r, "fault", "kill");
    cJSON_AddNumberToObject(r, "fault_step", (double)S);
    cJSON_AddNumberToObject(r, "save_steps", (double)R);
    char *dir = xprintf("%s/recovery", c->out);
    remove_tree(dir);
    argbuf a;
    train_args(c, &a, cand->pl, dir, R);
    char inject[64];
    const int world = pt_platform_ranks(cand->pl);
    if (world > 1) {  // one worker fails: a rank drawn from the seed, as the step is
        const int R = (int)(splitmix64(o->seed ^ 0x72616e6bull) % (uint64_t)world);
        snprintf(inject, sizeof inject, "kill:rank=%d:step=%ld", R, S);
        cJSON_AddNumberToObject(r, "fault_rank", R);
    } else snprintf(inject, sizeof inject, "kill:step=%ld", S);
    ab_add(&a, "--supervise");
    ab_add(&a, "--inject"); ab_add(&a, inject);
    // a layout: the supervisor runs the MPI job, which ends when its killed rank dies; -np tells it the world size
    char *launch = world > 1 ? xprintf("%s -np %d", o->launcher, world) : NULL;
    if (launch) { ab_add(&a, "--launcher"); ab_add(&a, launch); }
    ab_add(&a, "--max-restarts"); ab_add(&a, "3");
    char label[128];
    snprintf(label, sizeof label, "recovery %s (kill at step %ld)", cand->pl->text, S);
    char *mp = pt_path_join(dir, "metrics.jsonl");
    progress_src pr = {mp, 0, o->steps};
    double wall;
    const int rc = run_child(c, label, "recovery", NULL, &pr, &wall, 1, a.v);
    free(mp);
    free(launch);
    bool ok = false;
    char detail[1024] = "";
    cJSON *rj = NULL;
    char *rpath = pt_path_join(dir, "recovery.json");
    if (rc != 0) {
        snprintf(detail, sizeof detail, "the supervised run did not complete: %s", pt_last_error());
        add_phase(c, "recovery", cand->pl, "recovery", wall);
    } else if (!(rj = pt_json_parse_file(rpath))) {
        snprintf(detail, sizeof detail, "%s", pt_last_error());
        add_phase(c, "recovery", cand->pl, "recovery", wall);
    } else {
        const cJSON *recs = cJSON_GetObjectItemCaseSensitive(rj, "recoveries");
        const cJSON *r0 = cJSON_IsArray(recs) ? cJSON_GetArrayItem(recs, 0) : NULL;
        const char *keys[] = {"detect_s", "teardown_s", "restart_s", "restore_s", "replay_s", "total_s",
                              "restored_step", "steps_recomputed"};
        for (size_t i = 0; i < PT_ARRAY_LEN(keys); i++) {
            const double v = jnum(r0, keys[i]);
            if (isfinite(v)) cJSON_AddNumberToObject(r, keys[i], v);
        }
        const double gp = jnum(rj, "goodput"), ttr = jnum(r0, "total_s");
        if (isfinite(gp)) cJSON_AddNumberToObject(r, "goodput", gp);
        cJSON_AddNumberToObject(r, "restarts", jnum(rj, "restarts"));
        // The phases: time lost to recovery vs the rest of the supervised run.
        add_phase(c, "recovery", cand->pl, "recovery", isfinite(ttr) ? ttr : 0);
        add_phase(c, "recovery", cand->pl, "training", wall - (isfinite(ttr) ? ttr : 0));
        metrics_t rm = {0};
        if (metrics_load(dir, &rm) == 0) {
            double tr, sv;
            long tok;
            metrics_phases(&rm, 0, &tr, &sv, &tok);
            c->tokens += tok;
            // replayed steps are trained twice
            const double rec = jnum(r0, "steps_recomputed");
            if (isfinite(rec) && rm.n) c->tokens += (long)rec * rm.rows[0].tokens;
        }
        free(rm.rows);
        if (!r0) {
            snprintf(detail, sizeof detail, "the injected kill at step %ld was never observed (no recovery recorded)", S);
        } else {
            pt_compare_opts co = {.profile = "exact"};
            cJSON *res = NULL;
            const int crc = pt_compare_runs(cand->dir, dir, &co, &res);
            cJSON_AddStringToObject(r, "final_compare", crc == 0 ? "ACCEPTED" : crc == 1 ? "REJECTED" : "REFUSED");
            char *wa = pt_path_join(cand->dir, "model.safetensors"), *wb = pt_path_join(dir, "model.safetensors");
            const int eq = files_equal(wa, wb);
            cJSON_AddBoolToObject(r, "final_weights_identical", eq == 1);
            if (crc == 0 && eq == 1) {
                ok = true;
                snprintf(detail, sizeof detail, "killed at step %ld, restored step %ld, recovered in %.2f s; loss curve and final "
                         "weights bit-identical to the uninterrupted run", S, (long)jnum(r0, "restored_step"), ttr);
            } else {
                const cJSON *rs = cJSON_GetObjectItemCaseSensitive(res, "reasons");
                const cJSON *x = cJSON_IsArray(rs) ? cJSON_GetArrayItem(rs, 0) : NULL;
                snprintf(detail, sizeof detail, "the recovered run differs from the uninterrupted run: %s",
                         eq != 1 ? "final weights differ" : cJSON_IsString(x) ? x->valuestring : "curves differ");
            }
            free(wa); free(wb);
            cJSON_Delete(res);
        }
    }
    cJSON_Delete(rj);
    free(rpath);
    cJSON_AddBoolToObject(r, "ok", ok);
    cJSON_AddStringToObject(r, "detail", detail);
    if (!ok) add_reason(c, "recovery: %s", detail);
    say(c, "  recovery: %s", detail);
    free(dir);
    return r;
}

// ---------------------------------------------------------------- cost

typedef struct {
    double price;        // per unit-hour
    double units;        // units used (threads, or a fixed count)
    const char *id, *unit, *source, *date, *device;
} price_t;

static int price_for(const cJSON *table, const char *path, const pt_platform *pl, int threads, price_t *out) {
    memset(out, 0, sizeof *out);
    const cJSON *bk = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(table, "backends"), pl->backend);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(bk, "entry");
    if (!cJSON_IsString(id)) {
        pt_set_error("%s: backends.%s.entry: missing (which price entry pays for backend %s?)", path, pl->backend, pl->backend);
        return -1;
    }
    const cJSON *e, *entries = cJSON_GetObjectItemCaseSensitive(table, "entries");
    cJSON_ArrayForEach(e, entries) {
        const cJSON *eid = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (!cJSON_IsString(eid) || strcmp(eid->valuestring, id->valuestring)) continue;
        out->id = eid->valuestring;
        const double pr = jnum(e, "price_per_hour");
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(e, "source"), *dt = cJSON_GetObjectItemCaseSensitive(e, "date");
        const cJSON *un = cJSON_GetObjectItemCaseSensitive(e, "unit"), *dv = cJSON_GetObjectItemCaseSensitive(e, "device");
        if (!isfinite(pr) || pr < 0 || !cJSON_IsString(src) || !cJSON_IsString(dt) || !cJSON_IsString(un)) {
            pt_set_error("%s: entries[id=%s]: needs a non-negative price_per_hour, a unit, a source and a date", path, out->id);
            return -1;
        }
        // No machine costs 1e12 an hour: a larger figure is a unit slip, and would overflow the cost to inf
        // (JSON null), which the report would read as "no accepted outcome".
        if (pr > 1e12) {
            pt_set_error("%s: entries[id=%s]: price_per_hour %g is above 1e12 (a unit error?)", path, out->id, pr);
            return -1;
        }
        out->price = pr;
        out->source = src->valuestring;
        out->date = dt->valuestring;
        out->unit = un->valuestring;
        out->device = cJSON_IsString(dv) ? dv->valuestring : out->id;
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(bk, "units");
        if (cJSON_IsString(u) && !strcmp(u->valuestring, "threads")) out->units = threads;
        else if (cJSON_IsNumber(u) && u->valuedouble > 0) out->units = u->valuedouble;
        else {
            pt_set_error("%s: backends.%s.units: must be \"threads\" or a positive number", path, pl->backend);
            return -1;
        }
        return 0;
    }
    pt_set_error("%s: backends.%s.entry '%s' names no entry in \"entries\"", path, pl->backend, id->valuestring);
    return -1;
}

static cJSON *cost_section(acc_ctx *c, const cJSON *table, const pt_platform *base, const pt_platform *cand,
                           int threads_base, int threads_cand, bool accepted, const char *cpu) {
    const pt_accept_opts *o = c->o;
    price_t pb, pc;
    if (price_for(table, o->price_table, base, threads_base, &pb) != 0) return NULL;
    if (price_for(table, o->price_table, cand, threads_cand, &pc) != 0) return NULL;
    cJSON *cost = cJSON_CreateObject();
    cJSON_AddStringToObject(cost, "price_table", o->price_table);
    const cJSON *cur = cJSON_GetObjectItemCaseSensitive(table, "currency");
    cJSON_AddStringToObject(cost, "currency", cJSON_IsString(cur) ? cur->valuestring : "USD");
    cJSON *rows = cJSON_AddArrayToObject(cost, "rows");
    double total = 0;
    const cJSON *ph;
    cJSON_ArrayForEach(ph, c->phases) {
        const char *pl = cJSON_GetObjectItemCaseSensitive(ph, "platform")->valuestring;
        const price_t *p = !strcmp(cJSON_GetObjectItemCaseSensitive(ph, "billed_to")->valuestring, "candidate") ? &pc : &pb;
        const char *run = cJSON_GetObjectItemCaseSensitive(ph, "run")->valuestring;
        const char *phase = cJSON_GetObjectItemCaseSensitive(ph, "phase")->valuestring;
        const double ranks = jnum(ph, "ranks");
        const double hours = jnum(ph, "seconds") / 3600.0, per_hour = p->price * p->units * ranks, cost_i = hours * per_hour;
        cJSON *r = cJSON_CreateObject();
        char item[160], dev[300];
        snprintf(item, sizeof item, "%s %s", run, phase);
        if (!strcmp(p->unit, "core-hour")) snprintf(dev, sizeof dev, "%s (%g cores)", cpu, p->units * ranks);
        else snprintf(dev, sizeof dev, "%s (%g x %s)", p->device, p->units * ranks, p->unit);
        cJSON_AddStringToObject(r, "item", item);
        cJSON_AddStringToObject(r, "platform", pl);
        cJSON_AddStringToObject(r, "device", dev);
        cJSON_AddStringToObject(r, "phase", phase);
        cJSON_AddNumberToObject(r, "ranks", ranks);
        cJSON_AddNumberToObject(r, "hours", hours);
        cJSON_AddNumberToObject(r, "price_per_hour", per_hour);
        cJSON_AddStringToObject(r, "price_entry", p->id);
        cJSON_AddStringToObject(r, "source", p->source);
        cJSON_AddStringToObject(r, "date", p->date);
        cJSON_AddNumberToObject(r, "cost", cost_i);
        cJSON_AddItemToArray(rows, r);
        total += cost_i;
    }
    cJSON_AddNumberToObject(cost, "total_cost", total);
    cJSON_AddNumberToObject(cost, "accepted_outcomes", accepted ? 1 : 0);
    if (accepted) cJSON_AddNumberToObject(cost, "cost_per_accepted_outcome", total);
    else {
        cJSON_AddNullToObject(cost, "cost_per_accepted_outcome");
        cJSON_AddStringToObject(cost, "note", "the candidate was not accepted: no accepted training outcome to divide by");
    }
    cJSON_AddNumberToObject(cost, "tokens", (double)c->tokens);
    if (total > 0) cJSON_AddNumberToObject(cost, "tokens_per_dollar", (double)c->tokens / total);
    return cost;
}

// ---------------------------------------------------------------- report

static cJSON *run_identity(const run_t *r, const char *cpu, int threads) {
    cJSON *j = cJSON_CreateObject();
    char lay[64], dev[320];
    layout_text(r->pl, lay, sizeof lay);
    const int ranks = pt_platform_ranks(r->pl);
    if (ranks > 1) snprintf(dev, sizeof dev, "%s (%d ranks x %d threads)", cpu, ranks, threads);
    else snprintf(dev, sizeof dev, "%s (%d threads)", cpu, threads);
    cJSON_AddStringToObject(j, "spec", r->pl->text);
    cJSON_AddStringToObject(j, "run_dir", r->dir);
    cJSON_AddStringToObject(j, "backend", r->pl->backend);
    cJSON_AddStringToObject(j, "device", dev);
    cJSON_AddStringToObject(j, "precision", r->pl->precision);
    cJSON_AddStringToObject(j, "layout", lay);
    cJSON_AddNumberToObject(j, "ranks", ranks);
    cJSON_AddNumberToObject(j, "steps", r->m.n ? (double)r->m.rows[r->m.n - 1].step : 0);
    // run-time kernel compilation (device backends: manifest platform.compile)
    char *mp = pt_path_join(r->dir, "manifest.json");
    cJSON *man = pt_file_exists(mp) ? pt_json_parse_file(mp) : NULL;
    pt_clear_error();
    const cJSON *comp = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(man, "platform"), "compile");
    if (cJSON_IsObject(comp)) cJSON_AddItemToObject(j, "compile", cJSON_Duplicate(comp, 1));
    cJSON_Delete(man);
    free(mp);
    return j;
}

static cJSON *curve_of(const metrics_t *m) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < m->n; i++) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "step", (double)m->rows[i].step);
        const char *k[] = {"loss", "grad_norm", "step_time_s", "tokens_per_s"};
        const double v[] = {m->rows[i].loss, m->rows[i].grad_norm, m->rows[i].step_time_s, m->rows[i].tokens_per_s};
        for (int j = 0; j < 4; j++)
            if (isfinite(v[j])) cJSON_AddNumberToObject(p, k[j], v[j]);
        cJSON_AddItemToArray(a, p);
    }
    return a;
}

static void copy_num(cJSON *dst, const char *dk, const cJSON *src, const char *sk) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(src, sk);
    if (cJSON_IsNumber(v)) cJSON_AddNumberToObject(dst, dk, v->valuedouble);
    else if (cJSON_IsNull(v)) cJSON_AddNullToObject(dst, dk);
}

// compare's result -> the report's convergence section (report.c's keys).
static cJSON *convergence_section(const cJSON *cmp, const run_t *a, const run_t *b) {
    cJSON *cv = cJSON_CreateObject();
    const cJSON *pf = cJSON_GetObjectItemCaseSensitive(cmp, "profile");
    const cJSON *pn = cJSON_GetObjectItemCaseSensitive(pf, "name");
    cJSON_AddStringToObject(cv, "profile", cJSON_IsString(pn) ? pn->valuestring : "?");
    const cJSON *vd = cJSON_GetObjectItemCaseSensitive(cmp, "verdict");
    cJSON_AddStringToObject(cv, "verdict", cJSON_IsString(vd) ? vd->valuestring : "?");
    cJSON_AddItemToObject(cv, "reasons", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(cmp, "reasons"), 1));
    copy_num(cv, "tolerance_rel", pf, "per_step_loss");
    cJSON_AddItemToObject(cv, "tolerances", cJSON_Duplicate(pf, 1));
    const cJSON *s0 = cJSON_GetObjectItemCaseSensitive(cmp, "step0");
    cJSON *o0 = cJSON_AddObjectToObject(cv, "step0");
    copy_num(o0, "step", s0, "step");
    copy_num(o0, "loss_a", s0, "loss_a");
    copy_num(o0, "loss_b", s0, "loss_b");
    copy_num(o0, "rel_diff", s0, "loss_rel_diff");
    const metric_row *ra = a->m.n ? &a->m.rows[0] : NULL, *rb = b->m.n ? &b->m.rows[0] : NULL;
    if (ra && isfinite(ra->grad_norm)) cJSON_AddNumberToObject(o0, "grad_norm_a", ra->grad_norm);
    if (rb && isfinite(rb->grad_norm)) cJSON_AddNumberToObject(o0, "grad_norm_b", rb->grad_norm);
    copy_num(o0, "grad_norm_rel_diff", s0, "grad_norm_rel_diff");
    cJSON_AddItemToObject(cv, "per_step", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(cmp, "per_step"), 1));
    const cJSON *fw = cJSON_GetObjectItemCaseSensitive(cmp, "final_window");
    cJSON *ow = cJSON_AddObjectToObject(cv, "final_window");
    copy_num(ow, "steps", fw, "window");
    copy_num(ow, "mean_a", fw, "mean_loss_a");
    copy_num(ow, "mean_b", fw, "mean_loss_b");
    copy_num(ow, "rel_diff", fw, "rel_diff");
    copy_num(ow, "tolerance", pf, "final_window_loss");
    cJSON_AddItemToObject(cv, "eval", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(cmp, "eval"), 1));
    cJSON_AddItemToObject(cv, "frozen_inputs", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(cmp, "frozen_inputs"), 1));
    return cv;
}

static cJSON *frozen_section(acc_ctx *c) {
    const pt_accept_opts *o = c->o;
    cJSON *f = cJSON_CreateObject();
    char hex[65];
    char *cfg = pt_path_join(c->model, "config.json"), *w = pt_path_join(c->model, "model.safetensors");
    char *tok = pt_path_join(c->model, "tokenizer.json");
    struct { const char *key, *path; } items[] = {{"config_sha256", cfg}, {"initial_weights_sha256", w},
                                                  {"tokenizer_sha256", tok}, {"dataset_sha256", o->train_data},
                                                  {"eval_dataset_sha256", o->eval_data}};
    for (size_t i = 0; i < PT_ARRAY_LEN(items); i++) {
        if (pt_file_exists(items[i].path) && sha256_path(items[i].path, hex) == 0) cJSON_AddStringToObject(f, items[i].key, hex);
        else cJSON_AddNullToObject(f, items[i].key);
    }
    cJSON_AddNumberToObject(f, "seed", (double)o->seed);
    free(cfg); free(w); free(tok);
    return f;
}

static void iso_now(char *out, size_t n) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

// ---------------------------------------------------------------- the suite

static int prepare_model(acc_ctx *c) {
    const pt_accept_opts *o = c->o;
    if (o->model_dir) {
        c->model = pt_strdup(o->model_dir);
        return 0;
    }
    c->model = xprintf("%s/init", c->out);
    remove_tree(c->model);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->init_seed);
    char *args[] = {"init", "--config", (char *)o->config_path, "--seed", seed, "--output-dir", c->model, NULL};
    progress_src pr = {NULL, 0, 0};
    double wall;
    static const pt_platform shared = {.text = "shared"};
    if (run_child(c, "init (seeded weights)", "init", NULL, &pr, &wall, 1, args) != 0) return -1;
    add_phase(c, "init", &shared, "start-up", wall);
    const char *files[] = {"tokenizer.json", "tokenizer_config.json"};
    for (size_t i = 0; i < PT_ARRAY_LEN(files); i++) {
        char *s = pt_path_join(o->tokenizer_dir, files[i]), *d = pt_path_join(c->model, files[i]);
        int rc = 0;
        if (pt_file_exists(s)) rc = copy_file(s, d);
        else if (i == 0) { pt_set_error("%s: missing (--tokenizer-dir)", s); rc = -1; }
        free(s); free(d);
        if (rc) return -1;
    }
    return 0;
}

// A recorded baseline run: linked into OUT/baseline so compare and the
// report read it; eval.json is produced when it has none.
static int adopt_baseline(acc_ctx *c, run_t *b) {
    const char *src = c->o->baseline_run;
    char *mp = pt_path_join(src, "metrics.jsonl");
    if (!pt_file_exists(mp)) {
        pt_set_error("--baseline-run %s: no metrics.jsonl (not a portatrain run directory)", src);
        free(mp);
        return -1;
    }
    free(mp);
    char *abs = realpath(src, NULL);
    if (!abs) { pt_set_error("--baseline-run %s: %s", src, strerror(errno)); return -1; }
    remove_tree(b->dir);
    pt_mkdir_p(b->dir);
    DIR *d = opendir(abs);
    int rc = d ? 0 : -1;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "eval.json")) continue;
        char *s = pt_path_join(abs, e->d_name), *t = pt_path_join(b->dir, e->d_name);
        if (symlink(s, t) != 0) { pt_set_error("%s: %s", t, strerror(errno)); rc = -1; }
        free(s); free(t);
    }
    if (d) closedir(d);
    char *ev = pt_path_join(abs, "eval.json"), *evd = pt_path_join(b->dir, "eval.json");
    if (rc == 0 && pt_file_exists(ev)) rc = copy_file(ev, evd);
    free(ev); free(evd); free(abs);
    if (rc != 0) return -1;
    return metrics_load(b->dir, &b->m);
}

// The training recipe beyond accept's fixed flags (acc_ctx.recipe). A recorded baseline's values come from its
// train_args.json (every value it ran with), else manifest.json's frozen hyperparameters; absent loader fields
// are what runs before those options read: wrap, no drop_last, unshuffled, packed (as compare reads them). A
// candidate that read other rows, or trained with another schedule or optimizer setting, would be refused by
// compare as "frozen inputs differ" (was, before the suite inherited them: a baseline recorded with
// --epoch-boundary wrap whose data ends within the run, or with another schedule, always REFUSED).
// The recipe's settings are the train flags its table marks recipe (train/train_args.c: pt_train_recipe_flag).

static const char *type_name(int t) {
    return t == cJSON_True ? "boolean" : t == cJSON_Number ? "number" : t == cJSON_String ? "string" : "JSON object";
}

static bool has_type(const cJSON *v, int t) {
    return t == cJSON_True ? cJSON_IsBool(v) : t == cJSON_Number ? cJSON_IsNumber(v)
           : t == cJSON_String ? cJSON_IsString(v) : cJSON_IsObject(v);
}

// A recipe value as its train flag's value is typed: "linear", 0.95, {"min_lr_rate":0.1}, true.
static char *recipe_value_text(const cJSON *v) {
    char num[32];
    if (cJSON_IsString(v)) return pt_strdup(v->valuestring);
    if (cJSON_IsNumber(v)) { exact_double(num, sizeof num, v->valuedouble); return pt_strdup(num); }
    if (cJSON_IsBool(v)) return pt_strdup(cJSON_IsTrue(v) ? "true" : "false");
    return cJSON_PrintUnformatted(v);
}

// "gradient_accumulation_steps" -> "--gradient-accumulation-steps"
static char *recipe_flag(const char *key) {
    char *flag = xprintf("--%s", key);
    for (char *q = flag + 2; *q; q++)
        if (*q == '_') *q = '-';
    return flag;
}

// Numbers exactly (a beta of 0.95 is not 0.9500000001), the rest structurally.
static bool same_value(const cJSON *a, const cJSON *b) {
    if (cJSON_IsNumber(a) && cJSON_IsNumber(b)) return a->valuedouble == b->valuedouble;
    return cJSON_Compare(a, b, true);
}

// obj[key] = a copy of v, replacing any value there.
static void set_item(cJSON *obj, const char *key, const cJSON *v) {
    cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    cJSON_AddItemToObject(obj, key, cJSON_Duplicate(v, 1));
}

// What a recorded --baseline-run trained with: a new object (NULL, no error: it records none of it).
static cJSON *baseline_recipe(const char *dir) {
    char *p = pt_path_join(dir, "train_args.json");
    cJSON *j = pt_file_exists(p) ? pt_json_parse_file(p) : NULL;
    const cJSON *h = j;
    if (!j) {
        free(p);
        p = pt_path_join(dir, "manifest.json");
        j = pt_file_exists(p) ? pt_json_parse_file(p) : NULL;
        h = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "frozen"), "hyperparameters");
    }
    cJSON *r = NULL;
    if (cJSON_IsObject(h)) {
        r = cJSON_CreateObject();
        pt_train_legacy_loader_json(r, true);  // the loader's values before its options existed
        const pt_train_flag *f;
        for (int i = 0; (f = pt_train_recipe_flag(i)); i++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(h, f->key);
            if (!v) continue;
            if (!has_type(v, f->json)) {
                pt_set_error("--baseline-run %s: %s: %s is not a %s", dir, p, f->key, type_name(f->json));
                cJSON_Delete(r);
                r = NULL;
                break;
            }
            set_item(r, f->key, v);
        }
    }
    cJSON_Delete(j);
    free(p);
    return r;
}

static void free_recipe(acc_ctx *c) {
    cJSON_Delete(c->recipe);
    for (int i = 0; i < c->recipe_argc; i++) free(c->recipe_argv[i]);
    c->recipe = NULL;
    c->recipe_argc = 0;
}

// The recipe's values and accept's training flags as train checks them (its flag table's parsers, then
// pt_train_args_check), now rather than in a child after the baseline has trained.
static int check_recipe(const pt_accept_opts *o, const cJSON *r) {
    pt_train_args t;
    pt_train_args_defaults(&t);
    t.learning_rate = o->learning_rate, t.warmup_steps = o->warmup_steps, t.weight_decay = o->weight_decay;
    t.max_grad_norm = o->max_grad_norm, t.seed = o->seed, t.seq_len = o->seq_len, t.max_steps = o->steps;
    t.per_device_train_batch_size = o->batch;
    char *text[64];  // the values as typed, which t's strings point into until the checks are done
    int n = 0, rc = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, r) {
        const pt_train_flag *f = pt_train_flag_find_key(v->string);
        if (!f || n == (int)PT_ARRAY_LEN(text)) {
            pt_set_error("recipe key '%s' is not a train flag", v->string);
            rc = -1;
            break;
        }
        text[n] = recipe_value_text(v);
        if ((rc = pt_train_flag_set(f, text[n++], &t)) != 0) break;
    }
    pt_lr_schedule sched;
    if (rc == 0) rc = pt_train_args_check(&t, &sched);
    if (rc == 0) rc = pt_lr_schedule_check(&sched, o->learning_rate, o->warmup_steps, o->steps);
    if (rc != 0) pt_prefix_error("accept: ");
    for (int i = 0; i < n; i++) free(text[i]);
    return rc;
}

// c->recipe and its train flags: the user's recipe flags over the recorded baseline's (base_dir; which they
// must not contradict) or over accept's default (a cosine schedule; train's defaults for the rest).
static int build_recipe(acc_ctx *c, const char *base_dir) {
    const cJSON *user = c->o->recipe;
    cJSON *r = NULL;
    if (base_dir) {
        pt_clear_error();
        r = baseline_recipe(base_dir);
        if (!r && pt_has_error()) return -1;
    }
    const bool recorded = r != NULL;  // else (no baseline, or one that records none of it) accept's default
    if (!r) {
        r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "lr_scheduler_type", "cosine");
    }
    const cJSON *u;
    cJSON_ArrayForEach(u, user) {
        bool known = false;
        const pt_train_flag *f;
        for (int i = 0; (f = pt_train_recipe_flag(i)); i++)
            if (!strcmp(f->key, u->string)) known = has_type(u, f->json);
        if (!known) {  // a caller's bug (the CLI only sets these keys), not the user's
            pt_set_error("accept: recipe key '%s' is not a training recipe setting of its type", u->string);
            cJSON_Delete(r);
            return -1;
        }
        const cJSON *rec = cJSON_GetObjectItemCaseSensitive(r, u->string);
        if (recorded && rec && !same_value(rec, u)) {
            char *flag = recipe_flag(u->string), *given = recipe_value_text(u), *had = recipe_value_text(rec);
            pt_set_error("accept: %s %s: the --baseline-run %s trained with %s; every run of the suite must train as "
                         "the baseline did (drop the flag to inherit it, or record a new baseline)",
                         flag, given, base_dir, had);
            free(flag); free(given); free(had);
            cJSON_Delete(r);
            return -1;
        }
        set_item(r, u->string, u);
    }
    c->recipe = r;
    if (check_recipe(c->o, r) != 0) return -1;
    // as train's flags: --epoch-boundary wrap, --shuffle (true only), --adam-beta1 0.9, ...
    const cJSON *v;
    cJSON_ArrayForEach(v, c->recipe) {
        if (cJSON_IsFalse(v)) continue;  // train's default for both of its boolean flags
        if (c->recipe_argc + 2 > (int)PT_ARRAY_LEN(c->recipe_argv)) {
            pt_set_error("accept: too many training recipe settings");
            return -1;
        }
        c->recipe_argv[c->recipe_argc++] = recipe_flag(v->string);
        if (!cJSON_IsTrue(v)) c->recipe_argv[c->recipe_argc++] = recipe_value_text(v);
    }
    return 0;
}

// Whether path (an existing file or dir) lies inside dir (or is it). A dir
// that does not exist yet holds nothing.
static bool path_inside(const char *path, const char *dir) {
    char *src = realpath(path, NULL), *d = realpath(dir, NULL);
    bool inside = false;
    if (src && d) {
        const size_t n = strlen(d);
        inside = strncmp(src, d, n) == 0 && (src[n] == 0 || src[n] == '/' || (n == 1 && d[0] == '/'));
    }
    free(src);
    free(d);
    return inside;
}

// What the suite empties under OUT before a run (init only when it makes the
// initial model itself); the stale report goes too, so that an interrupted
// or failed rerun never leaves an old verdict next to new runs.
static const char *const rewritten[] = {"baseline", "candidate", "portability", "recovery", "init"};
static const char *const old_files[] = {"report.json", "report.html", "report.md", "logs/init.log", "logs/baseline.log",
    "logs/eval_baseline.log", "logs/candidate.log", "logs/eval_candidate.log", "logs/candidate_from_baseline.log",
    "logs/baseline_from_candidate.log", "logs/recovery.log"};

// The suite empties OUT/baseline (and the other run directories under OUT)
// before it reads --baseline-run: a source there would be deleted first.
static int baseline_inside_output(const pt_accept_opts *o) {
    if (o->baseline_run && path_inside(o->baseline_run, o->output_dir)) {
        pt_set_error("accept: --baseline-run %s: lies inside --output-dir %s, which the suite rewrites "
                     "(copy the run elsewhere first)",
                     o->baseline_run, o->output_dir);
        return -1;
    }
    return 0;
}

// Any other input in a directory the suite empties would vanish under it.
static int input_inside_output(const pt_accept_opts *o) {
    const char *in[][2] = {{o->model_dir, "--model"}, {o->model_dir ? NULL : o->config_path, "--config"},
                           {o->model_dir ? NULL : o->tokenizer_dir, "--tokenizer-dir"}, {o->train_data, "--train-data"},
                           {o->eval_data, "--eval-data"}, {o->price_table, "--price-table"}};
    for (size_t k = 0; k < PT_ARRAY_LEN(rewritten); k++) {
        if (!strcmp(rewritten[k], "init") && o->model_dir) continue;
        char *d = pt_path_join(o->output_dir, rewritten[k]);
        for (size_t i = 0; i < PT_ARRAY_LEN(in); i++)
            if (in[i][0] && path_inside(in[i][0], d)) {
                pt_set_error("accept: %s %s: lies inside %s, which the suite empties before it runs "
                             "(copy it elsewhere first)", in[i][1], in[i][0], d);
                free(d);
                return -1;
            }
        free(d);
    }
    return 0;
}

// Whether the launcher's first word is an executable (a path, or a name on PATH).
static bool launcher_found(const char *launcher) {
    char prog[512];
    if (!launcher || sscanf(launcher, " %511s", prog) != 1) return false;
    if (strchr(prog, '/')) return access(prog, X_OK) == 0;
    const char *path = getenv("PATH");
    char *dirs = pt_strdup(path ? path : "/usr/bin:/bin");
    bool found = false;
    for (char *sv = NULL, *d = strtok_r(dirs, ":", &sv); d && !found; d = strtok_r(NULL, ":", &sv)) {
        char *f = pt_path_join(d, prog);
        found = access(f, X_OK) == 0;
        free(f);
    }
    free(dirs);
    return found;
}

static int check_opts(const pt_accept_opts *o) {
    if (!o->output_dir || !*o->output_dir) { pt_set_error("accept: --output-dir is empty"); return -1; }
    if (baseline_inside_output(o) != 0) return -1;
    if (o->steps < 8) { pt_set_error("accept: --steps %ld: at least 8 (checkpoint, kill and final window need room)", o->steps); return -1; }
    if (o->checkpoint_step < 1 || o->checkpoint_step >= o->steps) {
        pt_set_error("accept: --checkpoint-step %ld: must be in [1, %ld)", o->checkpoint_step, o->steps);
        return -1;
    }
    if (o->recovery_save_steps < 1 || o->recovery_save_steps >= o->steps - 1) {
        pt_set_error("accept: --recovery-save-steps %ld: must be in [1, %ld)", o->recovery_save_steps, o->steps - 1);
        return -1;
    }
    const char *need[][2] = {{o->train_data, "--train-data"}, {o->eval_data, "--eval-data"}, {o->price_table, "--price-table"}};
    for (size_t i = 0; i < PT_ARRAY_LEN(need); i++)
        if (!need[i][0] || !pt_file_exists(need[i][0])) {
            pt_set_error("accept: %s %s: not found%s", need[i][1], need[i][0] ? need[i][0] : "(none)",
                         i < 2 ? " (scripts/fetch_demo_data.sh fetches the demo data)" : "");
            return -1;
        }
    if (!o->model_dir && !pt_file_exists(o->config_path)) { pt_set_error("accept: --config %s: not found", o->config_path); return -1; }
    if (o->model_dir && !pt_is_dir(o->model_dir)) { pt_set_error("accept: --model %s: not a directory", o->model_dir); return -1; }
    const pt_platform *pls[] = {&o->baseline, &o->candidate};
    for (int i = 0; i < 2; i++) {
        const int data = pls[i]->fsdp * pls[i]->dp;
        if (o->batch % data != 0) {
            pt_set_error("accept: --per-device-train-batch-size %d: platform %s splits each batch over %d data ranks "
                         "(fsdp x dp), which do not divide it (every platform trains on the same global batch)",
                         o->batch, pls[i]->text, data);
            return -1;
        }
        if (pt_platform_ranks(pls[i]) > 1 && !launcher_found(o->launcher)) {
            pt_set_error("accept: --launcher '%s': not found on PATH (platform %s runs %d ranks with it; "
                         "scripts/deps.sh installs Open MPI's mpirun)", o->launcher ? o->launcher : "",
                         pls[i]->text, pt_platform_ranks(pls[i]));
            return -1;
        }
    }
    if (o->test_fault && strcmp(o->test_fault, "corrupt-checkpoint")) {
        pt_set_error("accept: --test-fault %s: the only test fault is corrupt-checkpoint", o->test_fault);
        return -1;
    }
    return input_inside_output(o);
}

int pt_accept(const pt_accept_opts *o) {
    pt_clear_error();
    if (check_opts(o) != 0) return 2;
    cJSON *prices = pt_json_parse_file(o->price_table);
    if (!prices) return 2;
    price_t pcheck;  // a bad price table is found now, not after the runs
    // an absent currency is USD; a present one that is not a code would be shown as USD, a false claim
    const cJSON *cur = cJSON_GetObjectItemCaseSensitive(prices, "currency");
    if (cur && (!cJSON_IsString(cur) || !*cur->valuestring)) {
        pt_set_error("%s: currency: must be a non-empty string such as \"USD\"", o->price_table);
        cJSON_Delete(prices);
        return 2;
    }
    if (price_for(prices, o->price_table, &o->baseline, 1, &pcheck) != 0 ||
        price_for(prices, o->price_table, &o->candidate, 1, &pcheck) != 0) {
        cJSON_Delete(prices);
        return 2;
    }
    acc_ctx c = {.o = o, .tty = isatty(2) && !o->quiet};
    // The running image itself, even if the file was rebuilt meanwhile.
    snprintf(c.exe, sizeof c.exe, "/proc/self/exe");
    if (access(c.exe, X_OK) != 0) { pt_set_error("accept: cannot re-execute portatrain (/proc/self/exe): %s", strerror(errno)); cJSON_Delete(prices); return 2; }
    const ssize_t el = readlink(c.exe, c.exe_path, sizeof c.exe_path - 1);
    c.exe_path[el > 0 ? el : 0] = 0;
    // The recipe is checked before anything under OUT is emptied: a flag the recorded baseline contradicts
    // loses no earlier report.
    if (build_recipe(&c, o->baseline_run) != 0 || pt_mkdir_p(o->output_dir) != 0) {
        free_recipe(&c);
        cJSON_Delete(prices);
        return 2;
    }
    c.out = realpath(o->output_dir, NULL);
    for (size_t i = 0; i < PT_ARRAY_LEN(old_files); i++) {
        char *f = pt_path_join(c.out, old_files[i]);
        unlink(f);
        free(f);
    }
    for (size_t i = 0; i < PT_ARRAY_LEN(rewritten); i++) {
        if (!strcmp(rewritten[i], "init") && o->model_dir) continue;
        char *d = pt_path_join(c.out, rewritten[i]);
        remove_tree(d);
        free(d);
    }
    c.logs = xprintf("%s/logs", c.out);
    pt_mkdir_p(c.logs);
    c.phases = cJSON_CreateArray();
    c.reasons = cJSON_CreateArray();
    const double t_start = pt_now_s();
    char cpu[256];
    cpu_model(cpu, sizeof cpu);

    say(&c, "portatrain accept: baseline %s, candidate %s, %ld steps -> %s", o->baseline.text, o->candidate.text,
        o->steps, c.out);
    run_t base = {.pl = &o->baseline, .role = "baseline", .dir = xprintf("%s/baseline", c.out), .eval_loss = NAN};
    run_t cand = {.pl = &o->candidate, .role = "candidate", .dir = xprintf("%s/candidate", c.out), .eval_loss = NAN};
    int verdict = 2;
    cJSON *cmp = NULL, *port = cJSON_CreateArray(), *rec = NULL, *cost = NULL;
    const char *refused = NULL;

    // 1. frozen inputs and both runs
    if (prepare_model(&c) != 0) goto unusable;
    if (o->baseline_run) {
        if (adopt_baseline(&c, &base) != 0) goto unusable;
        char *ev = pt_path_join(base.dir, "eval.json");
        const bool have = pt_file_exists(ev);
        free(ev);
        if (!have) {
            char *model = realpath(o->baseline_run, NULL);
            const int erc = eval_run(&c, &base, model ? model : o->baseline_run, "baseline");
            free(model);
            if (erc != 0) goto unusable;
        }
    } else {
        if (train_run(&c, &base, o->checkpoint_step) != 0) goto unusable;
        if (eval_run(&c, &base, base.dir, "baseline") != 0) goto unusable;
    }
    if (train_run(&c, &cand, o->checkpoint_step) != 0) {
        // A candidate that cannot train is a rejected candidate, not bad input.
        add_reason(&c, "candidate %s did not train: %s", o->candidate.text, pt_last_error());
        verdict = 1;
        goto judged;
    }
    if (eval_run(&c, &cand, cand.dir, "candidate") != 0) {
        add_reason(&c, "candidate eval: %s", pt_last_error());
        verdict = 1;
        goto judged;
    }

    // 2. convergence
    {
        pt_compare_opts co = {.profile = pair_profile(&c, &o->baseline, &o->candidate)};
        const int crc = pt_compare_runs(base.dir, cand.dir, &co, &cmp);
        if (crc == 2) {
            // Only the frozen-input differences: the curves of runs from
            // different inputs say nothing about the platform.
            refused = "frozen inputs differ";
            const cJSON *fi = cJSON_GetObjectItemCaseSensitive(cmp, "frozen_inputs");
            const cJSON *ds = cJSON_GetObjectItemCaseSensitive(fi, "differences"), *it;
            cJSON_ArrayForEach(it, ds) {
                const cJSON *f = cJSON_GetObjectItemCaseSensitive(it, "field");
                const cJSON *va = cJSON_GetObjectItemCaseSensitive(it, "a"), *vb = cJSON_GetObjectItemCaseSensitive(it, "b");
                add_reason(&c, "frozen input %s differs: baseline %s, candidate %s", cJSON_IsString(f) ? f->valuestring : "?",
                           cJSON_IsString(va) ? va->valuestring : "?", cJSON_IsString(vb) ? vb->valuestring : "?");
            }
            if (cJSON_GetArraySize(c.reasons) == 0) add_reason(&c, "cannot compare the runs: %s", pt_last_error());
            verdict = 2;
            say(&c, "  convergence: REFUSED (frozen inputs differ)");
            goto judged;
        }
        const cJSON *rs = cJSON_GetObjectItemCaseSensitive(cmp, "reasons"), *it;
        if (crc == 1) cJSON_ArrayForEach(it, rs) if (cJSON_IsString(it)) add_reason(&c, "convergence: %s", it->valuestring);
        say(&c, "  convergence (%s profile): %s", co.profile, crc == 0 ? "ACCEPTED" : "REJECTED");
        verdict = crc;
    }

    // 3. portability both ways, 4. recovery
    cJSON_AddItemToArray(port, portability(&c, &base, &o->candidate, "candidate_from_baseline"));
    cJSON_AddItemToArray(port, portability(&c, &cand, &o->baseline, "baseline_from_candidate"));
    rec = recovery(&c, &cand);
    if (cJSON_GetArraySize(c.reasons) > 0) verdict = 1;

judged:;
    {
        // 5. cost and the report
        const bool accepted = verdict == 0;
        // Every billed phase ran in this suite at its thread count; a recorded --baseline-run's training was
        // paid for when it was recorded (not billed here), so its own thread count prices nothing.
        const int threads_now = run_threads(cand.dir);
        cost = cost_section(&c, prices, &o->baseline, &o->candidate, o->baseline_run ? threads_now : run_threads(base.dir),
                            threads_now, accepted, cpu);
        if (!cost) {
            add_reason(&c, "cost: %s", pt_last_error());
            if (verdict == 0) verdict = 2;
        }
        const char *vs = verdict == 0 ? "ACCEPTED" : verdict == 1 ? "REJECTED" : "REFUSED";
        if (verdict == 0) {
            add_reason(&c, "convergence within the %s profile", pair_profile(&c, &o->baseline, &o->candidate));
            add_reason(&c, "checkpoints restore both ways (%s <-> %s)", o->baseline.text, o->candidate.text);
            const cJSON *d = cJSON_GetObjectItemCaseSensitive(rec, "detail");
            if (cJSON_IsString(d)) add_reason(&c, "recovery: %s", d->valuestring);
        }
        cJSON *rep = cJSON_CreateObject();
        char now[32], title[256];
        iso_now(now, sizeof now);
        snprintf(title, sizeof title, "portatrain acceptance: %s -> %s", o->baseline.text, o->candidate.text);
        cJSON_AddNumberToObject(rep, "version", 1);
        cJSON_AddStringToObject(rep, "created_utc", now);
        cJSON_AddStringToObject(rep, "title", title);
        cJSON_AddStringToObject(rep, "verdict", vs);
        if (refused) cJSON_AddStringToObject(rep, "refused", refused);
        cJSON_AddItemToObject(rep, "reasons", cJSON_Duplicate(c.reasons, 1));
        cJSON_AddItemToObject(rep, "baseline", run_identity(&base, cpu, run_threads(base.dir)));
        cJSON_AddItemToObject(rep, "candidate", run_identity(&cand, cpu, run_threads(cand.dir)));
        cJSON_AddItemToObject(rep, "frozen_inputs", frozen_section(&c));
        cJSON *set = cJSON_AddObjectToObject(rep, "settings");
        cJSON_AddNumberToObject(set, "steps", (double)o->steps);
        cJSON_AddNumberToObject(set, "seq_len", o->seq_len);
        cJSON_AddNumberToObject(set, "per_device_train_batch_size", o->batch);
        cJSON_AddNumberToObject(set, "learning_rate", o->learning_rate);
        cJSON_AddNumberToObject(set, "warmup_steps", (double)o->warmup_steps);
        cJSON_AddNumberToObject(set, "weight_decay", o->weight_decay);
        cJSON_AddNumberToObject(set, "max_grad_norm", o->max_grad_norm);
        cJSON_AddNumberToObject(set, "checkpoint_step", (double)o->checkpoint_step);
        cJSON_AddNumberToObject(set, "recovery_save_steps", (double)o->recovery_save_steps);
        cJSON_AddStringToObject(set, "model", c.model ? c.model : "");
        cJSON_AddStringToObject(set, "train_data", o->train_data);
        cJSON_AddStringToObject(set, "eval_data", o->eval_data);
        const cJSON *iv;  // the recipe every run trained with
        cJSON_ArrayForEach(iv, c.recipe) cJSON_AddItemToObject(set, iv->string, cJSON_Duplicate(iv, 1));
        if (cmp) cJSON_AddItemToObject(rep, "convergence", convergence_section(cmp, &base, &cand));
        cJSON *curves = cJSON_AddObjectToObject(rep, "curves");
        cJSON_AddItemToObject(curves, "baseline", curve_of(&base.m));
        cJSON_AddItemToObject(curves, "candidate", curve_of(&cand.m));
        cJSON *tp = cJSON_AddObjectToObject(rep, "throughput");
        const run_t *rs[] = {&base, &cand};
        for (int i = 0; i < 2; i++) {
            cJSON *t = cJSON_AddObjectToObject(tp, rs[i]->role);
            const double mt = median_of(&rs[i]->m, offsetof(metric_row, tokens_per_s));
            const double ms = median_of(&rs[i]->m, offsetof(metric_row, step_time_s));
            if (isfinite(mt)) cJSON_AddNumberToObject(t, "median_tokens_per_s", mt);
            if (isfinite(ms)) cJSON_AddNumberToObject(t, "median_step_time_s", ms);
        }
        cJSON_AddItemToObject(rep, "portability", port);
        port = NULL;
        if (rec) { cJSON_AddItemToObject(rep, "recovery", rec); rec = NULL; }
        cJSON_AddItemToObject(rep, "phases", cJSON_Duplicate(c.phases, 1));
        if (cost) { cJSON_AddItemToObject(rep, "cost", cost); cost = NULL; }
        cJSON_AddNumberToObject(rep, "wall_s", pt_now_s() - t_start);
        char *rj = pt_path_join(c.out, "report.json");
        int wrc = pt_json_write_file(rj, rep);
        if (wrc == 0) wrc = pt_report_render(rep, c.out);
        cJSON_Delete(rep);
        if (wrc != 0) { free(rj); verdict = 2; goto done; }
        char wall[32];
        fmt_duration(pt_now_s() - t_start, wall, sizeof wall);
        printf("\nverdict: %s", vs);
        const cJSON *it;
        int k = 0;
        cJSON_ArrayForEach(it, c.reasons) printf("%s%s", k++ ? "; " : " (", it->valuestring);
        printf("%s\n", k ? ")" : "");
        printf("report: %s/report.html (also report.md, report.json; %s)\n", c.out, wall);
        fflush(stdout);
        free(rj);
        pt_clear_error();  // judged: any error is in the report, not for the CLI to print
        goto done;
    }

unusable:
    verdict = 2;
done:
    cJSON_Delete(cmp);
    cJSON_Delete(port);
    cJSON_Delete(rec);
    cJSON_Delete(cost);
    cJSON_Delete(prices);
    cJSON_Delete(c.phases);
    cJSON_Delete(c.reasons);
    free(base.m.rows);
    free(cand.m.rows);
    free(base.dir);
    free(cand.dir);
    free(c.model);
    free(c.logs);
    free_recipe(&c);
    free(c.out);
    return verdict;
}
