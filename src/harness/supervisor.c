#define _GNU_SOURCE
#include "harness/supervisor.h"
#include "util/common.h"
#include "util/fileio.h"
#include "util/json.h"
#include "io/checkpoint.h"
#include "train/ckpt_interval.h"
#include "train/metrics.h"
#include "util/proc.h"
#include "dist/placement.h"

#include <stdbool.h>
#include <dirent.h>
#include <limits.h>
#include <sys/prctl.h>
#include <sys/stat.h>

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int pt_supervise_parse_inject(pt_supervise_opts *o, const char *spec) {
    return pt_fault_parse(spec, o->faults, 64, &o->n_faults);
}


// The newest step in OUTPUT/metrics.jsonl: the worker's step progress (its last complete line).
static long last_step(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    const long step = pt_metrics_last_step(path);
    return step > 0 ? step : 0;
}

// The checkpoint step a resumed worker really restored: its first metrics line
// carries "restore_time_s" (-1: none). `latest` can name a checkpoint that
// fails verification, and the worker then falls back to an older one.
static long resumed_step(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    pt_metrics_log log;
    if (pt_metrics_read(path, PT_METRICS_LENIENT, &log) != 0) {
        pt_clear_error();
        return -1;
    }
    long step = -1;
    for (int i = 0; i < log.n; i++)
        if (!isnan(log.recs[i].restore_time_s)) step = log.recs[i].step - 1;  // not rollback_restore_time_s
    pt_metrics_log_free(&log);
    return step;
}

// The step count the worker resolved (--num-train-epochs without --max-steps): its train_args.json.
static long worker_max_steps(const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/train_args.json", dir);
    cJSON *j = pt_file_exists(path) ? pt_json_parse_file(path) : NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "max_steps");
    const long n = cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble < 1e15 ? (long)v->valuedouble : 0;
    cJSON_Delete(j);
    return n;
}

// Productive time: each step's step_time_s counted once (the surviving line).
static double productive_s(const char *dir, long max_steps) {
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    pt_metrics_log log;
    if (max_steps <= 0 || !pt_file_exists(path)) return 0;
    if (pt_metrics_read(path, PT_METRICS_LENIENT, &log) != 0) {
        pt_clear_error();
        return 0;
    }
    double *t = calloc((size_t)max_steps + 1, sizeof *t), sum = 0;
    for (int i = 0; i < log.n; i++) {
        const long s = log.recs[i].step;
        if (s >= 1 && s <= max_steps && !isnan(log.recs[i].step_time_s)) t[s] = log.recs[i].step_time_s;
    }
    pt_metrics_log_free(&log);
    for (long i = 1; i <= max_steps; i++) sum += t[i];
    free(t);
    return sum;
}

// Young/Daly advice from the run's own measurements: mean save time over the
// checkpoint steps and mean step time (metrics.jsonl), for the given MTBF.
static cJSON *interval_advice(const char *dir, double mtbf_hours) {
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    pt_metrics_log log;
    if (!pt_file_exists(path)) return NULL;
    if (pt_metrics_read(path, PT_METRICS_LENIENT, &log) != 0) {
        pt_clear_error();
        return NULL;
    }
    double save_sum = 0, step_sum = 0;
    long n_save = 0, n_step = 0;
    for (int i = 0; i < log.n; i++) {
        const pt_metrics_rec *r = &log.recs[i];
        if (!isnan(r->step_time_s)) { step_sum += r->step_time_s; n_step++; }
        if (!isnan(r->save_time_s)) { save_sum += r->save_time_s; n_save++; }
    }
    pt_metrics_log_free(&log);
    if (!n_save || !n_step) return NULL;
    const double C = save_sum / n_save, st = step_sum / n_step, M = mtbf_hours * 3600.0;
    cJSON *a = cJSON_CreateObject();
    cJSON_AddNumberToObject(a, "mtbf_hours", mtbf_hours);
    cJSON_AddNumberToObject(a, "mean_save_s", C);
    cJSON_AddNumberToObject(a, "mean_step_s", st);
    cJSON_AddNumberToObject(a, "young_s", pt_young_interval_s(C, M));
    cJSON_AddNumberToObject(a, "daly_s", pt_daly_interval_s(C, M));
    cJSON_AddNumberToObject(a, "daly_steps", (double)pt_daly_interval_steps(C, M, st));
    fprintf(stderr, "supervisor: checkpoint interval advice for MTBF %g h: every %ld steps (Daly %.1f s; mean save "
            "%.3f s over %ld saves, mean step %.3f s; --save-steps auto uses it)\n", mtbf_hours,
            pt_daly_interval_steps(C, M, st), pt_daly_interval_s(C, M), C, n_save, st);
    return a;
}

