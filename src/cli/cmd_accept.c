// portatrain accept: the acceptance suite (library: src/harness/accept.c).
#include "cli/cli.h"
#include "util/sysinfo.h"
#include "harness/accept.h"
#include "harness/accept_evidence.h"
#include "train/train_args.h"
#include "util/common.h"
#include "util/fileio.h"
#include "util/json.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The recipe flags, from train's table: a flag added there is listed here too.
static void recipe_flags_help(void) {
    int col = 0;
    const pt_train_flag *f;
    for (int i = 0; (f = pt_train_recipe_flag(i)); i++) {
        const char *u = f->usage ? f->usage : f->name;
        if (col + (int)strlen(u) + 2 > 100) { printf("\n"); col = 0; }
        col += printf("  %s", u);
    }
    if (col) printf("\n");
}

static void help(void) {
    printf("usage: portatrain accept --baseline SPEC --candidate SPEC [options]\n\n"
           "SPEC = backend[:fp32|:bf16][:tf32][:tp=N][:dp=N][:fsdp=N], e.g. cpu-ref:fp32, cpu:fp32, cpu:bf16,\n"
           "cuda:fp32:tf32 (tf32: train --tf32, judged with the bf16 profile)\n"
           "or SPEC = evidence:DIR on both sides: platforms portatrain does not run, judged from what their trainers\n"
           "left in DIR (evidence.json: log, config, checkpoints, continuation, restart, platform record); a section\n"
           "without its evidence is not shown and blocks ACCEPTED unless --waive referee,portability,recovery,cost\n"
           "(bf16: --precision bf16 runs, compared with the bf16 profile; docs/PRECISION.md).\n"
           "tp/dp/fsdp: the platform's runs are MPI jobs of tp x dp x fsdp ranks (--launcher), on the same global\n"
           "batch: --per-device-train-batch-size is split over the fsdp x dp data ranks.\n"
           "Runs baseline and candidate from the same frozen inputs, compares them, resumes each from the\n"
           "other's mid-run checkpoint, kills the candidate's worker at a seeded random step and measures the\n"
           "recovery, prices every phase, and writes OUTPUT/report.{html,md,json}.\n\n"
           "  --output-dir DIR              report directory (out/accept)\n"
           "  --steps N                     training steps per run (100)\n"
           "  --checkpoint-step M           mid-run checkpoint for portability (steps/2)\n"
           "  --recovery-save-steps R       checkpoint interval of the recovery run (steps/4)\n"
           "  --model DIR                   initial HF model dir (default: init --config with --init-seed)\n"
           "  --config FILE                 HF Qwen3 config.json for the init (configs/tiny.json)\n"
           "  --init-seed S                 seed of the initial weights (42)\n"
           "  --tokenizer-dir DIR           tokenizer.json to ship with the model (data/demo/qwen3-tokenizer)\n"
           "  --train-data SHARD --eval-data SHARD   (data/demo/shards/train, data/demo/shards/eval)\n"
           "  --baseline-run DIR            reuse a recorded baseline run; its frozen inputs must match\n"
           "  --price-table FILE            prices per device-hour with source and date (configs/prices.json)\n"
           "  --launcher CMD                starts a layout's ranks: CMD -np N portatrain train ... (mpirun;\n"
           "                                e.g. 'mpirun --oversubscribe', 'mpirun --hostfile hosts')\n"
           "  --profile exact|fp32|bf16     tolerance profile (default: exact for the same platform,\n"
           "                                else bf16 when a side runs bf16 or TF32, else fp32)\n"
           "  --determinism auto|bitwise|envelope  recovery rule: bitwise, or within the candidate's measured\n"
           "                                run-to-run noise (auto: bitwise only when two same-seed runs are)\n"
           "  --seq-len T (64)  --per-device-train-batch-size B (4)  --learning-rate F (3e-3)\n"
           "  --warmup-steps N (20)  --weight-decay F (0.1)  --max-grad-norm F (1.0)  --seed N (42)\n"
           "  --eval-batches N              batches of 8 windows in the eval (16)\n"
           "  --seeds K                     K seeds per side (1): seed i trains with --seed SEED+i from init\n"
           "                                --seed INIT_SEED+i; judged by steps to target (one-sided Welch\n"
           "                                t-test) and per-step envelopes of the baseline seeds\n"
           "The training recipe, as train's flags (default: a --baseline-run's recorded values, else train's\n"
           "defaults with --lr-scheduler-type cosine; a value the recorded baseline contradicts is refused):\n");
    recipe_flags_help();
    printf("  --quiet                       only the verdict and the report path\n\n"
           "Exit status: 0 ACCEPTED, 1 REJECTED, 2 REFUSED (frozen inputs differ) or unusable input.\n"
           "See docs/ACCEPT.md.\n");
}

