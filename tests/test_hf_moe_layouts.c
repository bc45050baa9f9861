// Qwen3-MoE expert layouts in HF model dirs (io/hf_model.c):
// - the per-expert names save_pretrained and the Hub checkpoints use (model.layers.L.mlp.experts.E.*_proj.weight)
//   and the fused tensors transformers 5 holds in memory and a plain state_dict() saves (mlp.experts.gate_up_proj
//   [E, 2I, C], mlp.experts.down_proj [E, C, I]) load to bitwise the same parameters, with no tensor reported
//   as unexpected;
// - a fused tensor of the wrong shape (down_proj transposed) is refused naming the file, the tensor and the
//   shape config.json implies;
// - portatrain writes the per-expert names.
#include "io/hf_model.h"
#include "io/safetensors.h"
#include "util/common.h"
#include "util/fileio.h"
#include "testutil.h"

// Writes DIR/model.safetensors with the weights of m (host memory), the experts of each sparse layer fused
// (down_shape_swapped: down_proj written [E, I, C]), and DIR/config.json copied from src_dir.
static void write_fused(const qwen3_model *m, const char *src_dir, const char *dir, int down_shape_swapped) {
    const qwen3_config *c = &m->cfg;
    const int64_t E = c->num_experts, C = c->hidden_size, I = c->moe_intermediate_size;
    st_write_tensor *w = pt_calloc(m->num_tensors, sizeof *w);
    char (*names)[96] = pt_calloc(m->num_tensors, sizeof *names);
    float **fused = pt_calloc(m->num_tensors, sizeof *fused);
    int n = 0;
    for (int i = 0; i < m->num_tensors; i++) {
        const qwen3_param_info *t = &m->tensors[i];
        int layer, e, len = 0;
        char which[16];
        if (sscanf(t->name, "model.layers.%d.mlp.experts.%d.%15[a-z]_proj.weight%n", &layer, &e, which, &len) != 3) {
            w[n++] = (st_write_tensor){.name = t->name, .dtype = ST_F32, .ndim = t->ndim,
                                       .shape = {t->shape[0], t->shape[1]}, .data = m->params + t->offset};
            continue;
        }
        const int down = !strcmp(which, "down");
        if (!strcmp(which, "up")) continue;  // written with its gate below
        if (e == 0) {  // the layer's fused tensor, filled by its E experts
            snprintf(names[n], sizeof names[n], "model.layers.%d.mlp.experts.%s", layer, down ? "down_proj" : "gate_up_proj");
            fused[n] = pt_calloc((size_t)(E * 2 * I * C), sizeof(float));
            w[n] = (st_write_tensor){.name = names[n], .dtype = ST_F32, .ndim = 3, .data = fused[n]};
            const int64_t s1 = down ? (down_shape_swapped ? I : C) : 2 * I, s2 = down ? (down_shape_swapped ? C : I) : C;
            w[n].shape[0] = E, w[n].shape[1] = s1, w[n].shape[2] = s2;
            n++;
        }
        float *dst = NULL;
        for (int k = 0; k < n; k++)
            if (w[k].ndim == 3 && strstr(w[k].name, down ? "down_proj" : "gate_up_proj") &&
                atoi(w[k].name + strlen("model.layers.")) == layer)
                dst = fused[k];
        if (down) memcpy(dst + e * C * I, m->params + t->offset, sizeof(float) * C * I);
        else {  // gate rows, then the up rows of the same expert (the next tensor)
            memcpy(dst + e * 2 * I * C, m->params + t->offset, sizeof(float) * I * C);
            memcpy(dst + e * 2 * I * C + I * C, m->params + m->tensors[i + 1].offset, sizeof(float) * I * C);
        }
    }
    CHECK(pt_mkdir_p(dir) == 0, "mkdir %s", dir);
    char *path = pt_path_join(dir, "model.safetensors");
    CHECK(st_write(path, w, n, NULL, 0) == 0, "%s", pt_last_error());
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cp '%s/config.json' '%s/'", src_dir, dir);
    CHECK(system(cmd) == 0, "%s", cmd);
    for (int k = 0; k < n; k++) free(fused[k]);
    free(fused);
    free(names);
    free(w);
    free(path);
}

int main(void) {
    pt_backend *be = pt_backend_create("cpu-ref");
    char *src = test_source_path("tests/fixtures/golden_moe/norm");
    qwen3_model a, b;
    CHECK(hf_model_load(&a, src, be) == 0, "%s", pt_last_error());
    char *tmp = test_tmpdir("hfmoe");
    char *fused = pt_path_join(tmp, "fused"), *bad = pt_path_join(tmp, "bad"), *out = pt_path_join(tmp, "out");
    write_fused(&a, src, fused, 0);
    char *err = NULL;
    // the CLI reads it too and reports nothing unexpected
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' eval --model '%s' --data '%s/tests/fixtures/golden/untied/data.bin' --seq-len 16 "
             "--per-device-eval-batch-size 2 --max-batches 1", getenv("PORTATRAIN"), fused, getenv("PT_SOURCE_DIR"));
    CHECK(test_run(cmd, NULL, &err) == 0 && !strstr(err, "unexpected"), "eval of the fused dir: %s", err);
    free(err);
    if (hf_model_load(&b, fused, be) != 0) {
        CHECK(0, "the fused dir does not load: %s", pt_last_error());
        return test_summary("test_hf_moe_layouts");
    }
    CHECK(a.num_params == b.num_params && !memcmp(a.params, b.params, sizeof(real_t) * a.num_params),
          "the fused layout loads other parameters than the per-expert one");
    // a fused down_proj of the wrong shape
    write_fused(&a, src, bad, 1);
    qwen3_model c;
    CHECK(hf_model_load(&c, bad, be) != 0 &&
          strstr(pt_last_error(), "tensor \"model.layers.1.mlp.experts.down_proj\" is not [8,32,16]") &&
          strstr(pt_last_error(), "bad/model.safetensors"), "wrong-shape fused tensor: %s", pt_last_error());
    // written per expert
    CHECK(hf_model_save(&b, out, "float32", 0) == 0, "%s", pt_last_error());
    char *path = pt_path_join(out, "model.safetensors");
    st_file f;
    CHECK(st_open(&f, path) == 0, "%s", pt_last_error());
    CHECK(st_find(&f, "model.layers.2.mlp.experts.7.up_proj.weight") && !st_find(&f, "model.layers.2.mlp.experts.gate_up_proj"),
          "the save is not per expert");
    st_close(&f);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0, "rm");
    free(path); free(out); free(bad); free(fused); free(tmp); free(src);
    qwen3_free(&a);
    qwen3_free(&b);
    pt_backend_destroy(be);
    return test_summary("test_hf_moe_layouts");
}