// The rank that made the least progress by its heartbeat (step, then phase:
// a rank still "in" a step is behind one that finished it), or -1 when all
// ranks are level (nobody to blame: e.g. stuck together in a collective).
static int laggard_rank(const char *dir, int world, long *its_step) {
    long best = LONG_MAX, second = LONG_MAX;
    int who = -1;
    for (int r = 0; r < world; r++) {
        char path[4096], buf[512] = {0};
        snprintf(path, sizeof path, "%s/heartbeats/rank-%05d.json", dir, r);
        FILE *f = fopen(path, "r");
        long prog = -1;  // no heartbeat at all: never got going
        if (f) {
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            buf[n] = 0;
            const char *st = strstr(buf, "\"step\": "), *ph = strstr(buf, "\"phase\": \"done\"");
            if (st) prog = atol(st + 8) * 2 + (ph ? 1 : 0);
        }
        if (prog < best) {
            second = best;
            best = prog;
            who = r;
        } else if (prog < second) {
            second = prog;
        }
    }
    if (its_step) *its_step = best < 0 ? 0 : best / 2;
    return world > 1 && best < second ? who : world == 1 ? 0 : -1;
}

// Is a rank writing a checkpoint or the final model (heartbeat phase "save")?
// A save is I/O that can take minutes on a large model or slow storage: it gets
// the start-up timeout, not the hang timeout (no metrics line comes until it ends).
static bool saving(const char *dir, int world) {
    for (int r = 0; r < world; r++) {
        char path[4096], buf[512] = {0};
        snprintf(path, sizeof path, "%s/heartbeats/rank-%05d.json", dir, r);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        const size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        if (strstr(buf, "\"phase\": \"save\"")) return true;
    }
    return false;
}

static void clear_heartbeats(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/heartbeats", dir);
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "rank-", 5)) {
            char f[4400];
            snprintf(f, sizeof f, "%s/%s", path, e->d_name);
            unlink(f);
        }
    closedir(d);
}

// SIGTERM, SIGINT (Ctrl-C) or SIGHUP to the supervisor: it stops the worker
// group itself (an MPI launcher's ranks included) before it exits. Dying at
// once would leave that to the worker's parent-death signal, and an mpirun
// job goes on training and writing the output dir for a while after it.
static volatile sig_atomic_t g_stop_signal;
static void on_stop_signal(int sig) {
    if (!g_stop_signal) g_stop_signal = sig;
}

