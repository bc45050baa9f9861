#define _GNU_SOURCE
#include "harness/supervisor.h"
#include "util/common.h"
#include "util/json.h"

#include <stdbool.h>
#include <sys/stat.h>

#include <errno.h>
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
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *save = NULL, *f = strtok_r(buf, ",", &save); f; f = strtok_r(NULL, ",", &save)) {
        if (strncmp(f, "kill:", 5)) { pt_set_error("--inject %s: only kill faults are supported yet", f); return -1; }
        const char *s = strstr(f, "step=");
        if (!s || o->n_kills >= 64) { pt_set_error("--inject %s: needs step=S", f); return -1; }
        o->kill_steps[o->n_kills++] = atol(s + 5);
    }
    return 0;
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

int pt_supervise(const pt_supervise_opts *o, int wargc, char **wargv) {
    char path[4096];
    snprintf(path, sizeof path, "%s/events.jsonl", o->output_dir);
    FILE *ev = fopen(path, "w");
    if (!ev) { pt_set_error("%s: %s", path, strerror(errno)); return -1; }
    char **argv = calloc((size_t)wargc + 4, sizeof *argv);
    for (int i = 0; i < wargc; i++) argv[i] = wargv[i];
    const double t0 = now_s();
    int next_fault = 0, attempts = 0, restarts = 0, rc = -1;
    cJSON *recs = cJSON_CreateArray();
    for (;;) {
        attempts++;
        int n = wargc;
        if (attempts > 1) { argv[n++] = "--resume-from-checkpoint"; argv[n++] = "latest"; }
        argv[n] = NULL;
        const double t_start = now_s();
        pid_t pid = fork();
        if (pid < 0) { pt_set_error("fork: %s", strerror(errno)); break; }
        if (pid == 0) {
            setpgid(0, 0);
            // A fault fires once: only the next unfired one is armed for this attempt.
            if (next_fault < o->n_kills) {
                char s[32];
                snprintf(s, sizeof s, "%ld", o->kill_steps[next_fault]);
                setenv("PT_FAULT_KILL_AFTER_STEP", s, 1);
            } else unsetenv("PT_FAULT_KILL_AFTER_STEP");
            execv("/proc/self/exe", argv);
            _exit(127);
        }
        setpgid(pid, pid);
        fprintf(ev, "{\"event\": \"start\", \"time\": %.6f, \"attempt\": %d, \"pid\": %d}\n", t_start, attempts, (int)pid);
        fflush(ev);
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
        const double t_det = now_s();
        const int orphans = teardown(pid);
        const double t_down = now_s();
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) { rc = 0; break; }
        const bool killed = WIFSIGNALED(st);
        fprintf(ev, "{\"event\": \"detected\", \"time\": %.6f, \"attempt\": %d, \"signal\": %d, \"exit\": %d}\n",
                t_det, attempts, killed ? WTERMSIG(st) : 0, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        fprintf(ev, "{\"event\": \"teardown\", \"time\": %.6f, \"duration_s\": %.6f, \"orphans\": %d}\n",
                t_down, t_down - t_det, orphans);
        fflush(ev);
        long fault_step = -1;
        if (killed && next_fault < o->n_kills) fault_step = o->kill_steps[next_fault++];
        if (restarts >= o->max_restarts) {
            pt_set_error("worker failed %d times; giving up after --max-restarts %d", attempts, o->max_restarts);
            break;
        }
        double backoff = o->restart_backoff;
        for (int i = 0; i < restarts; i++) backoff *= 2;
        restarts++;
        fprintf(ev, "{\"event\": \"restart\", \"time\": %.6f, \"attempt\": %d, \"backoff_s\": %.3f}\n",
                now_s(), attempts + 1, backoff);
        fflush(ev);
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "fault", killed ? "kill" : "exit");
        cJSON_AddNumberToObject(r, "rank", 0);
        cJSON_AddNumberToObject(r, "fault_step", (double)fault_step);
        cJSON_AddNumberToObject(r, "teardown_s", t_down - t_det);
        cJSON_AddNumberToObject(r, "orphans", orphans);
        cJSON_AddItemToArray(recs, r);
        usleep((useconds_t)(backoff * 1e6));
    }
    const double wall = now_s() - t0;
    cJSON *sum = cJSON_CreateObject();
    cJSON_AddNumberToObject(sum, "attempts", attempts);
    cJSON_AddNumberToObject(sum, "restarts", restarts);
    cJSON_AddBoolToObject(sum, "completed", rc == 0);
    cJSON_AddNumberToObject(sum, "wall_s", wall);
    cJSON_AddItemToObject(sum, "recoveries", recs);
    cJSON_AddStringToObject(sum, "events", "events.jsonl");
    char *txt = cJSON_Print(sum);
    snprintf(path, sizeof path, "%s/recovery.json", o->output_dir);
    FILE *f = fopen(path, "w");
    if (f) { fputs(txt, f); fputc('\n', f); fclose(f); }
    free(txt);
    cJSON_Delete(sum);
    fclose(ev);
    free(argv);
    return rc;
}
