#include "train/trainer.h"
#include "backend/backend.h"
#include "data/loader.h"
#include "io/hf_model.h"
#include "train/optim.h"
#include "train/schedule.h"
#include "util/common.h"
#include "util/fileio.h"
#include "util/json.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void pt_train_args_defaults(pt_train_args *a) {
    memset(a, 0, sizeof *a);
    a->backend = "cpu-ref";
    a->learning_rate = 5e-5;
    a->adam_beta1 = 0.9;
    a->adam_beta2 = 0.999;
    a->adam_epsilon = 1e-8;
    a->max_grad_norm = 1.0;
    a->per_device_train_batch_size = 8;
    a->gradient_accumulation_steps = 1;
    a->lr_scheduler_type = "linear";
    a->logging_steps = 10;
    a->seed = 42;
}

static cJSON *args_json(const pt_train_args *a) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "model", a->model_dir);
    cJSON_AddStringToObject(r, "data", a->data_path);
    cJSON_AddStringToObject(r, "output_dir", a->output_dir);
    cJSON_AddStringToObject(r, "backend", a->backend);
    cJSON_AddNumberToObject(r, "learning_rate", a->learning_rate);
    cJSON_AddNumberToObject(r, "weight_decay", a->weight_decay);
    cJSON_AddNumberToObject(r, "adam_beta1", a->adam_beta1);
    cJSON_AddNumberToObject(r, "adam_beta2", a->adam_beta2);
    cJSON_AddNumberToObject(r, "adam_epsilon", a->adam_epsilon);
    cJSON_AddNumberToObject(r, "max_grad_norm", a->max_grad_norm);
    cJSON_AddNumberToObject(r, "per_device_train_batch_size", a->per_device_train_batch_size);
    cJSON_AddNumberToObject(r, "gradient_accumulation_steps", a->gradient_accumulation_steps);
    cJSON_AddNumberToObject(r, "max_steps", (double)a->max_steps);
    cJSON_AddNumberToObject(r, "warmup_steps", (double)a->warmup_steps);
    cJSON_AddStringToObject(r, "lr_scheduler_type", a->lr_scheduler_type);
    cJSON_AddNumberToObject(r, "logging_steps", (double)a->logging_steps);
    cJSON_AddNumberToObject(r, "seed", (double)a->seed);
    cJSON_AddNumberToObject(r, "seq_len", a->seq_len);
    cJSON_AddBoolToObject(r, "shuffle", a->shuffle);
    cJSON_AddNumberToObject(r, "omp_threads", omp_get_max_threads());
    return r;
}

static int validate(const pt_train_args *a, pt_lr_schedule *sched) {
    if (!a->model_dir) { pt_set_error("--model is required"); return -1; }
    if (!a->data_path) { pt_set_error("--data is required"); return -1; }
    if (!a->output_dir) { pt_set_error("--output-dir is required"); return -1; }
    if (a->max_steps <= 0) { pt_set_error("--max-steps must be positive"); return -1; }
    if (a->seq_len <= 0) { pt_set_error("--seq-len must be positive"); return -1; }
    if (a->per_device_train_batch_size <= 0 || a->gradient_accumulation_steps <= 0) {
        pt_set_error("--per-device-train-batch-size and --gradient-accumulation-steps must be positive");
        return -1;
    }
    if (a->warmup_steps < 0 || a->max_grad_norm < 0 || a->learning_rate < 0 || a->weight_decay < 0 ||
        a->adam_epsilon <= 0 || a->adam_beta1 < 0 || a->adam_beta1 >= 1 || a->adam_beta2 < 0 || a->adam_beta2 >= 1) {
        pt_set_error("invalid optimizer hyperparameters (need lr, wd, warmup, max_grad_norm >= 0, eps > 0, betas in [0,1))");
        return -1;
    }
    if (pt_lr_schedule_parse(a->lr_scheduler_type, sched) != 0) {
        pt_set_error("--lr-scheduler-type '%s' unknown (constant, constant_with_warmup, linear, cosine)",
                     a->lr_scheduler_type);
        return -1;
    }
    if (*sched == LR_CONSTANT && a->warmup_steps > 0)
        pt_warn("--lr-scheduler-type constant ignores --warmup-steps (as in Hugging Face); use constant_with_warmup");
    return 0;
}

