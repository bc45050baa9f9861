// Child processes: the command line of a run of this binary (optionally under
// a launcher such as "mpirun -np 4"), its start with a parent-death signal,
// waiting with polling, and tearing a process group down.
#pragma once
#include <stdbool.h>
#include <sys/types.h>

// argv of a child: [launcher words...] PROGRAM ARGS... NULL. Owns the launcher's words.
typedef struct {
    char **argv;
    int argc, cap;
    bool launched;  // the first word is a launcher (found on PATH); else the child is /proc/self/exe
    char *words;
} pt_cmd;

// The launcher's words split on blanks (launcher NULL or empty: none). `cap`: the most words to follow.
void pt_cmd_init(pt_cmd *c, const char *launcher, int cap);
void pt_cmd_add(pt_cmd *c, const char *word);
void pt_cmd_free(pt_cmd *c);
// This binary's path (readlink of /proc/self/exe; "" when unreadable): what every rank of a launched job
// starts (/proc/self/exe would name the launcher's daemon there).
void pt_self_exe_path(char *out, size_t n);

typedef struct {
    const char *log_path;     // non-NULL: stderr appended there (and stdout, without stdout_path)
    const char *stdout_path;  // non-NULL: stdout truncated into it
    bool null_stdin;
    bool own_group;           // the child leads a process group of its own (pt_proc_kill_group)
    void (*in_child)(void *arg);  // run in the child just before exec (environment, fault arming)
    void *arg;
} pt_spawn_opts;

// Starts c: the launcher by PATH, else the running image (/proc/self/exe, even if the file was rebuilt).
// The child gets SIGTERM when this process dies, so no run outlives the process that judges or supervises it.
// Returns its pid, or -1 with an error naming `what`.
pid_t pt_proc_spawn(const pt_cmd *c, const pt_spawn_opts *o, const char *what);

// Polls pid every interval_s until it exits; watch(arg, exited) runs after each poll (also the one that saw
// the exit) and stops the wait early by returning true. Returns 1 when it exited (*status set), 0 when watch
// stopped the wait first, -1 when waitpid failed.
int pt_proc_wait(pid_t pid, int *status, double interval_s, bool (*watch)(void *arg, bool exited), void *arg);
// A wait status as a shell reports it: the exit code, or 128 + signal.
int pt_proc_exit_code(int status);

// SIGTERM to the group, a grace period of ~1 s, SIGKILL, reap. Returns 1 when processes are left in it.
int pt_proc_kill_group(pid_t pgid);
// Descendants re-parented to this process (a child subreaper) after their group was torn down: given a
// second to exit, then killed and reaped. Returns how many had to be killed.
int pt_proc_reap_strays(void);