// accept's own training flags: train's, parsed by train's table (its messages, its ranges) into t.
static const char *const TRAIN_FLAGS[] = {"--seq-len", "--per-device-train-batch-size", "--learning-rate",
                                          "--warmup-steps", "--weight-decay", "--max-grad-norm", "--seed"};

static bool is_train_flag(const char *a) {
    for (size_t i = 0; i < sizeof TRAIN_FLAGS / sizeof *TRAIN_FLAGS; i++)
        if (!strcmp(a, TRAIN_FLAGS[i])) return true;
    return false;
}

// o's training values as train's arguments, and back.
static void to_train(const pt_accept_opts *o, pt_train_args *t) {
    pt_train_args_defaults(t);
    t->seq_len = o->seq_len, t->per_device_train_batch_size = o->batch, t->learning_rate = o->learning_rate;
    t->warmup_steps = o->warmup_steps, t->weight_decay = o->weight_decay, t->max_grad_norm = o->max_grad_norm;
    t->seed = o->seed;
}

static void from_train(const pt_train_args *t, pt_accept_opts *o) {
    o->seq_len = t->seq_len, o->batch = t->per_device_train_batch_size, o->learning_rate = t->learning_rate;
    o->warmup_steps = t->warmup_steps, o->weight_decay = t->weight_decay, o->max_grad_norm = t->max_grad_norm;
    o->seed = t->seed;
}

// A train flag's value (v; a boolean flag: NULL for the bare flag) into t and, for a recipe flag, into
// o->recipe as train_args.json records it. 0, or -1 with train's error.
static int train_flag(const pt_train_flag *f, const char *v, pt_train_args *t, pt_accept_opts *o) {
    if (pt_train_flag_set(f, v, t) != 0) return -1;
    if (!strcmp(f->name, "--warmup-steps") && t->warmup_ratio > 0) {  // runs take whole steps
        pt_set_error("option %s expects an integer, got '%s'", f->name, v);
        return -1;
    }
    if (!f->recipe) return 0;
    if (!o->recipe) o->recipe = cJSON_CreateObject();
    cJSON_DeleteItemFromObjectCaseSensitive(o->recipe, f->key);  // given twice: the last one, as other flags
    cJSON_AddItemToObject(o->recipe, f->key, pt_train_flag_json(f, t));
    return 0;
}

// -1: parsed; else the exit status.
static int parse(int argc, char **argv, pt_accept_opts *o, const char **base, const char **cand, long *ckpt,
                 long *rsave, const char **waive) {
    pt_train_args t;
    to_train(o, &t);
    pt_argparse p;
    argp_init(&p, argc, argv);
    const char *a;
    const pt_train_flag *f;
    while ((a = argp_next(&p))) {
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { help(); return 0; }
        else if (!strcmp(a, "--baseline")) *base = argp_value(&p);
        else if (!strcmp(a, "--candidate")) *cand = argp_value(&p);
        else if (!strcmp(a, "--waive")) *waive = argp_value(&p);
        else if (!strcmp(a, "--output-dir")) o->output_dir = argp_value(&p);
        else if (!strcmp(a, "--steps") || !strcmp(a, "--max-steps")) o->steps = argp_int(&p);
        else if (!strcmp(a, "--checkpoint-step")) *ckpt = argp_int(&p);
        else if (!strcmp(a, "--recovery-save-steps")) *rsave = argp_int(&p);
        else if (!strcmp(a, "--model")) o->model_dir = argp_value(&p);
        else if (!strcmp(a, "--config")) o->config_path = argp_value(&p);
        else if (!strcmp(a, "--init-seed")) o->init_seed = (uint64_t)argp_int(&p);
        else if (!strcmp(a, "--tokenizer-dir")) o->tokenizer_dir = argp_value(&p);
        else if (!strcmp(a, "--train-data")) o->train_data = argp_value(&p);
        else if (!strcmp(a, "--eval-data")) o->eval_data = argp_value(&p);
        else if (!strcmp(a, "--baseline-run")) o->baseline_run = argp_value(&p);
        else if (!strcmp(a, "--price-table")) o->price_table = argp_value(&p);
        else if (!strcmp(a, "--launcher")) o->launcher = argp_value(&p);
        else if (!strcmp(a, "--profile")) o->profile = argp_value(&p);
        else if (!strcmp(a, "--seeds")) o->seeds = (int)argp_int_range(&p, 1, 64);
        else if (!strcmp(a, "--determinism")) o->determinism = argp_value(&p);
        else if (!strcmp(a, "--eval-batches")) o->eval_batches = (int)argp_int_range(&p, 1, INT_MAX);
        else if ((f = pt_train_flag_find(a)) && (f->recipe || is_train_flag(a))) {
            if (train_flag(f, f->kind == PT_FLAG_BOOL ? argp_flag_value(&p) : argp_value(&p), &t, o) != 0)
                return cli_usage_error("accept", "%s", pt_last_error());
        }
        else if (!strcmp(a, "--test-fault")) o->test_fault = argp_value(&p);  // test-only, see docs/ACCEPT.md
        else if (!strcmp(a, "--quiet")) o->quiet = argp_flag(&p);
        else return argp_unknown(&p, a);
    }
    if (cli_raw_text(o->train_data) || cli_raw_text(o->eval_data)) return 2;
    from_train(&t, o);
    return -1;
}

