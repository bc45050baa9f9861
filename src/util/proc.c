#define _GNU_SOURCE
#include "util/proc.h"
#include "util/common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

void pt_cmd_init(pt_cmd *c, const char *launcher, int cap) {
    memset(c, 0, sizeof *c);
    c->words = launcher && *launcher ? pt_strdup(launcher) : NULL;
    c->cap = cap + 1 + (c->words ? (int)strlen(c->words) : 0);
    c->argv = pt_calloc((size_t)c->cap + 1, sizeof *c->argv);
    for (char *sv = NULL, *w = c->words ? strtok_r(c->words, " \t", &sv) : NULL; w; w = strtok_r(NULL, " \t", &sv))
        c->argv[c->argc++] = w;
    c->launched = c->argc > 0;
}

void pt_cmd_add(pt_cmd *c, const char *word) {
    if (c->argc >= c->cap) {
        c->cap *= 2;
        c->argv = pt_realloc(c->argv, sizeof *c->argv * ((size_t)c->cap + 1));
    }
    c->argv[c->argc++] = (char *)word;
    c->argv[c->argc] = NULL;
}

void pt_cmd_free(pt_cmd *c) {
    free(c->argv);
    free(c->words);
    memset(c, 0, sizeof *c);
}

void pt_self_exe_path(char *out, size_t n) {
    const ssize_t l = readlink("/proc/self/exe", out, n - 1);
    out[l > 0 ? l : 0] = 0;
}

// In the child: never returns.
static void exec_child(const pt_cmd *c, const pt_spawn_opts *o, pid_t parent) {
    if (o->own_group) setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(125);  // the parent died before the signal was set up
    if (o->log_path) {
        const int lf = open(o->log_path, O_WRONLY | O_APPEND | O_CREAT, 0644);
        const int of = o->stdout_path ? open(o->stdout_path, O_WRONLY | O_TRUNC | O_CREAT, 0644) : lf;
        if (lf < 0 || of < 0) _exit(126);
        dup2(of, 1);
        dup2(lf, 2);
    }
    if (o->null_stdin) {
        const int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) dup2(nul, 0);
    }
    if (o->in_child) o->in_child(o->arg);
    if (c->launched) execvp(c->argv[0], c->argv);
    else execv("/proc/self/exe", c->argv);
    _exit(127);
}

pid_t pt_proc_spawn(const pt_cmd *c, const pt_spawn_opts *o, const char *what) {
    fflush(stdout);
    fflush(stderr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) {
        pt_set_error("%s: cannot start a child process: %s", what, strerror(errno));
        return -1;
    }
    if (pid == 0) exec_child(c, o, parent);
    if (o->own_group) setpgid(pid, pid);  // both sides: whichever runs first, the group exists before a kill
    return pid;
}

int pt_proc_wait(pid_t pid, int *status, double interval_s, bool (*watch)(void *arg, bool exited), void *arg) {
    for (;;) {
        const pid_t w = waitpid(pid, status, WNOHANG);
        if (w < 0 && errno != EINTR) return -1;
        const bool exited = w == pid;
        if (watch && watch(arg, exited) && !exited) return 0;
        if (exited) return 1;
        usleep((useconds_t)(interval_s * 1e6));
    }
}

int pt_proc_exit_code(int status) {
    return WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

int pt_proc_kill_group(pid_t pgid) {
    kill(-pgid, SIGTERM);
    for (int i = 0; i < 20 && kill(-pgid, 0) == 0; i++) {
        while (waitpid(-pgid, NULL, WNOHANG) > 0) {}
        usleep(50000);
    }
    kill(-pgid, SIGKILL);
    while (waitpid(-pgid, NULL, 0) > 0) {}
    return kill(-pgid, 0) == 0 ? 1 : 0;
}

// Live children of this process (zombies are reaped, not counted); kill_them: SIGKILL and reap each.
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
        if (state == 'Z') {
            waitpid(pid, NULL, WNOHANG);
            continue;
        }
        n++;
        if (kill_them && kill(pid, SIGKILL) == 0) waitpid(pid, NULL, 0);
    }
    closedir(d);
    return n;
}

int pt_proc_reap_strays(void) {
    for (int i = 0; i < 50 && children_alive(0) > 0; i++) {
        while (waitpid(-1, NULL, WNOHANG) > 0) {}
        usleep(20000);
    }
    while (waitpid(-1, NULL, WNOHANG) > 0) {}
    return children_alive(1);
}
