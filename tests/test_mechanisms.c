// The one owners of shared mechanisms: pt_remove_tree (recursive delete), pt_cmd / pt_proc_* (child
// processes), pt_env_rank (the launcher's rank), ckpt_latest_* (the `latest` pointer), pt_cpuinfo_value.
#define _GNU_SOURCE
#include "io/checkpoint.h"
#include "testutil.h"
#include "util/common.h"
#include "util/fileio.h"
#include "util/proc.h"
#include "util/sysinfo.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void write_text(const char *dir, const char *name, const char *text) {
    char *p = pt_path_join(dir, name);
    FILE *f = fopen(p, "w");
    if (f) { fputs(text, f); fclose(f); }
    free(p);
}

static void test_remove_tree(void) {
    char *t = test_tmpdir("mech"), *tree = pt_path_join(t, "tree"), *deep = pt_path_join(tree, "a/b/c");
    char *keep = pt_path_join(t, "keep"), *link = pt_path_join(tree, "a/link");
    CHECK(pt_mkdir_p(deep) == 0 && pt_mkdir_p(keep) == 0, "mkdir");
    write_text(deep, "f", "x");
    write_text(keep, "g", "y");
    CHECK(symlink(keep, link) == 0, "symlink");
    CHECK(pt_remove_tree(tree) == 0, "%s", pt_last_error());
    CHECK(!pt_file_exists(tree), "the tree is gone");
    char *g = pt_path_join(keep, "g");
    CHECK(pt_file_exists(g), "a symlinked directory's files survive (the link itself is removed)");
    CHECK(pt_remove_tree(tree) == 0, "an absent path is no error");
    CHECK(pt_remove_tree(g) == 0 && !pt_file_exists(g), "a plain file");
    pt_remove_tree(t);
    free(g); free(t); free(tree); free(deep); free(keep); free(link);
}

static void test_proc(void) {
    pt_cmd c;
    pt_cmd_init(&c, " sh \t-c ", 2);
    CHECK(c.launched && c.argc == 2 && !strcmp(c.argv[0], "sh") && !strcmp(c.argv[1], "-c"), "launcher words split");
    pt_cmd_add(&c, "exit 3");
    CHECK(c.argv[3] == NULL && c.argc == 3, "NULL-terminated");
    const pt_spawn_opts so = {.null_stdin = true};
    const pid_t pid = pt_proc_spawn(&c, &so, "test");
    int st = 0;
    CHECK(pid > 0 && pt_proc_wait(pid, &st, 0.01, NULL, NULL) == 1, "spawned and waited");
    CHECK(pt_proc_exit_code(st) == 3, "exit code %d", pt_proc_exit_code(st));
    pt_cmd_free(&c);
    pt_cmd_init(&c, NULL, 0);
    CHECK(!c.launched && c.argc == 0, "no launcher: the child is this binary");
    pt_cmd_free(&c);
    // a group that ignores nothing is torn down: SIGTERM ends it, nothing is left
    pt_cmd_init(&c, "sleep", 1);
    pt_cmd_add(&c, "30");
    const pt_spawn_opts grp = {.own_group = true};
    const pid_t g = pt_proc_spawn(&c, &grp, "test");
    CHECK(g > 0 && pt_proc_kill_group(g) == 0, "group torn down");
    CHECK(waitpid(g, NULL, WNOHANG) < 0, "and reaped");
    pt_cmd_free(&c);
}

static void test_env_rank(void) {
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("PMI_RANK");
    unsetenv("PMIX_RANK");
    CHECK(pt_env_rank() == -1, "no launcher: -1");
    setenv("PMI_RANK", "5", 1);
    CHECK(pt_env_rank() == 5, "PMI_RANK");
    setenv("OMPI_COMM_WORLD_RANK", "2", 1);
    CHECK(pt_env_rank() == 2, "Open MPI's first");
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("PMI_RANK");
}

static void test_latest(void) {
    char *t = test_tmpdir("latest");
    CHECK(ckpt_latest_name(t) == NULL && ckpt_latest_step(t) == 0, "no pointer");
    write_text(t, "latest", "checkpoint-40\n");
    char *n = ckpt_latest_name(t);
    CHECK(n && !strcmp(n, "checkpoint-40"), "name %s", n ? n : "(null)");
    CHECK(ckpt_latest_step(t) == 40, "step");
    write_text(t, "latest", "checkpoint-4x\n");
    CHECK(ckpt_latest_name(t) == NULL && ckpt_latest_step(t) == 0, "not a checkpoint name");
    free(n);
    pt_remove_tree(t);
    free(t);
}

static void test_cpuinfo(void) {
    char m[256];
    pt_cpu_model(m, sizeof m);
    CHECK(m[0] && !strchr(m, '\n'), "a one-line CPU model: '%s'", m);
    char *none = pt_cpuinfo_value("no such key in cpuinfo");
    CHECK(none == NULL, "absent key");
    CHECK(!pt_has_error(), "no error left behind");
}

int main(void) {
    test_remove_tree();
    test_proc();
    test_env_rank();
    test_latest();
    test_cpuinfo();
    return test_summary("test_mechanisms");
}
