// The parallel runtime: this rank's share of a TP x FSDP x DP job, as the
// trainer's runtime operations over dist/parallel.h.
#include "io/hf_model.h"
#include "train/trainer_ctx.h"
#include "util/common.h"
#include "util/hash.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

static int par_start(pt_trainer *t) {
    if (pt_startup_begin(&t->world) != 0) return -1;
    t->rank = pt_comm_rank(t->world);
    return 0;
}

static int par_agree(pt_trainer *t, int ok, const pt_run_hashes *inputs) {
    return pt_startup_agree(t->world, ok, &t->a, inputs);
}

static int par_output_dir_shared(pt_trainer *t) { return pt_startup_output_dir_shared(t->world, &t->a); }

// Start-up: a block of rows of one HF tensor, hashed in layout order and kept in this rank's shards.
typedef struct {
    pt_parallel *P;
    pt_sha256 *h;
} stream_ctx;

static int stream_block(void *ctx, const qwen3_param_info *t, int64_t row0, int64_t nrows, const real_t *data) {
    stream_ctx *c = ctx;
    pt_sha256_update(c->h, data, sizeof(real_t) * (size_t)nrows * (size_t)t->shape[1]);
    return pt_parallel_load_tensor(c->P, t->name, row0, nrows, data);
}

// The config and the parameter layout only (no parameters); the weights stream into this rank's shards, a
// block of rows at a time, never the whole model per rank.
static int par_load_model(pt_trainer *t) {
    const char *dir = t->a.model_dir;
    qwen3_config cfg;
    const char *config = t->a.model_config;  // without it, MODEL/config.json alone
    if ((config ? hf_model_load_config_from(&cfg, dir, config) : hf_model_load_config(&cfg, dir)) != 0 ||
        qwen3_create_layout(&t->model, &cfg, t->be) != 0 ||
        hf_model_check_weights(&t->model, dir) != 0 || pt_trainer_check_model(t) != 0)
        return -1;
    pt_mesh mesh;
    if (pt_trainer_mesh(t, &mesh) != 0) return -1;
    t->P = pt_parallel_create(t->world, &mesh, &t->model.cfg, t->be);
    if (!t->P) return -1;
    pt_trainer_set_layout(t->P);
    // Each tensor is read once, a block of rows at a time, hashed (the digest pt_hash_model gives) and this
    // rank's part of it kept.
    pt_hash_config(&t->model.cfg, t->hashes.config_sha256);
    stream_ctx sc = {.P = t->P, .h = pt_sha256_new()};
    const int lrc = hf_model_stream_weights(&t->model, dir, stream_block, &sc);
    pt_sha256_final_hex(sc.h, t->hashes.initial_weights_sha256);
    qwen3_free(&t->model);  // the layout
    if (lrc != 0) return -1;
    pt_parallel_load_done(t->P);
    t->mdl = pt_parallel_model(t->P);
    t->gcfg = &pt_parallel_plan(t->P)->global;
    t->data_world = pt_parallel_data_world(t->P);
    t->data_rank = pt_parallel_data_rank(t->P);
    return 0;
}

static int par_init_train_state(pt_trainer *t) {
    (void)t;  // the shards hold gradients and moments
    return 0;
}

static void par_banner(pt_trainer *t) {
    const pt_train_args *a = &t->a;
    const pt_mesh *mm = pt_parallel_mesh(t->P);
    char order[32];
    pt_mesh_order_str(mm, order, sizeof order);
    pt_info("training %s: %zu parameters per tensor-parallel rank, backend %s, %d ranks (tp %d x fsdp %d x dp %d, "
            "innermost first %s), %d threads/rank, batch %d x %d accumulation x %d data ranks x %d tokens, %ld steps",
            a->model_dir, pt_parallel_plan(t->P)->local_numel, t->be->name, pt_parallel_world(t->P), mm->tp, mm->fsdp,
            mm->dp, order, omp_get_max_threads(), a->per_device_train_batch_size, a->gradient_accumulation_steps,
            t->data_world, a->seq_len, a->max_steps);
}

static void par_data_sum(pt_trainer *t, double *v, int n) {
    double out[8];
    pt_comm_sum_f64(pt_parallel_data_comm(t->P), v, out, n);
    memcpy(v, out, sizeof(double) * (size_t)n);
}

static void par_zero_grads(pt_trainer *t) { pt_parallel_zero_grads(t->P); }

