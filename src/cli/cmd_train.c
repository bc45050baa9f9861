// portatrain train: Hugging Face TrainingArguments-style flags.
#include "cli/cli.h"
#include "harness/supervisor.h"
#include "train/faults.h"
#include "train/outdir.h"
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
           "       (or --num-train-epochs E instead of --max-steps)\n\n"
           "  --backend NAME                     cpu-ref (default), cpu, opencl[:PLATFORM[:DEVICE]], cuda[:DEVICE],\n"
           "                                     cuda-sim (portatrain devices)\n"
           "  --learning-rate F                  5e-5\n"
           "  --per-device-train-batch-size N    8\n"
           "  --gradient-accumulation-steps N    1\n"
           "  --num-train-epochs E               train E passes over the data (a float; ceil(E x steps per\n"
           "                                     epoch) steps) when --max-steps is not given\n"
           "  --warmup-steps N                   0; a float below 1 is a ratio of the total steps, ceil(N x\n"
           "                                     steps) (transformers 5; --warmup-ratio R: transformers 4's name)\n"
           "  --lr-scheduler-type S              linear | cosine | constant | constant_with_warmup |\n"
           "                                     cosine_with_restarts | polynomial | inverse_sqrt |\n"
           "                                     cosine_with_min_lr | cosine_warmup_with_min_lr |\n"
           "                                     warmup_stable_decay (HF's formulas)\n"
           "  --lr-scheduler-kwargs JSON         HF's lr_scheduler_kwargs, e.g. '{\"min_lr_rate\": 0.1}',\n"
           "                                     '{\"num_decay_steps\": 100, \"decay_type\": \"linear\"}'\n"
           "  --weight-decay F                   0 (never applied to norm weights)\n"
           "  --adam-beta1 F --adam-beta2 F      0.9, 0.999\n"
           "  --adam-epsilon F                   1e-8\n"
           "  --max-grad-norm F                  1.0 (0 disables clipping)\n"
           "  --seed N                           42\n"
           "  --optim adamw_torch                the optimizer (AdamW; adamw_torch_fused is the same math)\n"
           "  --report-to none                   metrics go to OUTPUT/metrics.jsonl (no other trackers)\n"
           "  --logging-steps N                  progress line every N steps (10), its loss the mean since the\n"
           "                                     previous line, as HF logs it (metrics.jsonl: every step's)\n"
           "  --shuffle                          shuffle rows with a seeded permutation per epoch\n"
           "  --data-mode packed|padded          packed windows (default) or one document per row\n"
           "  --epoch-boundary hf|wrap           hf (default): as HF's Trainer, each epoch starts at its first\n"
           "                                     row and ends with a short last step; wrap: full steps that may\n"
           "                                     straddle epochs (runs before this option). A resume takes the\n"
           "                                     checkpoint's unless given\n"
           "  --dataloader-drop-last             HF's: drop each epoch's incomplete last micro-batch (needs hf)\n"
           "  --save-steps N|auto                checkpoint every N steps (0: never); auto: a probe save after\n"
           "                                     5 steps, then Daly's optimum interval for --mtbf-hours\n"
           "  --save-strategy S                  HF's: no (never) | steps (every --save-steps; 500 unless\n"
           "                                     given) | epoch (at the end of each pass over the data)\n"
           "  --mtbf-hours H                     mean time between failures for --save-steps auto\n"
           "  --save-total-limit K               keep the newest K checkpoints (0: all)\n"
           "  --resume-from-checkpoint DIR|latest  continue bit-exactly from a checkpoint\n"
           "  --overwrite-output-dir             replace a previous run in --output-dir (its metrics, checkpoints,\n"
           "                                     latest, model and run files; other files are kept). Without it\n"
           "                                     (or --resume-from-checkpoint), such a directory is refused (exit 2)\n"
           "  --quiet                            no progress output\n"
           "  --nan-policy stop|skip|rollback    on a non-finite loss or grad norm (checked every step before\n"
           "                                     the update): stop with exit 3 (default), skip the batch (no\n"
           "                                     update, logged \"skipped\": true), or restore the newest valid\n"
           "                                     checkpoint and replay, skipping that batch if it fails again\n"
           "  --nan-max-count N                  skip/rollback handle at most N non-finite steps, then stop (3)\n"
           "  --tp N --fsdp N --dp N             distributed layout under mpirun (docs/DISTRIBUTED.md): tensor\n"
           "                                     parallel, fully sharded and plain data parallel degrees; their\n"
           "                                     product is the world size (unset ones take what is left; with\n"
           "                                     none given, data parallel over all ranks). The batch flag stays\n"
           "                                     per device: the global batch is batch x accumulation x fsdp x dp\n"
           "  --mesh-order LIST                  rank placement, innermost dimension first (tp,fsdp,dp)\n"
           "  --activation-checkpointing P       none (default) | full (each layer recomputed in backward) |\n"
           "                                     selective[:every=N] (every Nth layer, 2) | op (keep matmul and\n"
           "                                     attention outputs, recompute norms, RoPE, SwiGLU); same results.\n"
           "                                     --gradient-checkpointing (HF's flag): full\n"
           "  --precision fp32|bf16              bf16: bf16 weights and activations where HF's bf16 Qwen3 has\n"
           "                                     them; fp32 accumulation, norm statistics, softmax, loss, master\n"
           "                                     weights and AdamW state (docs/PRECISION.md). --bf16: the same\n"
           "  --tf32                             fp32 matmuls on TF32 tensor cores (cuda; other backends ignore\n"
           "                                     it): faster, ~1e-3 relative per product (docs/CUDA.md)\n"
           "  --supervise                        run as a supervised worker; restart after a failure\n"
           "                                     (SIGINT/SIGTERM/SIGHUP stop the worker, then the supervisor)\n"
           "  --max-restarts N                   supervisor retries before giving up (3)\n"
           "  --restart-backoff S                first restart delay in seconds, doubled each retry (0.1)\n"
           "  --launcher \"mpirun -np N ...\"      supervise an MPI job: the worker is this command + portatrain train\n"
           "  --hang-timeout S                   no step progress for S seconds = hung worker (60)\n"
           "  --startup-timeout S                an attempt's load + restore before its first step, and each\n"
           "                                     checkpoint or final-model save (600)\n"
           "  --inject SPEC[,SPEC...]            test-only faults, each fires once (docs/RECOVERY.md):\n"
           "                                     kill:step=S[:phase=save][:rank=R], hang:step=S[:rank=R], nan:step=S[:target=grad\n"
           "                                     |weights], corrupt-checkpoint:step=S, enospc:step=S; S may be\n"
           "                                     random (PT_INJECT_SEED); hang needs --supervise\n\n"
           "Options may also be spelled with underscores, as Hugging Face's TrainingArguments are\n"
           "(--learning_rate 3e-4 --per_device_train_batch_size 4).\n"
           "Writes OUTPUT/metrics.jsonl (one JSON object per step), OUTPUT/train_args.json and the final\n"
           "model (config.json + model.safetensors) into OUTPUT.\n"
           "Exit status: 0 done, 1 error (a failed checkpoint save keeps the previous one), 2 usage,\n"
           "3 stopped on a non-finite loss/gradient or refused to save non-finite weights (not retried by\n"
           "--supervise).\n");
}

