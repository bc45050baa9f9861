// portatrain train: Hugging Face TrainingArguments-style flags.
#include "cli/cli.h"
#include "dist/placement.h"
#include "harness/supervisor.h"
#include "train/faults.h"
#include "train/outdir.h"
#include "train/train_args.h"
#include "train/trainer.h"
#include "util/common.h"
#include "util/fileio.h"

#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdio.h>
#include <string.h>

static void help(void) {
    printf("usage: portatrain train --model DIR --data SHARD --output-dir DIR --max-steps N --seq-len T [options]\n"
           "       (or --num-train-epochs E instead of --max-steps)\n\n");
    pt_train_flags_help();
    printf("\nOptions may also be spelled with underscores, as Hugging Face's TrainingArguments are\n"
           "(--learning_rate 3e-4 --per_device_train_batch_size 4).\n"
           "Writes OUTPUT/metrics.jsonl (one JSON object per step), OUTPUT/train_args.json and the final\n"
           "model (config.json + model.safetensors) into OUTPUT.\n"
           "Exit status: 0 done, 1 error (a failed checkpoint save keeps the previous one), 2 usage,\n"
           "3 stopped on a non-finite loss/gradient or refused to save non-finite weights (not retried by\n"
           "--supervise).\n");
}

// --elastic needs an MPI job and a notion of a node (the unit that is lost).
static int elastic_usage(const pt_supervise_opts *so) {
    const pt_elastic_opts *e = &so->elastic;
    if (!e->on) {
        if (e->hostfile || e->nproc_per_node || e->min_world > 1)
            return cli_usage_error("train", "--min-world, --nproc-per-node and --hostfile need --elastic");
        return 0;
    }
    if (!so->launcher) return cli_usage_error("train", "--elastic needs --launcher \"mpirun -np N ...\"");
    if (!e->hostfile && !e->nproc_per_node)
        return cli_usage_error("train", "--elastic needs --nproc-per-node K or --hostfile FILE (what a node is)");
    if (e->hostfile && e->nproc_per_node)
        return cli_usage_error("train", "--elastic: give --nproc-per-node or --hostfile, not both");
    if (e->nproc_per_node && so->world % e->nproc_per_node)
        return cli_usage_error("train", "--elastic: --nproc-per-node %d does not divide the launcher's %d ranks",
                               e->nproc_per_node, so->world);
    if (e->hostfile) {  // read now: a bad file is a usage error before anything starts
        pt_hostlist *h = calloc(1, sizeof *h);
        int slots = 0;
        const int bad = pt_hostfile_read(e->hostfile, h);
        for (int i = 0; !bad && i < h->n; i++) slots += h->slots[i];
        free(h);
        if (bad) return cli_usage_error("train", "%s", pt_last_error());
        if (slots < so->world)
            return cli_usage_error("train", "--hostfile %s: %d slots, fewer than the launcher's %d ranks", e->hostfile,
                                   slots, so->world);
    }
    if (e->min_world > so->world)
        return cli_usage_error("train", "--elastic: --min-world %d is more than the launcher's %d ranks",
                               e->min_world, so->world);
    return 0;
}