static void catch_stop_signals(void) {
    const int sigs[] = {SIGTERM, SIGINT, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        struct sigaction old, sa;
        // A signal ignored at start stays ignored (nohup, a background job's SIGINT).
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_stop_signal;  // no SA_RESTART: the poll's and the back-off's sleeps end early
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

static void log_stopped(FILE *ev, double t, int attempt, long step) {
    fprintf(ev, "{\"event\": \"stopped\", \"time\": %.6f, \"attempt\": %d, \"signal\": %d, \"step\": %ld}\n", t,
            attempt, (int)g_stop_signal, step);
}

// Closes the open recovery (the newest entry of recs): the attempt got back to its fault point.
static void close_recovery(cJSON *recs, double restore_s, double replay_s, double total_s) {
    cJSON *r = cJSON_GetArrayItem(recs, cJSON_GetArraySize(recs) - 1);
    cJSON_AddNumberToObject(r, "restore_s", restore_s);
    cJSON_AddNumberToObject(r, "replay_s", replay_s);
    cJSON_AddNumberToObject(r, "total_s", total_s);
    cJSON_AddBoolToObject(r, "recovered", true);
}

// The supervisor across attempts.
typedef struct {
    const pt_supervise_opts *o;
    FILE *ev;                 // events.jsonl
    char exe[4096];
    pt_cmd cmd;               // [launcher words...] portatrain train ARGS [resume flags]
    int cmd_base;             // its words before an attempt's resume flags
    int world, attempts, restarts, streak;
    bool fired[64], armed[64];
    bool pending;             // a recovery waiting for the worker to reach pending_reach again
    long pending_reach;
    double pending_t_fault;
    cJSON *recs;              // recovery.json's "recoveries"
    // --elastic: the train argv as given, the layout running now, its command's strings, the nodes
    // (hostfile or uniform) and which of them are lost; the shrink waiting for its recovery entry.
    int wargc;
    char **wargv;
    pt_layout layout;
    pt_elastic_cmd ecmd;
    pt_hostlist *hosts;
    bool lost[PT_MAX_HOSTS];
    cJSON *shrink;
} sup_t;

// One attempt: its worker and what polling it saw.
typedef struct {
    sup_t *s;
    pid_t pid;
    int status;
    double t_start, t_seen, t_first_new, t_det, t_down;
    long seen;                // the newest step logged
    bool hung, stopped;
    int blamed, orphans;      // the heartbeat laggard of a hang; processes that outlived the teardown
} attempt_t;

// What ended an attempt that did not complete.
typedef struct {
    const char *name;         // hang, kill, nonfinite, exit
    const char *injected;     // the armed fault it reached (NULL: none)
    long step;                // that fault's step, -1: none
    int rank;                 // that fault's rank, -1: none
    bool killed, nonfinite;
} fault_t;

static void event(sup_t *s, const char *fmt, ...) PT_PRINTF(2, 3);
static void event(sup_t *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(s->ev, fmt, ap);
    va_end(ap);
    fflush(s->ev);  // a supervisor killed later (during a back-off, say) keeps the line
}

static void worker_command(sup_t *s, const char *launcher, int wargc, char **wargv) {
    pt_cmd_init(&s->cmd, launcher, wargc + 2);
    if (s->cmd.launched) {
        pt_self_exe_path(s->exe, sizeof s->exe);
        pt_cmd_add(&s->cmd, s->exe);
    } else pt_cmd_add(&s->cmd, wargv[0]);
    for (int i = 1; i < wargc; i++) pt_cmd_add(&s->cmd, wargv[i]);
    s->cmd_base = s->cmd.argc;
}

// A fault fires once: an attempt arms the unfired faults up to and including the first that ends an
// attempt (kill, hang, enospc); nan and corrupt-checkpoint faults don't, so they ride along with it. A bad
// batch (nan, nan:target=grad) stays armed: a replay of its step meets it again, as an uninterrupted run
// met it once.
static void arm_faults(sup_t *s) {
    const pt_supervise_opts *o = s->o;
    for (int i = 0, stop = 0; i < o->n_faults; i++) {
        s->armed[i] = !stop && (!s->fired[i] || pt_fault_recurs(o->faults[i].kind));
        if (s->armed[i] && pt_fault_ends_attempt(o->faults[i].kind)) stop = 1;
    }
}

// In the worker, before exec: its faults, and the mark that keeps this supervisor's events.jsonl when
// the worker's --overwrite-output-dir clears the directory.
static void worker_setup(void *arg) {
    const sup_t *s = arg;
    pt_fault_disarm_all();
    setenv("PT_SUPERVISED_WORKER", "1", 1);
    for (int i = 0; i < s->o->n_faults; i++)
        if (s->armed[i]) pt_fault_arm(&s->o->faults[i]);
}

static int start_attempt(sup_t *s, attempt_t *a) {
    const char *dir = s->o->output_dir;
    s->attempts++;
    s->cmd.argc = s->cmd_base;
    s->cmd.argv[s->cmd_base] = NULL;
    // Resume whenever a checkpoint exists; a fault before the first save restarts from scratch,
    // replacing the failed attempt's metrics (the worker refuses a run dir without one of the two).
    if (s->attempts > 1 && ckpt_latest_step(dir) > 0) {
        pt_cmd_add(&s->cmd, "--resume-from-checkpoint");
        pt_cmd_add(&s->cmd, "latest");
    } else if (s->attempts > 1) pt_cmd_add(&s->cmd, "--overwrite-output-dir");
    arm_faults(s);
    clear_heartbeats(dir);
    *a = (attempt_t){.s = s, .blamed = -1};
    a->t_start = now_s();
    // The worker leads its own group (torn down whole) and dies with its supervisor: a supervised run
    // never leaves an orphan training process.
    const pt_spawn_opts so = {.own_group = true, .in_child = worker_setup, .arg = s};
    a->pid = pt_proc_spawn(&s->cmd, &so, "supervisor");
    if (a->pid < 0) return -1;
    event(s, "{\"event\": \"start\", \"time\": %.6f, \"attempt\": %d, \"pid\": %d}\n", a->t_start, s->attempts,
          (int)a->pid);
    a->seen = last_step(dir);
    a->t_seen = now_s();
    return 0;
}

// The worker got back to the step it had reached before the fault: the open recovery is closed.
static void recovered(attempt_t *a, long step, double t) {
    sup_t *s = a->s;
    cJSON *r = cJSON_GetArrayItem(s->recs, cJSON_GetArraySize(s->recs) - 1);
    const long back = resumed_step(s->o->output_dir);
    if (back >= 0 && back != (long)cJSON_GetObjectItem(r, "restored_step")->valuedouble) {
        cJSON_ReplaceItemInObject(r, "restored_step", cJSON_CreateNumber((double)back));
        cJSON_ReplaceItemInObject(r, "steps_recomputed", cJSON_CreateNumber((double)(s->pending_reach - back)));
    }
    close_recovery(s->recs, a->t_first_new - a->t_start, t - a->t_first_new, t - s->pending_t_fault);
    event(s, "{\"event\": \"recovered\", \"time\": %.6f, \"step\": %ld, \"total_s\": %.6f, \"restored_step\": %ld}\n",
          t, step, t - s->pending_t_fault, (long)cJSON_GetObjectItem(r, "restored_step")->valuedouble);
    s->pending = false;
}

// pt_proc_wait's watch: step progress, a stop signal, and the hang and start-up timeouts.
static bool watch_worker(void *arg, bool exited) {
    attempt_t *a = arg;
    const pt_supervise_opts *o = a->s->o;
    const long s = last_step(o->output_dir);  // an exited worker's last line may have landed after the last poll
    const double t = now_s();
    if (s != a->seen) {
        // Only a step beyond the last one seen is the attempt's first step: a resumed worker
        // first cuts metrics.jsonl back to its checkpoint, and --overwrite-output-dir removes it
        // before the model load; until a step is logged the start-up timeout applies.
        if (!a->t_first_new && s > a->seen) a->t_first_new = t;
        a->seen = s;
        a->t_seen = t;
        if (a->s->pending && s >= a->s->pending_reach) recovered(a, s, t);
    }
    if (exited) return false;
    if (g_stop_signal) return a->stopped = true;
    // Until its first step an attempt is loading and restoring: that gets
    // the start-up timeout, steps after it the (shorter) hang timeout.
    double limit = a->t_first_new ? o->hang_timeout : o->startup_timeout;
    if (limit > 0 && a->t_first_new && t - a->t_seen > limit && saving(o->output_dir, a->s->world))
        limit = o->startup_timeout;  // a slow save, not a hang (read only once past the hang timeout)
    if (limit > 0 && t - (a->t_first_new ? a->t_seen : a->t_start) > limit) {
        // A save can end between the metrics read above and the heartbeat read: the worker logs
        // the step before its heartbeat leaves "save", so a second look at the metrics sees it.
        if (last_step(o->output_dir) != a->seen) return false;
        return a->hung = true;
    }
    return false;
}

// Waits for the attempt's end (exit, hang or stop signal), then tears its worker group down.
static void run_attempt(attempt_t *a) {
    const sup_t *s = a->s;
    if (pt_proc_wait(a->pid, &a->status, 0.02, watch_worker, a) < 0) a->status = 1 << 8;  // lost: as an exit 1
    a->t_det = now_s();
    long lag_step = 0;
    if (a->hung) a->blamed = laggard_rank(s->o->output_dir, s->world, &lag_step);
    a->orphans = pt_proc_kill_group(a->pid);
    // The supervisor is a child subreaper: workers that outlived the teardown (an MPI rank in a
    // process group of its own, say) come back to it.
    a->orphans += pt_proc_reap_strays();
    a->t_down = now_s();
}

static int stopped(sup_t *s, attempt_t *a) {
    a->seen = last_step(s->o->output_dir);  // an MPI job's ranks may log steps until mpirun has ended them
    log_stopped(s->ev, a->t_det, s->attempts, a->seen);
    event(s, "{\"event\": \"teardown\", \"time\": %.6f, \"duration_s\": %.6f, \"orphans\": %d}\n", a->t_down,
          a->t_down - a->t_det, a->orphans);
    pt_set_error("stopped by signal %d after step %ld; the worker was stopped (resume with "
                 "--resume-from-checkpoint latest)", (int)g_stop_signal, a->seen);
    return PT_SUPERVISE_SIGNALED + g_stop_signal;
}

static bool completed(sup_t *s, const attempt_t *a) {
    if (a->hung || !WIFEXITED(a->status) || WEXITSTATUS(a->status) != 0) return false;
    // A restart that finished without a new step (its checkpoint was already at the fault
    // point: a kill or hang after the last step, before the final model write) recovered too.
    if (s->pending) {
        close_recovery(s->recs, a->t_det - a->t_start, 0, a->t_det - s->pending_t_fault);
        event(s, "{\"event\": \"recovered\", \"time\": %.6f, \"step\": %ld, \"total_s\": %.6f}\n", a->t_det, a->seen,
              a->t_det - s->pending_t_fault);
        s->pending = false;
    }
    return true;
}

// What ended the attempt, logged as "detected" and "teardown" events. The armed faults the worker reached
// fired (a fault of step S fires at step S, or during it: a kill in the save or a nan stop leave S-1 logged).
static fault_t classify(sup_t *s, const attempt_t *a) {
    const pt_supervise_opts *o = s->o;
    const int st = a->status;
    fault_t f = {.step = -1, .rank = -1, .killed = !a->hung && WIFSIGNALED(st)};
    f.nonfinite = !a->hung && WIFEXITED(st) && WEXITSTATUS(st) == 3;
    for (int i = 0; i < o->n_faults; i++)
        if (s->armed[i] && o->faults[i].step <= a->seen + 1) {
            const bool again = s->fired[i];  // a bad batch met again in a replay: not this attempt's fault
            s->fired[i] = true;
            if (pt_fault_ends_attempt(o->faults[i].kind) || (f.step < 0 && !again)) {
                f.step = o->faults[i].step;
                f.rank = o->faults[i].rank;
                f.injected = pt_fault_name(o->faults[i].kind);
            }
        }
    f.name = a->hung ? "hang" : f.killed ? "kill" : f.nonfinite ? "nonfinite" : "exit";
    event(s, "{\"event\": \"detected\", \"time\": %.6f, \"attempt\": %d, \"fault\": \"%s\", \"step\": %ld, "
          "\"detect_s\": %.6f, \"signal\": %d, \"exit\": %d, \"injected\": \"%s\", \"injected_rank\": %d, "
          "\"heartbeat_laggard_rank\": %d}\n",
          a->t_det, s->attempts, f.name, a->seen, a->t_det - a->t_seen, f.killed ? WTERMSIG(st) : 0,
          !a->hung && WIFEXITED(st) ? WEXITSTATUS(st) : -1, f.injected ? f.injected : "", f.rank, a->blamed);
    event(s, "{\"event\": \"teardown\", \"time\": %.6f, \"duration_s\": %.6f, \"orphans\": %d}\n", a->t_down,
          a->t_down - a->t_det, a->orphans);
    return f;
}

// Whether a failed attempt ends the supervision (*rc set, error set) instead of a restart.
static bool give_up(const sup_t *s, const attempt_t *a, const fault_t *f, int *rc) {
    if (f->nonfinite) {  // deterministic: a restart would replay the same batch and stop again
        pt_set_error("worker stopped on a non-finite loss or gradient after step %ld (exit 3); not restarting "
                     "(a restart replays the same batch; see --nan-policy skip|rollback)", a->seen);
        *rc = PT_SUPERVISE_NONFINITE;
        return true;
    }
    if (!a->hung && WIFEXITED(a->status) && WEXITSTATUS(a->status) == 2) {  // a restart would fail the same way
        pt_set_error("worker exited with a usage error (exit 2); not restarting");
        *rc = PT_SUPERVISE_USAGE;
        return true;
    }
    if (s->restarts >= s->o->max_restarts) {
        pt_set_error("worker failed %d times; giving up after --max-restarts %d", s->attempts, s->o->max_restarts);
        *rc = -1;
        return true;
    }
    return false;
}

// Back-off doubles only while failures come without progress (a crash loop); a worker that got past its
// previous failure point starts over at --restart-backoff. Capped so a long run never sleeps for minutes.
static double backoff_s(sup_t *s) {
    if (s->pending) {  // the previous recovery never got back to its fault point
        cJSON_AddBoolToObject(cJSON_GetArrayItem(s->recs, cJSON_GetArraySize(s->recs) - 1), "recovered", false);
        s->streak++;
    } else s->streak = 0;
    double backoff = s->o->restart_backoff;
    for (int i = 0; i < s->streak && backoff < PT_SUPERVISE_MAX_BACKOFF_S; i++) backoff *= 2;
    return backoff > PT_SUPERVISE_MAX_BACKOFF_S ? PT_SUPERVISE_MAX_BACKOFF_S : backoff;
}

// Opens a recovery (closed by the first step >= the one reached before the fault) and sleeps the back-off.
static void restart(sup_t *s, const attempt_t *a, const fault_t *f) {
    const double backoff = backoff_s(s);
    s->restarts++;
    event(s, "{\"event\": \"restart\", \"time\": %.6f, \"attempt\": %d, \"backoff_s\": %.3f}\n", now_s(),
          s->attempts + 1, backoff);
    cJSON *r = cJSON_CreateObject();
    const long restored = ckpt_latest_step(s->o->output_dir);
    cJSON_AddStringToObject(r, "fault", f->name);
    if (f->injected) cJSON_AddStringToObject(r, "injected", f->injected);
    // The failed rank: the injected fault's, else the laggard by heartbeat
    // (hangs), else unknown (-1; an MPI job's death names it on stderr).
    cJSON_AddNumberToObject(r, "rank", f->rank >= 0 ? f->rank : a->blamed >= 0 ? a->blamed : s->world == 1 ? 0 : -1);
    if (a->hung) cJSON_AddNumberToObject(r, "heartbeat_laggard_rank", a->blamed);
    cJSON_AddNumberToObject(r, "fault_step", (double)(f->step >= 0 ? f->step : a->seen));
    cJSON_AddNumberToObject(r, "detect_s", a->t_det - a->t_seen);
    cJSON_AddNumberToObject(r, "teardown_s", a->t_down - a->t_det);
    cJSON_AddNumberToObject(r, "restart_s", backoff);
    cJSON_AddNumberToObject(r, "restored_step", (double)restored);
    cJSON_AddNumberToObject(r, "steps_recomputed", (double)(a->seen - restored));
    cJSON_AddNumberToObject(r, "orphans", a->orphans);
    event(s, "{\"event\": \"restore\", \"time\": %.6f, \"checkpoint_step\": %ld, \"steps_recomputed\": %ld}\n",
          now_s(), restored, a->seen - restored);
    s->pending = true;
    s->pending_reach = a->seen;
    s->pending_t_fault = a->t_seen;
    cJSON_AddItemToArray(s->recs, r);
    usleep((useconds_t)(backoff * 1e6));
}

// OUTPUT/recovery.json: attempts, goodput, every recovery and the checkpoint interval advice.
static void write_summary(sup_t *s, int rc, double wall) {
    const pt_supervise_opts *o = s->o;
    if (s->pending)  // the last restart failed before it got back to its fault point (given up, stopped)
        cJSON_AddBoolToObject(cJSON_GetArrayItem(s->recs, cJSON_GetArraySize(s->recs) - 1), "recovered", false);
    cJSON *sum = cJSON_CreateObject();
    cJSON_AddNumberToObject(sum, "attempts", s->attempts);
    cJSON_AddNumberToObject(sum, "restarts", s->restarts);
    cJSON_AddBoolToObject(sum, "completed", rc == 0);
    if (rc > PT_SUPERVISE_SIGNALED) cJSON_AddNumberToObject(sum, "stopped_by_signal", rc - PT_SUPERVISE_SIGNALED);
    cJSON_AddNumberToObject(sum, "wall_s", wall);
    const double prod = productive_s(o->output_dir, o->max_steps > 0 ? o->max_steps : worker_max_steps(o->output_dir));
    cJSON_AddNumberToObject(sum, "productive_s", prod);
    cJSON_AddNumberToObject(sum, "goodput", wall > 0 ? prod / wall : 0);
    cJSON_AddItemToObject(sum, "recoveries", s->recs);
    s->recs = NULL;
    if (o->mtbf_hours > 0) {
        cJSON *adv = interval_advice(o->output_dir, o->mtbf_hours);
        if (adv) cJSON_AddItemToObject(sum, "checkpoint_interval", adv);
    }
    cJSON_AddStringToObject(sum, "events", "events.jsonl");
    char *txt = cJSON_PrintUnformatted(sum);
    char *path = pt_path_join(o->output_dir, "recovery.json");
    FILE *f = fopen(path, "w");
    if (f) { fputs(txt, f); fputc('\n', f); fclose(f); }
    free(path);
    free(txt);
    cJSON_Delete(sum);
}

static int live_slots(const sup_t *s) {
    int n = 0;
    for (int h = 0; h < s->hosts->n; h++)
        if (!s->lost[h]) n += s->hosts->slots[h];
    return n;
}

// --elastic: the layout the job starts with and its nodes (the hostfile's, or --nproc-per-node ranks each).
static int elastic_init(sup_t *s, int wargc, char **wargv) {
    const pt_elastic_opts *e = &s->o->elastic;
    s->wargc = wargc;
    s->wargv = wargv;
    if (pt_layout_from_args(wargc, wargv, s->world, &s->layout) != 0) return -1;
    s->hosts = calloc(1, sizeof *s->hosts);
    if (e->hostfile ? pt_hostfile_read(e->hostfile, s->hosts) : pt_hosts_uniform(s->world, e->nproc_per_node, s->hosts))
        return -1;
    if (live_slots(s) < s->world) {  // else the first failure would look like lost nodes
        pt_set_error("--hostfile %s: %d slots, fewer than the launcher's %d ranks", e->hostfile, live_slots(s), s->world);
        return -1;
    }
    return 0;
}

// The node that rank `rank` of the running job sits on: the live nodes' slots filled in order, as
// mpirun --map-by slot does. -1: beyond them.
static int node_of_rank(const sup_t *s, int rank) {
    for (int h = 0, first = 0; h < s->hosts->n; h++) {
        if (s->lost[h]) continue;
        if (rank < first + s->hosts->slots[h]) return h;
        first += s->hosts->slots[h];
    }
    return -1;
}

// Nodes the hostfile no longer lists are lost (a node listed again has come back). Without a hostfile
// nothing comes back: the nodes lost stay lost.
static void reread_hostfile(sup_t *s, const bool *injected) {
    pt_hostlist *now = s->o->elastic.hostfile ? calloc(1, sizeof *now) : NULL;
    if (!now) return;
    if (pt_hostfile_read(s->o->elastic.hostfile, now) != 0) {  // mid-edit or gone: read again next poll
        pt_clear_error();
        free(now);
        return;
    }
    for (int h = 0; h < s->hosts->n; h++) {
        bool listed = false;
        for (int k = 0; k < now->n && !listed; k++) listed = !strcmp(now->name[k], s->hosts->name[h]);
        s->lost[h] = injected[h] || !listed;
    }
    free(now);
}

// After a failed attempt: which nodes are gone (an injected kill of rank R takes R's node with it; a
// hostfile that no longer lists a node), a wait of up to --rejoin-timeout for them to come back, and,
// if they do not, the largest layout of the ranks left. 0: restart (the command rebuilt when the layout
// shrank); -1 with *rc and the error set: the shrink is refused.
static int elastic_replan(sup_t *s, const fault_t *f, int *rc) {
    const pt_elastic_opts *e = &s->o->elastic;
    bool injected[PT_MAX_HOSTS] = {0};
    for (int h = 0; h < s->hosts->n; h++) injected[h] = s->lost[h] && !e->hostfile;
    if (f->injected && !strncmp(f->injected, "kill", 4) && f->rank >= 0 && node_of_rank(s, f->rank) >= 0)
        injected[node_of_rank(s, f->rank)] = true;
    const double t0 = now_s();
    for (;;) {
        memcpy(s->lost, injected, sizeof injected);
        reread_hostfile(s, injected);
        if (live_slots(s) >= s->layout.world || now_s() - t0 >= e->rejoin_timeout || g_stop_signal) break;
        usleep(100000);
    }
    const double wait_s = now_s() - t0;
    int live = live_slots(s);
    if (live >= s->layout.world) return 0;
    pt_layout next;
    char why[512], from[160], to[160];
    pt_layout_str(&s->layout, from, sizeof from);
    if (pt_layout_shrink(&s->layout, live, e->min_world, &next, why, sizeof why) != 0) {
        event(s, "{\"event\": \"elastic_refused\", \"time\": %.6f, \"live_ranks\": %d, \"rejoin_wait_s\": %.6f}\n",
              now_s(), live, wait_s);
        pt_set_error("--elastic: cannot continue %s on the %d ranks left: %s", from, live, why);
        *rc = -1;
        return -1;
    }
    pt_layout_str(&next, to, sizeof to);
    fprintf(stderr, "supervisor: %d of %d ranks lost for good; continuing on %s (was %s)\n", s->layout.world - live,
            s->layout.world, to, from);
    event(s, "{\"event\": \"shrink\", \"time\": %.6f, \"from\": \"%s\", \"to\": \"%s\", \"rejoin_wait_s\": %.6f}\n",
          now_s(), from, to, wait_s);
    s->shrink = cJSON_CreateObject();
    cJSON_AddStringToObject(s->shrink, "old_layout", from);
    cJSON_AddStringToObject(s->shrink, "new_layout", to);
    const pt_layout *ls[2] = {&s->layout, &next};
    for (int i = 0; i < 2; i++) {
        cJSON *l = cJSON_AddObjectToObject(s->shrink, i ? "new" : "old");
        cJSON_AddNumberToObject(l, "world", ls[i]->world);
        cJSON_AddNumberToObject(l, "tp", ls[i]->tp);
        cJSON_AddNumberToObject(l, "fsdp", ls[i]->fsdp);
        cJSON_AddNumberToObject(l, "dp", ls[i]->dp);
        cJSON_AddNumberToObject(l, "per_device_train_batch_size", (double)ls[i]->batch);
        cJSON_AddNumberToObject(l, "gradient_accumulation_steps", (double)ls[i]->accum);
    }
    cJSON *gone = cJSON_AddArrayToObject(s->shrink, "lost_nodes");
    for (int h = 0; h < s->hosts->n; h++)
        if (s->lost[h]) cJSON_AddItemToArray(gone, cJSON_CreateString(s->hosts->name[h]));
    cJSON_AddNumberToObject(s->shrink, "rejoin_wait_s", wait_s);
    s->layout = next;
    s->world = next.world;
    pt_elastic_cmd_free(&s->ecmd);
    pt_cmd_free(&s->cmd);
    pt_elastic_cmd_build(&s->ecmd, s->o->launcher, s->wargc, s->wargv, &next);
    worker_command(s, s->ecmd.launcher, s->ecmd.argc, s->ecmd.argv);
    return 0;
}

int pt_supervise(const pt_supervise_opts *o, int wargc, char **wargv) {
    char *path = pt_path_join(o->output_dir, "events.jsonl");
    sup_t s = {.o = o, .ev = fopen(path, o->resume ? "a" : "w"), .world = o->world > 0 ? o->world : 1};
    if (!s.ev) { pt_set_error("%s: %s", path, strerror(errno)); free(path); return -1; }
    free(path);
    prctl(PR_SET_CHILD_SUBREAPER, 1);  // orphaned worker descendants come back to us (pt_proc_reap_strays)
    catch_stop_signals();
    worker_command(&s, o->launcher, wargc, wargv);
    if (o->elastic.on && elastic_init(&s, wargc, wargv) != 0) {
        pt_cmd_free(&s.cmd);
        fclose(s.ev);
        return -1;
    }
    s.recs = cJSON_CreateArray();
    const double t0 = now_s();
    int rc = -1;
    for (;;) {
        if (g_stop_signal) {  // during a restart's back-off: no worker is running
            log_stopped(s.ev, now_s(), s.attempts, last_step(o->output_dir));
            fflush(s.ev);
            pt_set_error("stopped by signal %d during the back-off before attempt %d", (int)g_stop_signal, s.attempts + 1);
            rc = PT_SUPERVISE_SIGNALED + g_stop_signal;
            break;
        }
        attempt_t a;
        if (start_attempt(&s, &a) != 0) break;
        run_attempt(&a);
        if (a.stopped) { rc = stopped(&s, &a); break; }
        if (completed(&s, &a)) { rc = 0; break; }
        const fault_t f = classify(&s, &a);
        if (give_up(&s, &a, &f, &rc)) break;
        if (o->elastic.on && elastic_replan(&s, &f, &rc) != 0) break;
        restart(&s, &a, &f);
        if (s.shrink) {  // the new recovery entry names the shrink and the wait for the lost ranks
            cJSON *r = cJSON_GetArrayItem(s.recs, cJSON_GetArraySize(s.recs) - 1);
            cJSON_AddNumberToObject(r, "rejoin_wait_s", cJSON_GetObjectItem(s.shrink, "rejoin_wait_s")->valuedouble);
            cJSON_AddItemToObject(r, "elastic", s.shrink);
            s.shrink = NULL;
        }
    }
    write_summary(&s, rc, now_s() - t0);
    cJSON_Delete(s.recs);
    fclose(s.ev);
    pt_cmd_free(&s.cmd);
    pt_elastic_cmd_free(&s.ecmd);
    free(s.hosts);
    return rc;
}
