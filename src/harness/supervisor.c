#define _GNU_SOURCE
#include "harness/supervisor.h"
#include "util/common.h"
#include "util/fileio.h"
#include "util/json.h"
#include "train/ckpt_interval.h"
#include "train/metrics.h"

#include <stdbool.h>
#include <dirent.h>
#include <limits.h>
#include <sys/prctl.h>
#include <sys/stat.h>

#include <errno.h>
#include <math.h>
#include <signal.h>
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

// The step of the checkpoint `latest` names (0: none).
static long latest_step(const char *dir) {
    char path[4096], buf[256] = {0};
    snprintf(path, sizeof path, "%s/latest", dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *d = strrchr(buf, '-');
    return d ? atol(d + 1) : 0;
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

// Workers that outlived the teardown (an MPI rank in a process group of its
// own, say). The supervisor is a child subreaper, so every orphaned
// descendant is re-parented to it. Ranks its launcher is still ending get a
// second to exit (zombies are just reaped); whatever is alive after that is
// an orphan: killed, reaped and counted.
static int children_alive(int kill_them);
static int reap_strays(void) {
    for (int i = 0; i < 50 && children_alive(0) > 0; i++) {
        while (waitpid(-1, NULL, WNOHANG) > 0) {}
        usleep(20000);
    }
    while (waitpid(-1, NULL, WNOHANG) > 0) {}
    return children_alive(1);
}

static int children_alive(int kill_them) {
    DIR *d = opendir("/proc");
    if (!d) return 0;
    const pid_t me = getpid();
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const pid_t pid = (pid_t)atoi(e->d_name);
        if (pid <= 0 || pid == me) continue;
        char path[64], buf[1024];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = 0;
        const char *rp = strrchr(buf, ')');  // "pid (comm) state ppid ..."
        int ppid = 0;
        char state;
        if (!rp || sscanf(rp + 1, " %c %d", &state, &ppid) != 2 || ppid != me) continue;
        if (state == 'Z') {  // already dead
            waitpid(pid, NULL, WNOHANG);
            continue;
        }
        n++;
        if (kill_them && kill(pid, SIGKILL) == 0) waitpid(pid, NULL, 0);
    }
    closedir(d);
    return n;
}

// Tears the worker group down: SIGTERM, a grace period, SIGKILL, then reap.
static int teardown(pid_t pgid) {
    kill(-pgid, SIGTERM);
    for (int i = 0; i < 20 && kill(-pgid, 0) == 0; i++) {
        while (waitpid(-pgid, NULL, WNOHANG) > 0) {}
        usleep(50000);
    }
    kill(-pgid, SIGKILL);
    while (waitpid(-pgid, NULL, 0) > 0) {}
    return kill(-pgid, 0) == 0 ? 1 : 0;  // orphans left in the group
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

int pt_supervise(const pt_supervise_opts *o, int wargc, char **wargv) {
    char path[4096];
    snprintf(path, sizeof path, "%s/events.jsonl", o->output_dir);
    FILE *ev = fopen(path, o->resume ? "a" : "w");
    if (!ev) { pt_set_error("%s: %s", path, strerror(errno)); return -1; }
    prctl(PR_SET_CHILD_SUBREAPER, 1);  // orphaned worker descendants come back to us (reap_strays)
    catch_stop_signals();
    // The worker command: [launcher words...] portatrain train ARGS
    char exe[4096];
    ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[el > 0 ? el : 0] = 0;
    char *lcopy = o->launcher ? strdup(o->launcher) : NULL;
    char **argv = calloc((size_t)wargc + 4 + (o->launcher ? strlen(o->launcher) : 0), sizeof *argv);
    int base = 0;
    if (lcopy)
        for (char *sv = NULL, *tok = strtok_r(lcopy, " \t", &sv); tok; tok = strtok_r(NULL, " \t", &sv)) argv[base++] = tok;
    const int launcher_words = base;
    argv[base++] = lcopy ? exe : wargv[0];
    for (int i = 1; i < wargc; i++) argv[base++] = wargv[i];
    wargc = base;
    const int world = o->world > 0 ? o->world : 1;
    const double t0 = now_s();
    int attempts = 0, restarts = 0, streak = 0, rc = -1;
    bool fired[64] = {0}, armed[64];
    bool pending = false;  // a recovery waiting for the worker to reach pending_reach again
    long pending_reach = 0;
    double pending_t_fault = 0;
    cJSON *recs = cJSON_CreateArray();
    for (;;) {
        if (g_stop_signal) {  // during a restart's back-off: no worker is running
            log_stopped(ev, now_s(), attempts, last_step(o->output_dir));
            fflush(ev);
            pt_set_error("stopped by signal %d during the back-off before attempt %d", (int)g_stop_signal, attempts + 1);
            rc = PT_SUPERVISE_SIGNALED + g_stop_signal;
            break;
        }
        attempts++;
        int n = wargc;
        // Resume whenever a checkpoint exists; a fault before the first save restarts from scratch,
        // replacing the failed attempt's metrics (the worker refuses a run dir without one of the two).
        if (attempts > 1 && latest_step(o->output_dir) > 0) { argv[n++] = "--resume-from-checkpoint"; argv[n++] = "latest"; }
        else if (attempts > 1) argv[n++] = "--overwrite-output-dir";
        argv[n] = NULL;
        // A fault fires once: this attempt arms the unfired faults up to and
        // including the first that ends an attempt (kill, hang, enospc); nan
        // and corrupt-checkpoint faults don't, so they ride along with it. A bad
        // batch (nan, nan:target=grad) stays armed: a replay of its step meets it
        // again, as an uninterrupted run met it once.
        for (int i = 0, stop = 0; i < o->n_faults; i++) {
            armed[i] = !stop && (!fired[i] || pt_fault_recurs(o->faults[i].kind));
            if (armed[i] && pt_fault_ends_attempt(o->faults[i].kind)) stop = 1;
        }
        clear_heartbeats(o->output_dir);
        const double t_start = now_s();
        const pid_t sup_pid = getpid();
        pid_t pid = fork();
        if (pid < 0) { pt_set_error("fork: %s", strerror(errno)); break; }
        if (pid == 0) {
            setpgid(0, 0);
            // The worker dies with its supervisor (killed, or its own parent gone):
            // a supervised run never leaves an orphan training process.
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != sup_pid) _exit(125);
            pt_fault_disarm_all();
            // --overwrite-output-dir in the worker keeps this supervisor's events.jsonl.
            setenv("PT_SUPERVISED_WORKER", "1", 1);
            for (int i = 0; i < o->n_faults; i++)
                if (armed[i]) pt_fault_arm(&o->faults[i]);
            if (launcher_words) execvp(argv[0], argv);
            else execv("/proc/self/exe", argv);
            _exit(127);
        }
        setpgid(pid, pid);
        fprintf(ev, "{\"event\": \"start\", \"time\": %.6f, \"attempt\": %d, \"pid\": %d}\n", t_start, attempts, (int)pid);
        fflush(ev);
        // Poll exit status and step progress; a worker without progress for
        // hang_timeout seconds is declared hung.
        int st = 0;
        bool hung = false, stopped = false;
        long seen = last_step(o->output_dir);
        double t_seen = now_s(), t_first_new = 0;
        for (;;) {
            pid_t w = waitpid(pid, &st, WNOHANG);
            const bool exited = w == pid;  // its last line may have landed after the previous poll
            const long s = last_step(o->output_dir);
            const double t = now_s();
            if (s != seen) {
                // Only a step beyond the last one seen is the attempt's first step: a resumed worker
                // first cuts metrics.jsonl back to its checkpoint, and --overwrite-output-dir removes it
                // before the model load; until a step is logged the start-up timeout applies.
                if (!t_first_new && s > seen) t_first_new = t;
                seen = s;
                t_seen = t;
                if (pending && s >= pending_reach) {
                    cJSON *r = cJSON_GetArrayItem(recs, cJSON_GetArraySize(recs) - 1);
                    const long back = resumed_step(o->output_dir);
                    if (back >= 0 && back != (long)cJSON_GetObjectItem(r, "restored_step")->valuedouble) {
                        cJSON_ReplaceItemInObject(r, "restored_step", cJSON_CreateNumber((double)back));
                        cJSON_ReplaceItemInObject(r, "steps_recomputed", cJSON_CreateNumber((double)(pending_reach - back)));
                    }
                    close_recovery(recs, t_first_new - t_start, t - t_first_new, t - pending_t_fault);
                    fprintf(ev, "{\"event\": \"recovered\", \"time\": %.6f, \"step\": %ld, \"total_s\": %.6f, "
                            "\"restored_step\": %ld}\n", t, s, t - pending_t_fault,
                            (long)cJSON_GetObjectItem(r, "restored_step")->valuedouble);
                    fflush(ev);
                    pending = false;
                }
            }
            if (exited) break;
            if (g_stop_signal) { stopped = true; break; }
            // Until its first step an attempt is loading and restoring: that gets
            // the start-up timeout, steps after it the (shorter) hang timeout.
            double limit = t_first_new ? o->hang_timeout : o->startup_timeout;
            if (limit > 0 && t_first_new && t - t_seen > limit && saving(o->output_dir, world))
                limit = o->startup_timeout;  // a slow save, not a hang (read only once past the hang timeout)
            if (limit > 0 && t - (t_first_new ? t_seen : t_start) > limit) {
                // A save can end between the metrics read above and the heartbeat read: the worker logs
                // the step before its heartbeat leaves "save", so a second look at the metrics sees it.
                if (last_step(o->output_dir) != seen) continue;
                hung = true;
                break;
            }
            usleep(20000);
        }
        const double t_det = now_s();
        long lag_step = 0;
        const int blamed = hung ? laggard_rank(o->output_dir, world, &lag_step) : -1;
        int orphans = teardown(pid);
        orphans += reap_strays();
        const double t_down = now_s();
        if (stopped) {
            seen = last_step(o->output_dir);  // an MPI job's ranks may log steps until mpirun has ended them
            log_stopped(ev, t_det, attempts, seen);
            fprintf(ev, "{\"event\": \"teardown\", \"time\": %.6f, \"duration_s\": %.6f, \"orphans\": %d}\n",
                    t_down, t_down - t_det, orphans);
            fflush(ev);
            pt_set_error("stopped by signal %d after step %ld; the worker was stopped (resume with "
                         "--resume-from-checkpoint latest)", (int)g_stop_signal, seen);
            rc = PT_SUPERVISE_SIGNALED + g_stop_signal;
            break;
        }
        if (!hung && WIFEXITED(st) && WEXITSTATUS(st) == 0) {
            // A restart that finished without a new step (its checkpoint was already at the fault
            // point: a kill or hang after the last step, before the final model write) recovered too.
            if (pending) {
                close_recovery(recs, t_det - t_start, 0, t_det - pending_t_fault);
                fprintf(ev, "{\"event\": \"recovered\", \"time\": %.6f, \"step\": %ld, \"total_s\": %.6f}\n",
                        t_det, seen, t_det - pending_t_fault);
                pending = false;
            }
            rc = 0;
            break;
        }
        const bool killed = !hung && WIFSIGNALED(st);
        const bool nonfinite = !hung && WIFEXITED(st) && WEXITSTATUS(st) == 3;
        // The armed faults the worker reached fired (a fault of step S fires at
        // step S, or during it: a kill in the save or a nan stop leave S-1 logged).
        long fault_step = -1;
        int fault_rank = -1;
        const char *injected = NULL;
        for (int i = 0; i < o->n_faults; i++)
            if (armed[i] && o->faults[i].step <= seen + 1) {
                const bool again = fired[i];  // a bad batch met again in a replay: not this attempt's fault
                fired[i] = true;
                if (pt_fault_ends_attempt(o->faults[i].kind) || (fault_step < 0 && !again)) {
                    fault_step = o->faults[i].step;
                    fault_rank = o->faults[i].rank;
                    injected = pt_fault_name(o->faults[i].kind);
                }
            }
        const char *fault = hung ? "hang" : killed ? "kill" : nonfinite ? "nonfinite" : "exit";
        fprintf(ev, "{\"event\": \"detected\", \"time\": %.6f, \"attempt\": %d, \"fault\": \"%s\", \"step\": %ld, "
                "\"detect_s\": %.6f, \"signal\": %d, \"exit\": %d, \"injected\": \"%s\", \"injected_rank\": %d, "
                "\"heartbeat_laggard_rank\": %d}\n",
                t_det, attempts, fault, seen, t_det - t_seen, killed ? WTERMSIG(st) : 0,
                !hung && WIFEXITED(st) ? WEXITSTATUS(st) : -1, injected ? injected : "", fault_rank, blamed);
        fprintf(ev, "{\"event\": \"teardown\", \"time\": %.6f, \"duration_s\": %.6f, \"orphans\": %d}\n",
                t_down, t_down - t_det, orphans);
        fflush(ev);
        if (nonfinite) {  // deterministic: a restart would replay the same batch and stop again
            pt_set_error("worker stopped on a non-finite loss or gradient after step %ld (exit 3); not restarting "
                         "(a restart replays the same batch; see --nan-policy skip|rollback)", seen);
            rc = PT_SUPERVISE_NONFINITE;
            break;
        }
        if (!hung && WIFEXITED(st) && WEXITSTATUS(st) == 2) {  // usage error: a restart would fail the same way
            pt_set_error("worker exited with a usage error (exit 2); not restarting");
            rc = PT_SUPERVISE_USAGE;
            break;
        }
        if (restarts >= o->max_restarts) {
            pt_set_error("worker failed %d times; giving up after --max-restarts %d", attempts, o->max_restarts);
            break;
        }
        // Back-off doubles only while failures come without progress (a crash
        // loop); a worker that got past its previous failure point starts over
        // at --restart-backoff. Capped so a long run never sleeps for minutes.
        if (pending) {  // the previous recovery never got back to its fault point
            cJSON_AddBoolToObject(cJSON_GetArrayItem(recs, cJSON_GetArraySize(recs) - 1), "recovered", false);
            streak++;
        } else streak = 0;
        double backoff = o->restart_backoff;
        for (int i = 0; i < streak && backoff < PT_SUPERVISE_MAX_BACKOFF_S; i++) backoff *= 2;
        if (backoff > PT_SUPERVISE_MAX_BACKOFF_S) backoff = PT_SUPERVISE_MAX_BACKOFF_S;
        restarts++;
        fprintf(ev, "{\"event\": \"restart\", \"time\": %.6f, \"attempt\": %d, \"backoff_s\": %.3f}\n",
                now_s(), attempts + 1, backoff);
        fflush(ev);
        cJSON *r = cJSON_CreateObject();
        const long restored = latest_step(o->output_dir);
        cJSON_AddStringToObject(r, "fault", fault);
        if (injected) cJSON_AddStringToObject(r, "injected", injected);
        // The failed rank: the injected fault's, else the laggard by heartbeat
        // (hangs), else unknown (-1; an MPI job's death names it on stderr).
        cJSON_AddNumberToObject(r, "rank", fault_rank >= 0 ? fault_rank : blamed >= 0 ? blamed : world == 1 ? 0 : -1);
        if (hung) cJSON_AddNumberToObject(r, "heartbeat_laggard_rank", blamed);
        cJSON_AddNumberToObject(r, "fault_step", (double)(fault_step >= 0 ? fault_step : seen));
        cJSON_AddNumberToObject(r, "detect_s", t_det - t_seen);
        cJSON_AddNumberToObject(r, "teardown_s", t_down - t_det);
        cJSON_AddNumberToObject(r, "restart_s", backoff);
        cJSON_AddNumberToObject(r, "restored_step", (double)restored);
        cJSON_AddNumberToObject(r, "steps_recomputed", (double)(seen - restored));
        cJSON_AddNumberToObject(r, "orphans", orphans);
        fprintf(ev, "{\"event\": \"restore\", \"time\": %.6f, \"checkpoint_step\": %ld, \"steps_recomputed\": %ld}\n",
                now_s(), restored, seen - restored);
        fflush(ev);  // before the back-off: a supervisor killed during it keeps the line
        pending = true;  // closed at the first step >= the one reached before the fault
        pending_reach = seen;
        pending_t_fault = t_seen;
        cJSON_AddItemToArray(recs, r);
        usleep((useconds_t)(backoff * 1e6));
    }
    if (pending)  // the last restart failed before it got back to its fault point (given up, stopped)
        cJSON_AddBoolToObject(cJSON_GetArrayItem(recs, cJSON_GetArraySize(recs) - 1), "recovered", false);
    const double wall = now_s() - t0;
    cJSON *sum = cJSON_CreateObject();
    cJSON_AddNumberToObject(sum, "attempts", attempts);
    cJSON_AddNumberToObject(sum, "restarts", restarts);
    cJSON_AddBoolToObject(sum, "completed", rc == 0);
    if (rc > PT_SUPERVISE_SIGNALED) cJSON_AddNumberToObject(sum, "stopped_by_signal", rc - PT_SUPERVISE_SIGNALED);
    cJSON_AddNumberToObject(sum, "wall_s", wall);
    const double prod = productive_s(o->output_dir, o->max_steps > 0 ? o->max_steps : worker_max_steps(o->output_dir));
    cJSON_AddNumberToObject(sum, "productive_s", prod);
    cJSON_AddNumberToObject(sum, "goodput", wall > 0 ? prod / wall : 0);
    cJSON_AddItemToObject(sum, "recoveries", recs);
    if (o->mtbf_hours > 0) {
        cJSON *adv = interval_advice(o->output_dir, o->mtbf_hours);
        if (adv) cJSON_AddItemToObject(sum, "checkpoint_interval", adv);
    }
    cJSON_AddStringToObject(sum, "events", "events.jsonl");
    char *txt = cJSON_PrintUnformatted(sum);
    snprintf(path, sizeof path, "%s/recovery.json", o->output_dir);
    FILE *f = fopen(path, "w");
    if (f) { fputs(txt, f); fputc('\n', f); fclose(f); }
    free(txt);
    cJSON_Delete(sum);
    fclose(ev);
    free(argv);
    free(lcopy);
    return rc;
}