// A default input (the repository's configs/ and data/demo/) that is not under the current directory is looked
// for in the tree of this binary; missing there too, the run is refused naming the flag to pass.
static int locate_default(const char **path, const char *def, const char *flag, char **owned) {
    if (*path != def || pt_file_exists(def)) return 0;
    *owned = pt_install_path(def);
    if (*owned) { *path = *owned; return 0; }
    return cli_usage_error("accept", "%s: the default %s is neither under the current directory nor beside the "
                           "binary; pass %s", flag, def, flag);
}

static int locate_defaults(pt_accept_opts *o, const pt_accept_opts *d, char *owned[5]) {
    int rc = locate_default(&o->price_table, d->price_table, "--price-table", &owned[0]);
    if (!rc) rc = locate_default(&o->train_data, d->train_data, "--train-data", &owned[1]);
    if (!rc) rc = locate_default(&o->eval_data, d->eval_data, "--eval-data", &owned[2]);
    if (!rc && !o->model_dir) rc = locate_default(&o->config_path, d->config_path, "--config", &owned[3]);
    if (!rc && !o->model_dir) rc = locate_default(&o->tokenizer_dir, d->tokenizer_dir, "--tokenizer-dir", &owned[4]);
    return rc;
}

int cmd_accept(int argc, char **argv) {
    pt_accept_opts o;
    pt_accept_defaults(&o);
    const char *base = NULL, *cand = NULL, *waive = NULL;
    long ckpt = 0, rsave = 0;
    int rc = parse(argc, argv, &o, &base, &cand, &ckpt, &rsave, &waive);
    if (rc >= 0) {  // --help or a usage error
        cJSON_Delete(o.recipe);
        return rc;
    }
    pt_accept_opts defaults;
    pt_accept_defaults(&defaults);
    char *owned[5] = {0};
    if (!base || !cand) rc = cli_usage_error("accept", "--baseline SPEC and --candidate SPEC are required");
    else if (!acc_ev_dir_of(base) != !acc_ev_dir_of(cand))
        rc = cli_usage_error("accept", "evidence:DIR needs evidence on both sides (record the other platform's run "
                             "as an evidence directory too; docs/ACCEPT.md)");
    else if (acc_ev_dir_of(base)) {
        rc = pt_accept_evidence(&o, base, cand, waive);
        if (rc == 2 && pt_has_error()) fprintf(stderr, "portatrain: error: %s\n", pt_last_error());
    } else if (waive) rc = cli_usage_error("accept", "--waive is for evidence:DIR platforms");
    else if (pt_platform_parse(base, &o.baseline) != 0 || pt_platform_parse(cand, &o.candidate) != 0) {
        fprintf(stderr, "portatrain: error: %s\n", pt_last_error());
        rc = 2;
    } else if (o.profile && strcmp(o.profile, "exact") && strcmp(o.profile, "fp32") && strcmp(o.profile, "bf16"))
        rc = cli_usage_error("accept", "--profile must be exact, fp32 or bf16");
    else if (o.eval_batches < 1 || o.seq_len < 1 || o.batch < 1)
        rc = cli_usage_error("accept", "--eval-batches, --seq-len and --per-device-train-batch-size must be positive");
    else if ((rc = locate_defaults(&o, &defaults, owned)) != 0) {}
    else {
        o.checkpoint_step = ckpt ? ckpt : o.steps / 2;
        o.recovery_save_steps = rsave ? rsave : (o.steps / 4 > 0 ? o.steps / 4 : 1);
        rc = pt_accept(&o);
        if (rc == 2 && pt_has_error()) fprintf(stderr, "portatrain: error: %s\n", pt_last_error());
    }
    cJSON_Delete(o.recipe);
    for (int i = 0; i < 5; i++) free(owned[i]);
    return rc;
}
