// The single-process runtime: a world of one. The model holds every
// parameter, gradient and moment; the data-parallel sums are the identity.
#include "io/hf_model.h"
#include "train/faults.h"
#include "train/trainer_ctx.h"
#include "util/common.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

static int single_start(pt_trainer *t) {
    t->rank = 0;
    return 0;
}

static int single_agree(pt_trainer *t, int ok, const pt_run_hashes *inputs) {
    (void)t, (void)inputs;
    return ok ? 0 : -1;  // the error is this process's own
}

static int single_output_dir_shared(pt_trainer *t) {
    (void)t;
    return 0;
}

static int single_load_model(pt_trainer *t) {
    // without --config, MODEL/config.json alone (train does not look for a TorchTitan run's assets)
    const pt_train_args *a = &t->a;
    const int rc = a->model_config ? hf_model_load_with_config(&t->model, a->model_dir, a->model_config, t->be)
                                   : hf_model_load(&t->model, a->model_dir, t->be);
    if (rc != 0 || pt_trainer_check_model(t) != 0) return -1;
    pt_hash_model(&t->model, t->hashes.config_sha256, t->hashes.initial_weights_sha256);
    t->mdl = &t->model;
    t->gcfg = &t->model.cfg;
    t->data_world = 1;
    t->data_rank = 0;
    return 0;
}

static int single_init_train_state(pt_trainer *t) {
    qwen3_alloc_grads(t->mdl);
    pt_adamw_init(&t->opt, t->mdl);
    return 0;
}

static void single_banner(pt_trainer *t) {
    const pt_train_args *a = &t->a;
    pt_info("training %s: %zu parameters, backend %s, %d threads, batch %d x %d accumulation x %d tokens, %ld steps",
            a->model_dir, t->mdl->num_params, t->be->name, omp_get_max_threads(), a->per_device_train_batch_size,
            a->gradient_accumulation_steps, a->seq_len, a->max_steps);
}

static void single_data_sum(pt_trainer *t, double *v, int n) { (void)t, (void)v, (void)n; }

static void single_zero_grads(pt_trainer *t) {
    t->be->ops->zero(t->be, t->mdl->grads, sizeof(real_t) * t->mdl->num_params);
}

static void single_finish_grads(pt_trainer *t, double *loss_sum) { (void)t, (void)loss_sum; }

static void single_fault_after_backward(pt_trainer *t, long step, double *loss) {
    pt_fault_after_backward(step, t->mdl, loss);  // test-only nan:step=S
}

static double single_grad_norm(pt_trainer *t) { return pt_grad_global_norm(t->mdl); }

static void single_update(pt_trainer *t, long step, double gnorm, double lr) {
    const pt_train_args *a = &t->a;
    pt_clip_grads(t->mdl, gnorm, a->max_grad_norm);
    pt_adamw_hparams h = {(float)lr, (float)a->adam_beta1, (float)a->adam_beta2, (float)a->adam_epsilon,
                          (float)a->weight_decay, a->weight_decay_params == PT_WD_ALL};
    pt_adamw_step(&t->opt, &h);
    pt_fault_after_update(step, t->mdl);  // test-only nan:step=S:target=weights
}

static void single_record_step(pt_trainer *t, const pt_comm_stats *at_start, pt_metrics_step *r) {
    (void)t, (void)at_start;
    r->peak_rss_mib = pt_trainer_rss_peak_mib();
}

static int single_save(pt_trainer *t, long step, const cJSON *state, ckpt_save_stats *ss) {
    const int rc = pt_save_train_state(t->a.output_dir, step, t->mdl, &t->opt, state, t->a.save_total_limit, ss);
    if (rc == 0) pt_fault_after_save(step, ss->path);  // test-only corrupt-checkpoint:step=S
    return rc;
}

static int single_load_ckpt(pt_trainer *t, ckpt *c) { return pt_load_train_state(c, t->mdl, &t->opt); }

static long single_broadcast_long(pt_trainer *t, long v) {
    (void)t;
    return v;
}

static int single_final_weights_finite(pt_trainer *t) {
    double ss = 0;
    t->be->ops->sum_squares(t->be, &ss, t->mdl->params, t->mdl->num_params);
    return isfinite(ss);
}

static int single_save_final(pt_trainer *t) { return hf_model_save(t->mdl, t->a.output_dir, "float32", 0); }

static void single_free(pt_trainer *t) { (void)t; }

static void single_stop(pt_trainer *t) { (void)t; }

const pt_runtime_ops pt_runtime_single = {
    .start = single_start,
    .agree = single_agree,
    .output_dir_shared = single_output_dir_shared,
    .load_model = single_load_model,
    .init_train_state = single_init_train_state,
    .mixed_precision = true,
    .banner = single_banner,
    .data_sum = single_data_sum,
    .zero_grads = single_zero_grads,
    .finish_grads = single_finish_grads,
    .fault_after_backward = single_fault_after_backward,
    .grad_norm = single_grad_norm,
    .update = single_update,
    .record_step = single_record_step,
    .save = single_save,
    .load_ckpt = single_load_ckpt,
    .broadcast_long = single_broadcast_long,
    .final_weights_finite = single_final_weights_finite,
    .save_final = single_save_final,
    .free = single_free,
    .stop = single_stop,
};
