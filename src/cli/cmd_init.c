// portatrain init: a randomly initialised Qwen3 in HF format.
#include "backend/backend.h"
#include "cli/cli.h"
#include "io/hf_model.h"
#include "model/qwen3.h"

#include <stdio.h>
#include <string.h>

static void help(void) {
    printf("usage: portatrain init --config CONFIG.json --output-dir DIR [--seed S]\n\n"
           "Writes DIR/config.json and DIR/model.safetensors: normal(0, initializer_range) for linear and\n"
           "embedding weights, ones for norms, from a Philox RNG indexed by (seed, tensor name, element),\n"
           "so the same seed gives the same weights everywhere. CONFIG is an HF Qwen3 config.json.\n");
}

int cmd_init(int argc, char **argv) {
    pt_argparse p;
    argp_init(&p, argc, argv);
    const char *config = NULL, *out = NULL;
    int64_t seed = 42;
    const char *o;
    while ((o = argp_next(&p))) {
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) { help(); return 0; }
        else if (!strcmp(o, "--config")) config = argp_value(&p);
        else if (!strcmp(o, "--output-dir")) out = argp_value(&p);
        else if (!strcmp(o, "--seed")) seed = argp_int(&p);
        else return argp_unknown(&p, o);
    }
    if (!config || !out) return cli_usage_error("init", "--config and --output-dir are required");
    qwen3_config cfg;
    if (qwen3_config_load(&cfg, config) != 0) return cli_fail();
    pt_backend *be = pt_backend_create("cpu-ref");
    qwen3_model m;
    if (qwen3_create(&m, &cfg, be) != 0) {
        pt_backend_destroy(be);
        return cli_fail();
    }
    qwen3_init_weights(&m, (uint64_t)seed);
    int rc = hf_model_save(&m, out, "float32", 0);
    size_t n = m.num_params;
    qwen3_free(&m);
    pt_backend_destroy(be);
    if (rc) return cli_fail();
    fprintf(stderr, "initialised %zu parameters (seed %lld) into %s\n", n, (long long)seed, out);
    return 0;
}
