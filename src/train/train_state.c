#include "train/train_state.h"
#include "util/common.h"
#include "util/hash.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pt_hash_config(const qwen3_config *cfg, char config_hex[65]) {
    cJSON *cj = qwen3_config_to_json(cfg, "float32");
    char *text = cJSON_PrintUnformatted(cj);
    pt_sha256_hex(text, strlen(text), config_hex);
    free(text);
    cJSON_Delete(cj);
}

void pt_hash_model(const qwen3_model *m, char config_hex[65], char weights_hex[65]) {
    pt_hash_config(&m->cfg, config_hex);
    real_t *host = pt_malloc(sizeof(real_t) * m->num_params);
    m->be->ops->download(m->be, host, m->params, sizeof(real_t) * m->num_params);
    pt_sha256 *h = pt_sha256_new();
    for (int i = 0; i < m->num_tensors; i++)
        pt_sha256_update(h, host + m->tensors[i].offset, sizeof(real_t) * m->tensors[i].numel);
    pt_sha256_final_hex(h, weights_hex);
    free(host);
}

static const char *GROUPS[3] = {"model/", "optim/exp_avg/", "optim/exp_avg_sq/"};

// The first tensor of weights/moments holding a NaN or Inf, or -1. One fp64
// sum of squares per buffer (as cheap as the grad-norm pass, far cheaper than
// the save); per tensor only to name the culprit.
static int first_nonfinite(const qwen3_model *m, const real_t *const bufs[3], int *group) {
    for (int g = 0; g < 3; g++) {
        double ss = 0;
        m->be->ops->sum_squares(m->be, &ss, bufs[g], m->num_params);
        if (isfinite(ss)) continue;
        *group = g;
        for (int i = 0; i < m->num_tensors; i++) {
            double ts = 0;
            m->be->ops->sum_squares(m->be, &ts, bufs[g] + m->tensors[i].offset, m->tensors[i].numel);
            if (!isfinite(ts)) return i;
        }
        return 0;
    }
    return -1;
}

int pt_save_train_state(const char *output_dir, long step, const qwen3_model *m, const pt_adamw *opt,
                        const cJSON *state, int keep_last, ckpt_save_stats *stats) {
    const size_t np = m->num_params;
    const real_t *bufs[3] = {m->params, opt->m, opt->v};
    int bad_group = 0, bad = first_nonfinite(m, bufs, &bad_group);
    if (bad >= 0) {
        pt_set_error("refusing to save checkpoint %ld: %s%s holds non-finite values (NaN/Inf); nothing was written",
                     step, GROUPS[bad_group], m->tensors[bad].name);
        return PT_SAVE_NONFINITE;
    }
    // Host-memory backends are written straight from their buffers; others
    // are staged through one host copy.
    float *host = NULL;
    const float *src[3];
    if (m->be->host_memory) {
        for (int g = 0; g < 3; g++) src[g] = bufs[g];
    } else {
        host = pt_malloc(sizeof(float) * np * 3);
        for (int g = 0; g < 3; g++) {
            m->be->ops->download(m->be, host + g * np, bufs[g], sizeof(float) * np);
            src[g] = host + g * np;
        }
    }
    int n = m->num_tensors * 3;
    ckpt_slice *sl = pt_calloc(n, sizeof(ckpt_slice));
    char (*names)[128] = pt_calloc(n, 128);
    for (int g = 0; g < 3; g++)
        for (int i = 0; i < m->num_tensors; i++) {
            const qwen3_param_info *t = &m->tensors[i];
            ckpt_slice *s = &sl[g * m->num_tensors + i];
            snprintf(names[g * m->num_tensors + i], 128, "%s%s", GROUPS[g], t->name);
            s->name = names[g * m->num_tensors + i];
            s->ndim = t->ndim;
            for (int d = 0; d < t->ndim; d++) s->global_shape[d] = s->shape[d] = t->shape[d];
            s->data = src[g] + t->offset;
        }
    int rc = ckpt_save(output_dir, step, sl, n, state, keep_last, stats);
    free(names);
    free(sl);
    free(host);
    return rc;
}

int pt_load_train_state(ckpt *c, qwen3_model *m, pt_adamw *opt) {
    const size_t np = m->num_params;
    real_t *bufs[3] = {m->params, opt->m, opt->v};
    float *host = m->be->host_memory ? NULL : pt_calloc(np * 3, sizeof(float));
    int rc = -1;
    for (int g = 0; g < 3; g++)
        for (int i = 0; i < m->num_tensors; i++) {
            const qwen3_param_info *t = &m->tensors[i];
            char name[160];
            snprintf(name, sizeof name, "%s%s", GROUPS[g], t->name);
            int64_t shape[CKPT_MAX_DIMS];
            int nd = ckpt_tensor_shape(c, name, shape);
            if (nd < 0) {
                pt_set_error("%s: checkpoint lacks tensor \"%s\"", ckpt_dir(c), name);
                goto done;
            }
            if (nd != t->ndim || shape[0] != t->shape[0] || (nd == 2 && shape[1] != t->shape[1])) {
                pt_set_error("%s: tensor \"%s\" has a different shape from the model's", ckpt_dir(c), name);
                goto done;
            }
            int64_t off[2] = {0, 0};
            float *dst = host ? host + g * np + t->offset : bufs[g] + t->offset;
            if (ckpt_read(c, name, t->ndim, off, t->shape, dst) != 0) goto done;
        }
    if (host)
        for (int g = 0; g < 3; g++) m->be->ops->upload(m->be, bufs[g], host + g * np, sizeof(float) * np);
    qwen3_params_changed(m);
    rc = 0;
done:
    free(host);
    return rc;
}