// --supervise: strip the supervisor's flags and hand the rest to pt_supervise,
// which re-executes `train` with them as the worker.
static int supervise(int argc, char **argv) {
    pt_supervise_opts so = {.max_restarts = 3, .restart_backoff = 0.1, .hang_timeout = 60, .startup_timeout = 600};
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
    pt_train_args_defaults(&a);
    pt_fault faults[64];
    int n_faults = 0;
    const char *save_strategy = NULL;
    bool save_steps_given = false;
    pt_argparse p;
    argp_init(&p, argc, argv);
    const char *o;
    while ((o = argp_next(&p))) {
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) { help(); return 0; }
        else if (!strcmp(o, "--supervise")) argp_flag(&p);  // =false (=true went to supervise above)
        else if (!strcmp(o, "--model") || !strcmp(o, "--model-name-or-path")) a.model_dir = argp_value(&p);
        else if (!strcmp(o, "--data")) a.data_path = argp_value(&p);
        else if (!strcmp(o, "--output-dir")) a.output_dir = argp_value(&p);
        else if (!strcmp(o, "--backend")) a.backend = argp_value(&p);
        else if (!strcmp(o, "--learning-rate")) a.learning_rate = argp_double_min(&p, 0);
        else if (!strcmp(o, "--weight-decay")) a.weight_decay = argp_double(&p);
        else if (!strcmp(o, "--adam-beta1")) a.adam_beta1 = argp_double(&p);
        else if (!strcmp(o, "--adam-beta2")) a.adam_beta2 = argp_double(&p);
        else if (!strcmp(o, "--adam-epsilon")) a.adam_epsilon = argp_double(&p);
        else if (!strcmp(o, "--max-grad-norm")) a.max_grad_norm = argp_double(&p);
        else if (!strcmp(o, "--per-device-train-batch-size")) a.per_device_train_batch_size = (int)argp_int_range(&p, 1, INT_MAX);
        else if (!strcmp(o, "--gradient-accumulation-steps")) a.gradient_accumulation_steps = (int)argp_int_range(&p, 1, INT_MAX);
        else if (!strcmp(o, "--max-steps")) a.max_steps = argp_int_range(&p, 1, LONG_MAX);
        else if (!strcmp(o, "--num-train-epochs")) {
            if ((a.num_train_epochs = argp_double_min(&p, 0)) <= 0)
                return cli_usage_error("train", "--num-train-epochs must be > 0");
        }
        else if (!strcmp(o, "--warmup-steps")) {  // transformers 5: a float below 1 is a ratio of the total
            const double w = argp_double_min(&p, 0);
            if (w >= 1e15) return cli_usage_error("train", "--warmup-steps %g is too large", w);
            a.warmup_steps = w < 1 ? 0 : (long)w;  // HF: int(warmup_steps)
            if (w > 0 && w < 1) a.warmup_ratio = w;
        }
        else if (!strcmp(o, "--warmup-ratio")) {  // transformers 4's name (a --warmup-steps >= 1 wins, as there)
            if ((a.warmup_ratio = argp_double_min(&p, 0)) > 1)
                return cli_usage_error("train", "--warmup-ratio must be in [0, 1], got %g", a.warmup_ratio);
        }
        else if (!strcmp(o, "--lr-scheduler-type")) a.lr_scheduler_type = argp_value(&p);
        else if (!strcmp(o, "--lr-scheduler-kwargs")) a.lr_scheduler_kwargs = argp_value(&p);
        else if (!strcmp(o, "--logging-steps")) a.logging_steps = argp_int_range(&p, 0, LONG_MAX);
        else if (!strcmp(o, "--seed")) a.seed = (uint64_t)argp_int(&p);
        else if (!strcmp(o, "--seq-len")) a.seq_len = (int)argp_int_range(&p, 1, INT_MAX);
        else if (!strcmp(o, "--quiet")) a.quiet = argp_flag(&p);
        else if (!strcmp(o, "--tp")) a.tp = (int)argp_int_range(&p, 1, 65536);
        else if (!strcmp(o, "--fsdp")) a.fsdp = (int)argp_int_range(&p, 1, 65536);
        else if (!strcmp(o, "--dp")) a.dp = (int)argp_int_range(&p, 1, 65536);
        else if (!strcmp(o, "--mesh-order")) a.mesh_order = argp_value(&p);
        else if (!strcmp(o, "--activation-checkpointing")) a.activation_checkpointing = argp_value(&p);
        else if (!strcmp(o, "--gradient-checkpointing"))  // HF TrainingArguments' name: every layer recomputed
            a.activation_checkpointing = argp_flag(&p) ? "full" : "none";
        else if (!strcmp(o, "--precision")) a.precision = argp_value(&p);
        else if (!strcmp(o, "--bf16")) a.precision = argp_flag(&p) ? "bf16" : "fp32";
        else if (!strcmp(o, "--tf32")) a.tf32 = argp_flag(&p);
        else if (!strcmp(o, "--shuffle")) a.shuffle = argp_flag(&p);
        else if (!strcmp(o, "--epoch-boundary")) {
            const char *v = argp_value(&p);
            if (!strcmp(v, "hf")) a.epoch_boundary = PT_EPOCHS_HF;
            else if (!strcmp(v, "wrap")) a.epoch_boundary = PT_EPOCHS_WRAP;
            else return cli_usage_error("train", "--epoch-boundary must be hf or wrap");
        }
        else if (!strcmp(o, "--dataloader-drop-last")) a.dataloader_drop_last = argp_flag(&p) ? 1 : 0;
        else if (!strcmp(o, "--data-mode")) {
            const char *v = argp_value(&p);
            if (!strcmp(v, "padded")) a.padded = true;
            else if (strcmp(v, "packed")) return cli_usage_error("train", "--data-mode must be packed or padded");
        }
        else if (!strcmp(o, "--save-steps")) {
            save_steps_given = true;
            const char *v = argp_value(&p);
            char *end;
            if (!strcmp(v, "auto")) a.save_steps = PT_SAVE_STEPS_AUTO;
            else if ((a.save_steps = strtol(v, &end, 10)) < 0 || *end || end == v)
                return cli_usage_error("train", "--save-steps must be a number >= 0 or auto (got '%s')", v);
        }
        else if (!strcmp(o, "--save-strategy")) {  // HF's: no | steps (every --save-steps, 500 if not given) | epoch
            save_strategy = argp_value(&p);
            if (strcmp(save_strategy, "no") && strcmp(save_strategy, "steps") && strcmp(save_strategy, "epoch"))
                return cli_usage_error("train", "--save-strategy must be no, steps or epoch (got '%s'%s)", save_strategy,
                                       !strcmp(save_strategy, "best") ? ": best needs evaluation during training" : "");
        }
        else if (!strcmp(o, "--optim")) {  // HF's optimizer names for torch.optim.AdamW: the AdamW here
            const char *v = argp_value(&p);
            if (strcmp(v, "adamw_torch") && strcmp(v, "adamw_torch_fused"))
                return cli_usage_error("train", "--optim %s: only AdamW is implemented (adamw_torch, adamw_torch_fused)", v);
        }
        else if (!strcmp(o, "--report-to")) {  // HF's experiment trackers: metrics go to OUTPUT/metrics.jsonl only
            const char *v = argp_value(&p);
            if (strcmp(v, "none"))
                return cli_usage_error("train", "--report-to %s: no trackers here; metrics go to OUTPUT/metrics.jsonl "
                                       "(--report-to none is accepted)", v);
        }
        else if (!strcmp(o, "--mtbf-hours")) a.mtbf_hours = argp_double_min(&p, 0);
        else if (!strcmp(o, "--save-total-limit")) a.save_total_limit = (int)argp_int_range(&p, 0, INT_MAX);
        else if (!strcmp(o, "--resume-from-checkpoint")) a.resume_from_checkpoint = argp_value(&p);
        else if (!strcmp(o, "--overwrite-output-dir")) a.overwrite_output_dir = argp_flag(&p);
        else if (!strcmp(o, "--nan-policy")) {
            const char *v = argp_value(&p);
            if (!strcmp(v, "stop")) a.nan_policy = PT_NAN_STOP;
            else if (!strcmp(v, "skip")) a.nan_policy = PT_NAN_SKIP;
            else if (!strcmp(v, "rollback")) a.nan_policy = PT_NAN_ROLLBACK;
            else return cli_usage_error("train", "--nan-policy must be stop, skip or rollback");
        }
        else if (!strcmp(o, "--nan-max-count")) {
            a.nan_max_count = (int)argp_int_range(&p, 0, INT_MAX);
        }
        else if (!strcmp(o, "--inject")) {  // without --supervise: armed in this process
            if (pt_fault_parse(argp_value(&p), faults, 64, &n_faults) != 0) return cli_fail();
        }
        else return argp_unknown(&p, o);
    }
    if (save_strategy && !strcmp(save_strategy, "no")) a.save_steps = 0;
    else if (save_strategy && !strcmp(save_strategy, "epoch")) a.save_each_epoch = true;
    else if (save_strategy && !save_steps_given) a.save_steps = 500;  // "steps": HF's default save_steps
    if (a.precision && strcmp(a.precision, "fp32") && strcmp(a.precision, "bf16"))
        return cli_usage_error("train", "--precision must be fp32 or bf16 (got '%s')", a.precision);
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
