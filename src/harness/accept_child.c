// The suite's messages and phase records, and its child runs: every run is a child `portatrain` process
// (the same binary, /proc/self/exe), so each phase is timed as a user would see it and a crash in one run
// cannot corrupt the judge.
#define _GNU_SOURCE
#include "harness/accept_internal.h"
#include "util/sysinfo.h"
#include "util/proc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

char *acc_xprintf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0) s = NULL;
    va_end(ap);
    if (!s) { fprintf(stderr, "portatrain: out of memory\n"); abort(); }
    return s;
}

void acc_say(acc_ctx *c, const char *fmt, ...) {
    if (c->o->quiet) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void acc_add_reason(acc_ctx *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0) s = NULL;
    va_end(ap);
    if (s) cJSON_AddItemToArray(c->reasons, cJSON_CreateString(s));
    free(s);
}

void acc_add_phase(acc_ctx *c, const char *run, const pt_platform *pl, const char *phase, double seconds) {
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
    // the machine's load as the phase ends: other jobs that shared the cores explain its throughput
    double load[3];
    if (pt_loadavg(load) == 0) cJSON_AddNumberToObject(p, "load_1m", load[0]);
    cJSON_AddItemToArray(c->phases, p);
}

void acc_fmt_duration(double s, char *out, size_t n) {
    if (!isfinite(s) || s < 0) { snprintf(out, n, "--"); return; }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(out, n, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(out, n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(out, n, "%lds", t);
}

static void draw_progress(acc_ctx *c, const char *label, const progress_src *p, double elapsed, bool final) {
    if (c->o->quiet) return;
    long done = 0, total = p->metrics ? p->to - p->from : 0;
    if (p->metrics) {
        long s = acc_last_step_in(p->metrics);
        done = s > p->from ? s - p->from : 0;
        if (done > total) done = total;
    }
    char el[32], eta[32];
    acc_fmt_duration(elapsed, el, sizeof el);
    acc_fmt_duration(done > 0 ? elapsed / (double)done * (double)(total - done) : NAN, eta, sizeof eta);
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

// A bar on a terminal, a line every 30 s in a log, while a child runs.
typedef struct {
    acc_ctx *c;
    const char *label;
    const progress_src *prog;
    double t0, last_draw;
} progress_watch;

static bool watch_progress(void *arg, bool exited) {
    progress_watch *w = arg;
    if (exited) return false;
    const double now = pt_now_s(), every = w->c->tty ? 0.5 : 30.0;
    if (now - w->last_draw >= every) {
        draw_progress(w->c, w->label, w->prog, now - w->t0, false);
        w->last_draw = now;
    }
    return false;
}

// OUT/logs/NAME.log starts with the command line ("$ portatrain train ..."); the child appends to it.
static void log_command(const char *log_path, char **argv) {
    FILE *cmd = fopen(log_path, "w");
    if (!cmd) return;
    fprintf(cmd, "$");
    for (int i = 0; argv[i]; i++) fprintf(cmd, " %s", argv[i]);
    fprintf(cmd, "\n");
    fclose(cmd);
}

// The error of a child that failed: its signal or exit code and its log's error line.
static void child_error(int status, const char *log_path) {
    char *e = log_error(log_path);
    if (WIFSIGNALED(status))
        pt_set_error("killed by signal %d (%s): %s (log: %s)", WTERMSIG(status), strsignal(WTERMSIG(status)), e, log_path);
    else pt_set_error("exit %d: %s (log: %s)", pt_proc_exit_code(status), e, log_path);
    free(e);
}

int acc_run_child(acc_ctx *c, const char *label, const char *log_name, const char *stdout_path,
                  const progress_src *prog, double *wall, int ranks, char **args) {
    char *log_path = acc_xprintf("%s/%s.log", c->logs, log_name), np[16];
    int n = 0;
    while (args[n]) n++;
    pt_cmd cmd;
    pt_cmd_init(&cmd, ranks > 1 ? c->o->launcher : NULL, n + 4);
    snprintf(np, sizeof np, "%d", ranks);
    if (cmd.launched) {  // every rank starts the binary by its path (/proc/self/exe would be the launcher's daemon)
        pt_cmd_add(&cmd, "-np");
        pt_cmd_add(&cmd, np);
        pt_cmd_add(&cmd, c->exe_path);
    } else pt_cmd_add(&cmd, "portatrain");
    for (int i = 0; i < n; i++) pt_cmd_add(&cmd, args[i]);
    log_command(log_path, cmd.argv);
    progress_watch w = {.c = c, .label = label, .prog = prog, .t0 = pt_now_s()};
    w.last_draw = w.t0;
    // A run must not outlive the suite that judges it (killed accept, CI timeout): pt_proc_spawn's
    // parent-death signal.
    const pt_spawn_opts so = {.log_path = log_path, .stdout_path = stdout_path, .null_stdin = true};
    const pid_t pid = pt_proc_spawn(&cmd, &so, label);
    int status = 0;
    if (pid > 0) pt_proc_wait(pid, &status, 0.1, watch_progress, &w);
    pt_cmd_free(&cmd);
    if (pid < 0) {
        free(log_path);
        return -1;
    }
    *wall = pt_now_s() - w.t0;
    draw_progress(c, label, prog, *wall, true);
    const int rc = pt_proc_exit_code(status);
    if (rc != 0) child_error(status, log_path);
    free(log_path);
    return rc;
}

void acc_ab_add(argbuf *a, const char *s) { if (a->n < 95) a->v[a->n++] = (char *)s; a->v[a->n] = NULL; }

void acc_exact_double(char *buf, size_t n, double x) {
    snprintf(buf, n, "%.15g", x);
    if (strtod(buf, NULL) != x) snprintf(buf, n, "%.17g", x);
}

static void ab_num(argbuf *a, const char *flag, const char *fmt, double x) {
    acc_ab_add(a, flag);
    char *slot = a->num[a->nn++ % 24];
    if (!strcmp(fmt, "%ld")) snprintf(slot, 32, "%ld", (long)x);
    else acc_exact_double(slot, 32, x);
    acc_ab_add(a, slot);
}

void acc_train_args(acc_ctx *c, argbuf *a, const pt_platform *pl, const char *out_dir, long save_steps) {
    const pt_accept_opts *o = c->o;
    memset(a, 0, sizeof *a);
    acc_ab_add(a, "train");
    acc_ab_add(a, "--model"); acc_ab_add(a, c->model);
    acc_ab_add(a, "--data"); acc_ab_add(a, o->train_data);
    acc_ab_add(a, "--output-dir"); acc_ab_add(a, out_dir);
    acc_ab_add(a, "--backend"); acc_ab_add(a, pl->backend);
    acc_ab_add(a, "--precision"); acc_ab_add(a, pl->precision);
    if (pl->tf32) acc_ab_add(a, "--tf32");
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
    for (int i = 0; i < c->recipe_argc; i++) acc_ab_add(a, c->recipe_argv[i]);
    acc_ab_add(a, "--quiet");
}