// --supervise: strip the supervisor's flags and hand the rest to pt_supervise,
// which re-executes `train` with them as the worker.
static int supervise(int argc, char **argv) {
    pt_supervise_opts so = {.max_restarts = 3, .restart_backoff = 0.1, .hang_timeout = 60, .startup_timeout = 600,
                           .elastic = {.min_world = 1, .rejoin_timeout = 30}};
    char **w = calloc((size_t)argc + 2, sizeof *w);
    int n = 0;
    bool resume = false, overwrite = false;
    w[n++] = "portatrain";
    w[n++] = "train";
    for (int i = 1; i < argc; i++) {
        // "--name value" or "--name=value" (the worker's own parser takes both)
        char name[128];
        const char *eq_val;  // the inline value of "--name=value"
        if (!argp_canonical_name(argv[i], name, sizeof name, &eq_val)) snprintf(name, sizeof name, "%s", argv[i]);
        const bool eq = eq_val != NULL, has_val = eq || i + 1 < argc;
        // the value of a flag that takes one: inline, or the next argument (consumed by own flags only)
#define VAL(consume) (eq ? eq_val : (consume) ? argv[++i] : argv[i + 1])
        if (!strcmp(name, "--supervise")) continue;
        if (!strcmp(name, "--max-restarts") && has_val)
            so.max_restarts = (int)argp_parse_int("train", name, VAL(1), 0, 1000000);
        else if (!strcmp(name, "--hang-timeout") && has_val)
            so.hang_timeout = argp_parse_double("train", name, VAL(1), 0);
        else if (!strcmp(name, "--startup-timeout") && has_val)
            so.startup_timeout = argp_parse_double("train", name, VAL(1), 0);
        else if (!strcmp(name, "--restart-backoff") && has_val)
            so.restart_backoff = argp_parse_double("train", name, VAL(1), 0);
        else if (!strcmp(name, "--launcher") && has_val) {
            so.launcher = VAL(1);
            const char *np = strstr(so.launcher, "-np ");
            if (!np) np = strstr(so.launcher, "-n ");
            so.world = np ? atoi(strchr(np, ' ') + 1) : 1;
        }
        else if (!strcmp(name, "--elastic"))
            so.elastic.on = !eq || argp_parse_bool("train", name, eq_val);
        else if (!strcmp(name, "--min-world") && has_val)
            so.elastic.min_world = (int)argp_parse_int("train", name, VAL(1), 1, 1000000);
        else if (!strcmp(name, "--nproc-per-node") && has_val)
            so.elastic.nproc_per_node = (int)argp_parse_int("train", name, VAL(1), 1, 1000000);
        else if (!strcmp(name, "--hostfile") && has_val)
            so.elastic.hostfile = VAL(1);
        else if (!strcmp(name, "--rejoin-timeout") && has_val)
            so.elastic.rejoin_timeout = argp_parse_double("train", name, VAL(1), 0);
        else if (!strcmp(name, "--inject") && has_val) {
            if (pt_supervise_parse_inject(&so, VAL(1)) != 0) { free(w); return cli_fail(); }
        } else {
            if (has_val && !strcmp(name, "--output-dir")) so.output_dir = VAL(0);
            if (has_val && !strcmp(name, "--max-steps")) so.max_steps = atol(VAL(0));
            if (has_val && !strcmp(name, "--mtbf-hours")) so.mtbf_hours = atof(VAL(0));
            if (!strcmp(name, "--resume-from-checkpoint")) resume = true;
            if (!strcmp(name, "--overwrite-output-dir")) overwrite = !eq || argp_parse_bool("train", name, eq_val);
            w[n++] = argv[i];
        }
#undef VAL
    }
    if (!so.output_dir) { free(w); return cli_usage_error("train", "--supervise needs --output-dir"); }
    if (elastic_usage(&so) != 0) { free(w); return 2; }
    if (pt_fault_resolve_random(so.faults, so.n_faults, so.max_steps, so.world > 0 ? so.world : 1) != 0) {
        free(w);
        return cli_usage_error("train", "%s", pt_last_error());
    }
    // Checked here too: the supervisor's events.jsonl would replace the previous run's before the
    // worker refused the directory.
    if (!resume && !overwrite && pt_outdir_has_run(so.output_dir)) {
        free(w);
        fprintf(stderr, "portatrain: error: %s: holds a previous run (metrics.jsonl, checkpoint-* or latest); pass "
                "--resume-from-checkpoint latest to continue it or --overwrite-output-dir to replace it\n",
                so.output_dir);  // the same line as the worker's refusal
        return 2;
    }
    struct stat before;
    const bool dir_existed = stat(so.output_dir, &before) == 0;
    if (pt_mkdir_p(so.output_dir) != 0) { free(w); return cli_fail(); }
    pt_fault_sort(so.faults, so.n_faults);
    so.resume = resume;
    const int rc = pt_supervise(&so, n, w);
    free(w);
    if (rc == 0) return 0;
    if (rc == PT_SUPERVISE_USAGE) {  // the worker printed its usage error
        // A worker that refused its arguments wrote nothing: take back the supervisor's own files
        // (and the directory it created) so the refused command leaves no trace, as train does.
        if (!pt_outdir_has_run(so.output_dir)) {
            char p[4096];
            snprintf(p, sizeof p, "%s/events.jsonl", so.output_dir);
            unlink(p);
            snprintf(p, sizeof p, "%s/recovery.json", so.output_dir);
            unlink(p);
            if (!dir_existed) rmdir(so.output_dir);  // fails, harmlessly, unless it is empty
        }
        return 2;
    }
    cli_fail();
    if (rc > PT_SUPERVISE_SIGNALED) {  // die of the same signal, so a shell or scheduler sees 128 + N
        const int sig = rc - PT_SUPERVISE_SIGNALED;
        signal(sig, SIG_DFL);
        raise(sig);
        return rc;
    }
    return rc == PT_SUPERVISE_NONFINITE ? 3 : 1;
}

