// --audit-dump DIR (train/audit.h): the step-1 gradients, forward statistics and first parameter updates
// that accept's audit compares tensor by tensor.
#include "train/audit.h"
#include "io/safetensors.h"
#include "model/qwen3_moe.h"
#include "util/common.h"
#include "util/fileio.h"
#include "util/json.h"
#include "util/philox.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pt_audit {
    char *dir;
    long steps;       // optimizer steps whose updates are recorded
    float *prev;      // host copy of the parameters before the current update
    float *host;      // host scratch [num_params]
    cJSON *root, *updates;
    bool done;
};

static const uint32_t PROJ_KEY = 0x5eed0a0d;

void pt_audit_project(const char *name, const float *x, size_t n, double sums[PT_AUDIT_PROJ]) {
    const uint32_t key[2] = {PROJ_KEY, pt_stream_id(name)};
    for (size_t b = 0; b * 32 < n; b++) {
        const uint32_t ctr[4] = {(uint32_t)b, (uint32_t)((uint64_t)b >> 32), 0, 0};
        uint32_t bits[4];
        pt_philox4x32(key, ctr, bits);
        const size_t end = PT_MIN(n, b * 32 + 32);
        for (int k = 0; k < PT_AUDIT_PROJ; k++) {
            double s = 0;
            for (size_t i = b * 32; i < end; i++) s += (bits[k] >> (i - b * 32) & 1u) ? (double)x[i] : -(double)x[i];
            sums[k] += s;
        }
    }
}

