// portatrain export: a training checkpoint -> a Hugging Face model directory.
#include "backend/backend.h"
#include "cli/cli.h"
#include "io/checkpoint.h"
#include "io/hf_model.h"
#include "util/common.h"
#include "util/fileio.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static void help(void) {
    printf("usage: portatrain export --checkpoint DIR --output-dir HFDIR [--dtype float32|bfloat16|float16]\n"
           "                        [--max-shard-size SIZE] [--tokenizer DIR]\n\n"
           "Writes config.json and model.safetensors (or model-0000K-of-0000N.safetensors + index when the\n"
           "weights exceed --max-shard-size: bytes, or as transformers' save_pretrained takes it, 5GB, 500MB,\n"
           "2GiB, 100KiB; default 5GB) that transformers loads unchanged, and\n"
           "copies the tokenizer and generation files (tokenizer.json, tokenizer_config.json,\n"
           "special_tokens_map.json, chat_template.jinja, generation_config.json, vocab.json, merges.txt,\n"
           "added_tokens.json: those present) from --tokenizer (default: the training run's model\n"
           "directory). The checkpoint is verified first. float16 refuses a model with a weight beyond\n"
           "+-65504 (it would become inf).\n");
}

// --max-shard-size as transformers' convert_file_size_to_int reads it: an integer of bytes, or an integer
// with GiB/MiB/KiB (powers of 2) or GB/MB/KB (powers of 10; a lowercase final 'b' means bits) in any case.
static int64_t parse_shard_size(const char *v) {
    static const struct { const char *unit; int64_t mult; } units[] = {
        {"GIB", 1LL << 30}, {"MIB", 1LL << 20}, {"KIB", 1LL << 10}, {"GB", 1000000000LL}, {"MB", 1000000LL},
        {"KB", 1000LL}, {"", 1}};
    const size_t n = strlen(v);
    for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
        const size_t k = strlen(units[u].unit);
        if (n <= k || strcasecmp(v + n - k, units[u].unit)) continue;
        char digits[32];
        if (n - k >= sizeof digits) break;
        memcpy(digits, v, n - k);
        digits[n - k] = 0;
        if (strspn(digits, "0123456789") != n - k) break;
        errno = 0;
        const unsigned long long x = strtoull(digits, NULL, 10);
        if (errno || x == 0 || x > (unsigned long long)(INT64_MAX / units[u].mult)) break;
        int64_t bytes = (int64_t)x * units[u].mult;
        if (k == 2 && v[n - 1] == 'b') bytes /= 8;  // "5Gb": gigabits
        if (bytes > 0) return bytes;
        break;
    }
    return -1;
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
        else if (!strcmp(o, "--max-shard-size")) {
            const char *v = argp_value(&p);
            if ((max_shard = parse_shard_size(v)) <= 0)
                return cli_usage_error("export", "--max-shard-size must be a positive number of bytes or one with a "
                                       "unit (5GB, 500MB, 2GiB, 100KiB), got '%s'", v);
        }
        else if (!strcmp(o, "--tokenizer")) tok = argp_value(&p);
        else return argp_unknown(&p, o);
    }
    if (!ck || !out) return cli_usage_error("export", "--checkpoint and --output-dir are required");
    if (strcmp(dtype, "float32") && strcmp(dtype, "bfloat16") && strcmp(dtype, "float16"))
        return cli_usage_error("export", "--dtype must be float32, bfloat16 or float16 (got '%s')", dtype);
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
        be->ops->upload(be, m.params, host, sizeof(float) * m.num_params);
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