static void fmt_eta(double s, char *buf, size_t n) {
    if (!isfinite(s) || s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
}

int pt_train(const pt_train_args *a) {
    pt_lr_schedule sched;
    if (validate(a, &sched) != 0) return -1;
    if (pt_mkdir_p(a->output_dir) != 0) return -1;
    pt_backend *be = pt_backend_create(a->backend);
    if (!be) return -1;
    int rc = -1;
    qwen3_model model;
    memset(&model, 0, sizeof model);
    pt_adamw opt;
    memset(&opt, 0, sizeof opt);
    pt_loader *loader = NULL;
    FILE *metrics = NULL;
    int32_t *ids = NULL, *labels = NULL;
    char *mpath = NULL;

    if (hf_model_load(&model, a->model_dir, be) != 0) goto done;
    const int B = a->per_device_train_batch_size, T = a->seq_len, accum = a->gradient_accumulation_steps;
    if (T > model.cfg.max_position_embeddings) {
        pt_set_error("--seq-len %d exceeds the model's max_position_embeddings %d", T,
                     model.cfg.max_position_embeddings);
        goto done;
    }
    pt_loader_config lc = {.data_path = a->data_path, .seq_len = T, .rows_per_step = B * accum, .dp_rank = 0,
                           .dp_world = 1, .mode = PT_LOADER_PACKED, .shuffle = a->shuffle, .seed = a->seed,
                           .model_vocab = (uint32_t)model.cfg.vocab_size};
    loader = pt_loader_open(&lc);
    if (!loader) goto done;
    qwen3_alloc_grads(&model);
    if (qwen3_alloc_activations(&model, B, T) != 0) goto done;
    pt_adamw_init(&opt, &model);

    {
        cJSON *aj = args_json(a);
        char *p = pt_path_join(a->output_dir, "train_args.json");
        int wrc = pt_json_write_file(p, aj);
        free(p);
        cJSON_Delete(aj);
        if (wrc) goto done;
    }
    mpath = pt_path_join(a->output_dir, "metrics.jsonl");
    metrics = fopen(mpath, "w");
    if (!metrics) {
        pt_set_error("%s: cannot open for writing: %s", mpath, strerror(errno));
        goto done;
    }
    const size_t rows = (size_t)B * accum;
    ids = pt_malloc(sizeof(int32_t) * rows * T);
    labels = pt_malloc(sizeof(int32_t) * rows * T);
    const bool tty = isatty(2) && !a->quiet;
    const double flops_tok = qwen3_train_flops_per_token(&model.cfg, T);
    if (!a->quiet)
        pt_info("training %s: %zu parameters, backend %s, %d threads, batch %d x %d accumulation x %d tokens, "
                "%ld steps", a->model_dir, model.num_params, be->name, omp_get_max_threads(), B, accum, T,
                a->max_steps);
    const double t_start = pt_now_s();
    double loss_first = NAN, loss_last = NAN, loss_min = INFINITY;
    for (long step = 0; step < a->max_steps; step++) {
        const double t0 = pt_now_s();
        int row_len = T;
        if (pt_loader_batch(loader, (uint64_t)step, ids, labels, &row_len) != 0) goto done;
        long step_targets = 0;
        for (size_t i = 0; i < rows * (size_t)row_len; i++) step_targets += labels[i] != -100;
        be->zero(be, model.grads, sizeof(real_t) * model.num_params);
        double loss_sum = 0;
        const float scale = step_targets > 0 ? (float)(1.0 / (double)step_targets) : 0.0f;
        for (int mb = 0; mb < accum; mb++) {
            double ls = 0;
            int nt = 0;
            size_t off = (size_t)mb * B * row_len;
            if (qwen3_forward_backward(&model, ids + off, labels + off, B, row_len, scale, &ls, &nt) != 0)
                goto done;
            loss_sum += ls;
        }
        const double loss = step_targets > 0 ? loss_sum / (double)step_targets : 0.0;
        const double gnorm = pt_grad_global_norm(&model);
        if (!isfinite(loss) || !isfinite(gnorm)) {
            pt_set_error("step %ld: non-finite loss (%g) or gradient norm (%g); stopping before the update", step + 1,
                         loss, gnorm);
            goto done;
        }
        pt_clip_grads(&model, gnorm, a->max_grad_norm);
        const double lr = a->learning_rate * pt_lr_multiplier(sched, step, a->warmup_steps, a->max_steps);
        pt_adamw_hparams h = {(float)lr, (float)a->adam_beta1, (float)a->adam_beta2, (float)a->adam_epsilon,
                              (float)a->weight_decay};
        pt_adamw_step(&opt, &h);
        be->synchronize(be);
        const double dt = pt_now_s() - t0;
        const long tokens = (long)(rows * (size_t)row_len);
        fprintf(metrics,
                "{\"step\": %ld, \"loss\": %.17g, \"grad_norm\": %.17g, \"lr\": %.17g, \"tokens\": %ld, "
                "\"step_time_s\": %.6f, \"tokens_per_s\": %.3f, \"mfu_flops_per_s\": %.6g}\n",
                step + 1, loss, gnorm, lr, tokens, dt, tokens / dt, flops_tok * tokens / dt);
        fflush(metrics);
        if (step == 0) loss_first = loss;
        loss_last = loss;
        if (loss < loss_min) loss_min = loss;
        const double elapsed = pt_now_s() - t_start;
        const double eta = elapsed / (step + 1) * (a->max_steps - step - 1);
        char etab[32];
        fmt_eta(eta, etab, sizeof etab);
        bool log_line = !a->quiet && (a->logging_steps > 0 && ((step + 1) % a->logging_steps == 0 ||
                                                               step + 1 == a->max_steps || step == 0));
        if (log_line) {
            fprintf(stderr, "%sstep %ld/%ld  loss %.4f  grad_norm %.3f  lr %.3e  %.0f tok/s  ETA %s\n",
                    tty ? "\r\033[K" : "", step + 1, a->max_steps, loss, gnorm, lr, tokens / dt, etab);
        } else if (tty) {
            fprintf(stderr, "\r\033[Kstep %ld/%ld  loss %.4f  %.0f tok/s  ETA %s", step + 1, a->max_steps, loss,
                    tokens / dt, etab);
        }
    }
    if (tty) fprintf(stderr, "\r\033[K");
    if (hf_model_save(&model, a->output_dir, "float32", 0) != 0) goto done;
    if (!a->quiet)
        pt_info("done: loss %.4f -> %.4f (min %.4f) in %.1f s; model saved to %s", loss_first, loss_last, loss_min,
                pt_now_s() - t_start, a->output_dir);
    rc = 0;
done:
    if (metrics) fclose(metrics);
    free(mpath);
    free(ids);
    free(labels);
    pt_loader_free(loader);
    pt_adamw_free(&opt);
    qwen3_free(&model);
    pt_backend_destroy(be);
    return rc;
}