// The flags into a (the table of train/train_args.c) and --inject's faults. -1: parsed; else the exit status.
static int parse(int argc, char **argv, pt_train_args *a, pt_fault *faults, int max_faults, int *n_faults) {
    pt_train_args_defaults(a);
    pt_argparse p;
    argp_init(&p, argc, argv);
    const char *o;
    while ((o = argp_next(&p))) {
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) { help(); return 0; }
        const pt_train_flag *f = pt_train_flag_find(o);
        if (f && !strcmp(f->name, "--supervise")) argp_flag(&p);  // =false (=true went to supervise)
        else if (f && !strcmp(f->name, "--inject")) {  // without --supervise: armed in this process
            if (pt_fault_parse(argp_value(&p), faults, max_faults, n_faults) != 0) return cli_fail();
        } else if (!f || f->kind == PT_FLAG_CLI) {  // the supervisor's options need --supervise
            return argp_unknown(&p, o);
        } else if (pt_train_flag_set(f, f->kind == PT_FLAG_BOOL ? argp_flag_value(&p) : argp_value(&p), a) != 0) {
            return cli_usage_error("train", "%s", pt_last_error());
        }
    }
    if (cli_raw_text(a->data_path)) return 2;
    if (pt_train_args_finish(a) != 0) return cli_usage_error("train", "%s", pt_last_error());
    return -1;
}

int cmd_train(int argc, char **argv) {
    bool supervised = false;
    for (int i = 1; i < argc; i++) {
        char name[32];
        const char *v;
        if (!strcmp(argv[i], "--supervise")) supervised = true;
        else if (argp_canonical_name(argv[i], name, sizeof name, &v) && !strcmp(name, "--supervise"))
            supervised = !v || argp_parse_bool("train", name, v);
    }
    if (supervised) return supervise(argc, argv);
    pt_train_args a;
    pt_fault faults[64];
    int n_faults = 0;
    const int prc = parse(argc, argv, &a, faults, 64, &n_faults);
    if (prc >= 0) return prc;
    if (n_faults) {
        if (pt_fault_resolve_random(faults, n_faults, a.max_steps, 1) != 0)
            return cli_usage_error("train", "%s", pt_last_error());
        for (int i = 0; i < n_faults; i++) {
            if (faults[i].kind == PT_FAULT_HANG)
                return cli_usage_error("train", "--inject hang needs --supervise (nothing would end the hang)");
            pt_fault_arm(&faults[i]);
        }
    }
    const int rc = pt_train(&a);
    if (rc == 0) return 0;
    if (!pt_train_error_reported_elsewhere()) cli_fail();
    return rc == PT_TRAIN_NONFINITE ? 3 : pt_train_usage_error() ? 2 : 1;
}
