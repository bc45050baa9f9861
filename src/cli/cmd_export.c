// portatrain export: a training checkpoint -> a Hugging Face model directory.
#include "backend/backend.h"
#include "cli/cli.h"
#include "io/checkpoint.h"
#include "io/hf_model.h"
#include "util/common.h"
#include "util/fileio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf("usage: portatrain export --checkpoint DIR --output-dir HFDIR [--dtype float32|bfloat16]\n"
           "                        [--max-shard-size BYTES] [--tokenizer DIR]\n\n"
           "Writes config.json and model.safetensors (or model-0000K-of-0000N.safetensors + index when the\n"
           "weights exceed --max-shard-size, default 5000000000) that transformers loads unchanged, and\n"
           "copies the tokenizer and generation files (tokenizer.json, tokenizer_config.json,\n"
           "special_tokens_map.json, chat_template.jinja, generation_config.json, vocab.json, merges.txt,\n"
           "added_tokens.json: those present) from --tokenizer (default: the training run's model\n"
           "directory). The checkpoint is verified first.\n");
}

int cmd_export(int argc, char **argv) {
    pt_argparse p;
    argp_init(&p, argc, argv);
    const char *ck = NULL, *out = NULL, *dtype = "float32", *tok = NULL;
    int64_t max_shard = 5000000000LL;
    const char *o;
    while ((o = argp_next(&p))) {
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) { help(); return 0; }
        else if (!strcmp(o, "--checkpoint")) ck = argp_value(&p);
        else if (!strcmp(o, "--output-dir")) out = argp_value(&p);
        else if (!strcmp(o, "--dtype")) dtype = argp_value(&p);
        else if (!strcmp(o, "--max-shard-size")) max_shard = argp_int_range(&p, 1, INT64_MAX);
        else if (!strcmp(o, "--tokenizer")) tok = argp_value(&p);
        else return argp_unknown(&p, o);
    }
    if (!ck || !out) return cli_usage_error("export", "--checkpoint and --output-dir are required");
    if (strcmp(dtype, "float32") && strcmp(dtype, "bfloat16"))
        return cli_usage_error("export", "--dtype must be float32 or bfloat16");
    ckpt *c = ckpt_open(ck);
    if (!c) return cli_fail();
    if (ckpt_verify(c) != 0) {
        ckpt_close(c);
        return cli_fail();
    }
    const cJSON *st = ckpt_state(c);
    const cJSON *mc = cJSON_GetObjectItemCaseSensitive(st, "model_config");
    char what[4200];
    snprintf(what, sizeof what, "%s/checkpoint.json: state.model_config", ckpt_dir(c));
    if (!cJSON_IsObject(mc)) {
        // e.g. a `ckpt bench` checkpoint: tensors without the model they belong to
        pt_set_error("%s %s; without the model config there is nothing to export", what,
                     mc ? "is not an object" : "is missing");
        ckpt_close(c);
        return cli_fail();
    }
    char *mtext = cJSON_PrintUnformatted(mc);
    qwen3_config cfg;
    if (qwen3_config_parse(&cfg, mtext, strlen(mtext), what) != 0) {
        free(mtext);
        ckpt_close(c);
        return cli_fail();
    }
    free(mtext);
    pt_backend *be = pt_backend_create("cpu-ref");
    qwen3_model m;
    int rc = qwen3_create(&m, &cfg, be);
    float *host = rc ? NULL : pt_calloc(m.num_params, sizeof(float));
    for (int i = 0; !rc && i < m.num_tensors; i++) {
        const qwen3_param_info *t = &m.tensors[i];
        char name[160];
        snprintf(name, sizeof name, "model/%s", t->name);
        int64_t off[2] = {0, 0};
        rc = ckpt_read(c, name, t->ndim, off, t->shape, host + t->offset);
    }
    if (!rc) {
        be->upload(be, m.params, host, sizeof(float) * m.num_params);
        rc = hf_model_save(&m, out, dtype, (uint64_t)max_shard);
    }
    if (!rc) {
        // tokenizer files: --tokenizer, else the run's model directory
        const char *src = tok;
        const cJSON *rcfg = cJSON_GetObjectItemCaseSensitive(st, "run_config");
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(rcfg, "model");
        if (!src && cJSON_IsString(md)) src = md->valuestring;
        if (!src || !pt_is_dir(src)) {
            pt_warn("%s: source model directory %s%s; no tokenizer or generation files copied (use --tokenizer DIR)",
                    ckpt_dir(c), src ? src : "unknown", src ? " not found" : " (no run_config.model)");
            src = NULL;
        }
        // Every tokenizer / generation sidecar transformers writes next to a
        // model, so the export chats and generates as the source model did.
        if (src && tok) {
            char *sp = pt_path_join(src, hf_sidecar_files[0]);
            if (!pt_file_exists(sp)) pt_warn("%s not found; not copied", sp);
            free(sp);
        }
        if (src) rc = hf_copy_sidecars(src, out, NULL);
    }
    if (!rc) fprintf(stderr, "exported %s (step %ld) to %s as %s\n", ckpt_dir(c), ckpt_step(c), out, dtype);
    free(host);
    if (m.be) qwen3_free(&m);
    pt_backend_destroy(be);
    ckpt_close(c);
    return rc ? cli_fail() : 0;
}