static cJSON *num_array(const double *v, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

// L2 norm, sum and projections of one tensor (host values) into a new object named after it.
static cJSON *tensor_stats(const qwen3_param_info *ti, const float *x, bool with_sum) {
    double ss = 0, sum = 0, proj[PT_AUDIT_PROJ] = {0};
    for (size_t i = 0; i < ti->numel; i++) ss += (double)x[i] * x[i], sum += x[i];
    pt_audit_project(ti->name, x, ti->numel, proj);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", ti->name);
    cJSON_AddNumberToObject(o, "layer", ti->layer);
    cJSON_AddNumberToObject(o, "numel", (double)ti->numel);
    cJSON_AddNumberToObject(o, "l2", sqrt(ss));
    if (with_sum) cJSON_AddNumberToObject(o, "sum", sum);
    cJSON_AddItemToObject(o, "proj", num_array(proj, PT_AUDIT_PROJ));
    return o;
}

// RMS, mean and max-abs of n host values, as a new entry of arr.
static cJSON *add_stats(cJSON *arr, const char *name, int layer, const float *x, size_t n) {
    double ss = 0, sum = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        const double v = x[i];
        ss += v * v, sum += v;
        if (fabs(v) > mx) mx = fabs(v);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddNumberToObject(o, "layer", layer);
    cJSON_AddNumberToObject(o, "rms", sqrt(ss / (double)n));
    cJSON_AddNumberToObject(o, "mean", sum / (double)n);
    cJSON_AddNumberToObject(o, "max_abs", mx);
    cJSON_AddItemToArray(arr, o);
    return o;
}

// One activation's statistics over its N x C values (backend memory).
static void add_act(cJSON *arr, pt_audit *au, qwen3_model *m, const char *name, int layer, const real_t *x, size_t n) {
    m->be->ops->download(m->be, au->host, x, sizeof(float) * n);
    add_stats(arr, name, layer, au->host, n);
}

// A sparse layer, in forward order: the routing (tokens per expert, "load": a routing defect shows here first,
// before any value moves), then the MoE block's output before the residual add.
static void add_moe(cJSON *arr, pt_audit *au, qwen3_model *m, int l, size_t n) {
    const int E = m->cfg.num_experts;
    int *counts = pt_malloc(sizeof(int) * (size_t)E);
    float *fc = pt_malloc(sizeof(float) * (size_t)E);
    char name[96];
    if (qwen3_moe_expert_load(m, l, counts) == 0) {
        for (int e = 0; e < E; e++) fc[e] = (float)counts[e];
        snprintf(name, sizeof name, "layers.%d.mlp.expert_load", l);
        cJSON *o = add_stats(arr, name, l, fc, (size_t)E);
        cJSON *load = cJSON_AddArrayToObject(o, "load");
        for (int e = 0; e < E; e++) cJSON_AddItemToArray(load, cJSON_CreateNumber(counts[e]));
    }
    if (qwen3_moe_block_output(m, l, au->host) == 0) {
        snprintf(name, sizeof name, "layers.%d.mlp", l);
        add_stats(arr, name, l, au->host, n);
    }
    free(counts);
    free(fc);
}

// The forward of the step's last micro-batch, in forward order; the norm outputs only where the layer keeps
// them (activation checkpointing drops them).
static cJSON *forward_stats(pt_audit *au, pt_trainer *t, int row_len) {
    qwen3_model *m = t->mdl;
    const int L = m->cfg.num_hidden_layers;
    const size_t n = (size_t)t->a.per_device_train_batch_size * row_len * m->cfg.hidden_size;
    cJSON *arr = cJSON_CreateArray();
    char name[96];
    add_act(arr, au, m, "embed_tokens", -1, m->acts[0].res_in, n);
    for (int l = 0; l < L; l++) {
        const qwen3_layer_acts *a = &m->acts[l];
        const bool kept = qwen3_layer_ac_mode(m, l) == QWEN3_AC_NONE;
        snprintf(name, sizeof name, "layers.%d.input_layernorm", l);
        if (kept) add_act(arr, au, m, name, l, a->ln1, n);
        snprintf(name, sizeof name, "layers.%d.attn_residual", l);
        add_act(arr, au, m, name, l, a->res_mid, n);
        snprintf(name, sizeof name, "layers.%d.post_attention_layernorm", l);
        if (kept) add_act(arr, au, m, name, l, a->ln2, n);
        if (m->moe && qwen3_layer_is_sparse(&m->cfg, l)) add_moe(arr, au, m, l, n);
        snprintf(name, sizeof name, "layers.%d.output", l);
        add_act(arr, au, m, name, l, l + 1 < L ? m->acts[l + 1].res_in : m->res_final, n);
    }
    add_act(arr, au, m, "norm", L, m->lnf, n);
    return arr;
}

// Per-tensor gradient statistics, and the small tensors' full gradients into DIR/grads.safetensors.
static int grad_stats(pt_audit *au, pt_trainer *t) {
    qwen3_model *m = t->mdl;
    m->be->ops->download(m->be, au->host, m->grads, sizeof(float) * m->num_params);
    cJSON *arr = cJSON_AddArrayToObject(au->root, "grads");
    st_write_tensor *st = pt_calloc((size_t)m->num_tensors, sizeof *st);
    int ns = 0;
    for (int i = 0; i < m->num_tensors; i++) {
        const qwen3_param_info *ti = &m->tensors[i];
        cJSON *o = tensor_stats(ti, au->host + ti->offset, true);
        const bool full = ti->numel <= PT_AUDIT_FULL_NUMEL;
        cJSON_AddBoolToObject(o, "full", full);
        cJSON_AddItemToArray(arr, o);
        if (!full) continue;
        st[ns] = (st_write_tensor){.name = ti->name, .dtype = ST_F32, .ndim = ti->ndim, .data = au->host + ti->offset};
        for (int d = 0; d < ti->ndim; d++) st[ns].shape[d] = ti->shape[d];
        ns++;
    }
    char *p = pt_path_join(au->dir, "grads.safetensors");
    const int rc = st_write(p, st, ns, NULL, 0);
    free(p);
    free(st);
    return rc;
}

static int write_json(pt_audit *au) {
    char *p = pt_path_join(au->dir, "audit.json");
    const int rc = pt_json_write_file(p, au->root);
    free(p);
    au->done = true;
    return rc;
}

int pt_audit_open(pt_trainer *t, pt_audit **out) {
    *out = NULL;
    if (!t->a.audit_dump || t->rank != 0) return 0;
    // Test-only: a platform whose dump never appears, which accept must not take as a passed audit.
    const char *drop = getenv("PT_FAULT_NO_AUDIT_DUMP");
    if (drop && !strcmp(drop, t->be->name)) {
        fprintf(stderr, "warning: PT_FAULT_NO_AUDIT_DUMP=%s: no audit dump is written (test only)\n", drop);
        return 0;
    }
    pt_audit *au = pt_calloc(1, sizeof *au);
    au->dir = pt_strdup(t->a.audit_dump);
    au->steps = PT_MIN((long)PT_AUDIT_STEPS, t->a.max_steps);
    au->root = cJSON_CreateObject();
    cJSON_AddStringToObject(au->root, "format", PT_AUDIT_FORMAT);
    cJSON_AddStringToObject(au->root, "backend", t->be->name);
    cJSON_AddStringToObject(au->root, "precision", t->a.precision ? t->a.precision : "fp32");
    const char *why = t->world ? "a parallel job: the audit covers single processes only"
                      : t->start_step > 0 ? "a resumed run: the audit covers step 1 of a fresh run only"
                      : sizeof(real_t) != sizeof(float) ? "a build whose real_t is not float" : NULL;
    cJSON_AddBoolToObject(au->root, "covered", !why);
    if (why) cJSON_AddStringToObject(au->root, "reason", why);
    if (pt_mkdir_p(au->dir) != 0 || (why && write_json(au) != 0)) {
        pt_prefix_error("--audit-dump %s: ", au->dir);
        pt_audit_free(au);
        return -1;
    }
    *out = au;
    if (why) return 0;
    cJSON_AddNumberToObject(au->root, "projections", PT_AUDIT_PROJ);
    cJSON_AddNumberToObject(au->root, "full_grad_max_numel", PT_AUDIT_FULL_NUMEL);
    cJSON_AddNumberToObject(au->root, "forward_micro_batch", t->a.gradient_accumulation_steps - 1);
    au->updates = cJSON_AddArrayToObject(au->root, "updates");
    au->host = pt_malloc(sizeof(float) * t->mdl->num_params);
    return 0;
}

int pt_audit_after_backward(pt_audit *au, pt_trainer *t, long step, int row_len, double loss, double grad_norm) {
    if (!au || au->done || step != 1) return 0;
    cJSON_AddNumberToObject(au->root, "loss", loss);
    cJSON_AddNumberToObject(au->root, "grad_norm", grad_norm);
    cJSON_AddItemToObject(au->root, "forward", forward_stats(au, t, row_len));
    if (grad_stats(au, t) != 0) {
        pt_prefix_error("--audit-dump %s: ", au->dir);
        return -1;
    }
    au->prev = pt_malloc(sizeof(float) * t->mdl->num_params);
    t->be->ops->download(t->be, au->prev, t->mdl->params, sizeof(float) * t->mdl->num_params);
    return 0;
}

int pt_audit_after_update(pt_audit *au, pt_trainer *t, long step) {
    if (!au || au->done || !au->prev) return 0;
    qwen3_model *m = t->mdl;
    m->be->ops->download(m->be, au->host, m->params, sizeof(float) * m->num_params);
    cJSON *u = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    cJSON_AddNumberToObject(u, "step", (double)step);
    for (int i = 0; i < m->num_tensors; i++) {
        const qwen3_param_info *ti = &m->tensors[i];
        float *d = au->prev + ti->offset;  // the delta replaces the old copy, then the new values do
        for (size_t j = 0; j < ti->numel; j++) d[j] = au->host[ti->offset + j] - d[j];
        cJSON_AddItemToArray(arr, tensor_stats(ti, d, false));
    }
    cJSON_AddItemToObject(u, "tensors", arr);
    cJSON_AddItemToArray(au->updates, u);
    float *tmp = au->prev;
    au->prev = au->host, au->host = tmp;
    if (step < au->steps) return 0;
    if (write_json(au) != 0) {
        pt_prefix_error("--audit-dump %s: ", au->dir);
        return -1;
    }
    return 0;
}

void pt_audit_free(pt_audit *au) {
    if (!au) return;
    cJSON_Delete(au->root);
    free(au->prev);
    free(au->host);
    free(au->dir);
    free(au);
}