static void par_finish_grads(pt_trainer *t, double *loss_sum) {
    pt_parallel_finish_grads(t->P);
    *loss_sum = pt_parallel_data_sum(t->P, *loss_sum);
}

static void par_fault_after_backward(pt_trainer *t, long step, double *loss) { (void)t, (void)step, (void)loss; }

static double par_grad_norm(pt_trainer *t) { return pt_parallel_grad_norm(t->P); }

static void par_update(pt_trainer *t, long step, double gnorm, double lr) {
    const pt_train_args *a = &t->a;
    (void)step;
    pt_parallel_clip(t->P, gnorm, a->max_grad_norm);
    t->opt.t++;
    pt_parallel_adamw(t->P, (float)lr, (float)a->adam_beta1, (float)a->adam_beta2, (float)a->adam_epsilon,
                      (float)a->weight_decay, a->weight_decay_params == PT_WD_ALL, t->opt.t);
}

// Communication of this rank (rank 0's; the layout is symmetric) and memory of every rank.
static void par_record_step(pt_trainer *t, const pt_comm_stats *at_start, pt_metrics_step *r) {
    pt_comm_stats now;
    pt_comm_get_stats(&now);
    r->parallel = true;
    for (int k = 0; k < PT_COLL_KINDS; k++) {
        r->comm_time_by_kind_s[k] = now.seconds[k] - at_start->seconds[k];
        r->comm_bytes[k] = (unsigned long long)(now.bytes[k] - at_start->bytes[k]);
    }
    const int W = pt_parallel_world(t->P);
    double mine = pt_trainer_rss_peak_mib();
    t->rank_rss = pt_realloc(t->rank_rss, sizeof(double) * (size_t)W);
    pt_comm_allgather_f64(t->world, &mine, t->rank_rss, 1, PT_COLL_CONTROL);
    double rss_max = 0;  // the single-process field: here the largest rank's
    for (int q = 0; q < W; q++) rss_max = t->rank_rss[q] > rss_max ? t->rank_rss[q] : rss_max;
    r->peak_rss_mib = rss_max;
    r->state_bytes_per_rank = pt_parallel_state_bytes(t->P);
    r->peak_rss_mib_per_rank = t->rank_rss;
    r->world = W;
}

static int par_save(pt_trainer *t, long step, const cJSON *state, ckpt_save_stats *ss) {
    return pt_parallel_save(t->P, t->a.output_dir, step, state, t->a.save_total_limit, ss);
}

static int par_load_ckpt(pt_trainer *t, ckpt *c) { return pt_parallel_load_ckpt(t->P, c); }

static long par_broadcast_long(pt_trainer *t, long v) {
    double e = (double)v;
    pt_comm_broadcast(t->world, &e, sizeof e, 0);
    return (long)e;
}

static int par_final_weights_finite(pt_trainer *t) { return pt_parallel_all_finite(t->P, 0); }

static int par_save_final(pt_trainer *t) {
    const int rc = pt_parallel_save_hf(t->P, t->a.output_dir);
    if (rc != 0) t->collective_error = true;
    return rc;
}

static void par_free(pt_trainer *t) {
    pt_parallel_free(t->P);
    t->P = NULL;
    pt_trainer_set_layout(NULL);
    free(t->rank_rss);
    t->rank_rss = NULL;
}

static void par_stop(pt_trainer *t) {
    if (!t->world) return;
    pt_comm_free(t->world);
    pt_comm_finalize();
    t->world = NULL;
}

const pt_runtime_ops pt_runtime_parallel = {
    .start = par_start,
    .agree = par_agree,
    .output_dir_shared = par_output_dir_shared,
    .load_model = par_load_model,
    .init_train_state = par_init_train_state,
    .mixed_precision = false,
    .banner = par_banner,
    .data_sum = par_data_sum,
    .zero_grads = par_zero_grads,
    .finish_grads = par_finish_grads,
    .fault_after_backward = par_fault_after_backward,
    .grad_norm = par_grad_norm,
    .update = par_update,
    .record_step = par_record_step,
    .save = par_save,
    .load_ckpt = par_load_ckpt,
    .broadcast_long = par_broadcast_long,
    .final_weights_finite = par_final_weights_finite,
    .save_final = par_save_final,
    .free = par_free,
    .stop = par_stop,
};
