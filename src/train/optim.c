#include "train/optim.h"

#include <math.h>
#include <string.h>

void pt_adamw_init(pt_adamw *opt, qwen3_model *model) {
    memset(opt, 0, sizeof *opt);
    opt->model = model;
    pt_backend *be = model->be;
    opt->m = be->ops->alloc(be, sizeof(real_t) * model->num_params);
    opt->v = be->ops->alloc(be, sizeof(real_t) * model->num_params);
}

void pt_adamw_free(pt_adamw *opt) {
    if (!opt->model) return;
    pt_backend *be = opt->model->be;
    be->ops->free(be, opt->m);
    be->ops->free(be, opt->v);
    memset(opt, 0, sizeof *opt);
}

double pt_grad_global_norm(qwen3_model *model) {
    // Padding between tensors is always zero, so one pass over the buffer.
    double ss = 0;
    model->be->ops->sum_squares(model->be, &ss, model->grads, model->num_params);
    return sqrt(ss);
}

void pt_clip_grads(qwen3_model *model, double total_norm, double max_norm) {
    if (!(max_norm > 0)) return;
    // fp32 arithmetic as torch does it on a float32 norm tensor
    float coef = (float)max_norm / ((float)total_norm + 1e-6f);
    if (coef < 1.0f) model->be->ops->scale(model->be, model->grads, coef, model->num_params);
}

void pt_adamw_step(pt_adamw *opt, const pt_adamw_hparams *h) {
    qwen3_model *m = opt->model;
    opt->t++;
    for (int i = 0; i < m->num_tensors; i++) {
        const qwen3_param_info *t = &m->tensors[i];
        float wd = h->decay_all || qwen3_tensor_decays(t) ? h->weight_decay : 0.0f;
        m->be->ops->adamw(m->be, m->params + t->offset, m->grads + t->offset, opt->m + t->offset, opt->v + t->offset,
                     t->numel, h->lr, h->beta1, h->beta2, h->eps, wd, opt->t);
    }
    qwen3_params_changed(m);
}
