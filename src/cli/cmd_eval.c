// portatrain eval: mean token loss of a model on a shard.
#include "backend/backend.h"
#include "cli/cli.h"
#include "data/loader.h"
#include "io/dcp.h"
#include "io/hf_model.h"
#include "io/safetensors.h"
#include "model/qwen3_moe.h"

#include <math.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf("usage: portatrain eval --model DIR --data SHARD --seq-len T [--per-device-eval-batch-size B]\n"
           "                      [--max-batches N] [--backend NAME] [--precision fp32|bf16]\n"
           "                      [--logits-out FILE] [--config CONFIG.json] [--data-mode packed|documents]\n\n"
           "Prints one JSON object: loss (mean over tokens), tokens, batches, perplexity. A Qwen3-MoE model\n"
           "with output_router_logits adds aux_loss (the load-balancing loss, each batch's weighted by its\n"
           "rows) and, as HF's eval_loss, router_aux_loss_coef x aux_loss to loss (and perplexity). Without\n"
           "--max-batches every window (packed) or document (padded) is evaluated once, the last batch\n"
           "short, as transformers' Trainer.evaluate reads an eval set. --data-mode documents reads rows as\n"
           "TorchTitan's validator does (documents masked apart, positions per document; docs/DATA.md): each\n"
           "full row once, the last batch short.\n"
           "--logits-out writes the first batch's input_ids [B,T] (I32) and logits [B,T,V] (F32) as\n"
           "safetensors, e.g. for tools/hf_check_model.py. --precision bf16 evaluates as Hugging Face's\n"
           "bf16 model does (docs/PRECISION.md).\n"
           "--config reads the model's config from CONFIG.json instead of DIR/config.json: TorchTitan's HF\n"
           "export (--checkpoint.last-save-in-hf) writes none; without --config, DUMP/checkpoint/step-N finds\n"
           "DUMP/assets/config.json (tools/torchtitan_run.py's layout). A TorchTitan/PyTorch DCP checkpoint\n"
           "(.metadata + *.distcp) is refused: convert it with tools/dcp_to_hf.py (docs/CHECKPOINTS.md).\n"
           "Exit status: 0, 1 error, 2 usage (or a DCP checkpoint), 3 non-finite loss (printed as null).\n");
}

// A Qwen3-MoE model's load-balancing losses over the batches, each weighted by its rows.
typedef struct {
    bool on;  // output_router_logits
    double sum;
    long rows;
} eval_aux;

// The result line. A Qwen3-MoE model with output_router_logits: HF's Trainer.evaluate takes each batch's
// model loss, its mean cross-entropy + router_aux_loss_coef x aux_loss, and averages the batches weighted by
// their rows; over full rows of seq-len targets that is the mean over tokens + coef x the rows' mean aux.
static int print_result(const qwen3_model *m, const char *model_dir, double total, long tokens, const eval_aux *aux,
                        uint64_t nbatches, const char *backend, const char *precision) {
    double loss = tokens ? total / tokens : NAN;
    char ab[64] = "";
    if (aux->on && aux->rows) {
        const double a = aux->sum / (double)aux->rows;
        loss += m->cfg.router_aux_loss_coef * a;
        if (isfinite(a)) snprintf(ab, sizeof ab, ", \"aux_loss\": %.17g", a);
        else snprintf(ab, sizeof ab, ", \"aux_loss\": null");
    }
    // NaN/Inf are not JSON numbers: null, and exit 3 (the project's status for a non-finite loss).
    char lb[32] = "null", pb[32] = "null";
    if (isfinite(loss)) snprintf(lb, sizeof lb, "%.17g", loss);
    if (isfinite(exp(loss))) snprintf(pb, sizeof pb, "%.10g", exp(loss));
    printf("{\"loss\": %s%s, \"tokens\": %ld, \"batches\": %llu, \"perplexity\": %s, \"backend\": \"%s\", "
           "\"precision\": \"%s\"}\n",
           lb, ab, tokens, (unsigned long long)nbatches, pb, backend, precision);
    if (!isfinite(loss)) {
        fprintf(stderr, "portatrain: error: %s: non-finite eval loss (%s over %ld tokens)\n", model_dir,
                tokens ? "NaN or Inf" : "no target tokens", tokens);
        return 3;
    }
    return 0;
}

int cmd_eval(int argc, char **argv) {
    pt_argparse p;
    argp_init(&p, argc, argv);
    const char *model_dir = NULL, *data = NULL, *backend = "cpu-ref", *logits_out = NULL, *precision = "fp32";
    const char *config = NULL, *data_mode = "packed";
    int64_t T = 0, B = 8, max_batches = -1;
    const char *o;
    while ((o = argp_next(&p))) {
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) { help(); return 0; }
        else if (!strcmp(o, "--model")) model_dir = argp_value(&p);
        else if (!strcmp(o, "--data")) data = argp_value(&p);
        else if (!strcmp(o, "--seq-len")) T = argp_int_range(&p, 1, INT_MAX);
        else if (!strcmp(o, "--per-device-eval-batch-size")) B = argp_int_range(&p, 1, INT_MAX);
        else if (!strcmp(o, "--max-batches")) max_batches = argp_int_range(&p, 1, INT64_MAX);
        else if (!strcmp(o, "--backend")) backend = argp_value(&p);
        else if (!strcmp(o, "--logits-out")) logits_out = argp_value(&p);
        else if (!strcmp(o, "--precision")) precision = argp_value(&p);
        else if (!strcmp(o, "--config")) config = argp_value(&p);
        else if (!strcmp(o, "--data-mode")) data_mode = argp_value(&p);
        else return argp_unknown(&p, o);
    }
    if (cli_raw_text(data)) return 2;
    if (!model_dir || !data || T <= 0 || B <= 0)
        return cli_usage_error("eval", "--model, --data and a positive --seq-len are required");
    const bool documents = !strcmp(data_mode, "documents");
    if (!documents && strcmp(data_mode, "packed"))
        return cli_usage_error("eval", "--data-mode must be packed or documents (got '%s')", data_mode);
    if (strcmp(precision, "fp32") && strcmp(precision, "bf16"))
        return cli_usage_error("eval", "--precision must be fp32 or bf16 (got '%s')", precision);
    if (dcp_is_checkpoint_dir(model_dir)) {  // the wrong kind of directory for --model: a usage error
        dcp_refuse(model_dir);
        cli_fail();
        return 2;
    }
    pt_backend *be = pt_backend_create(backend);
    if (!be) return cli_fail();
    qwen3_model m = {0};
    if (hf_model_load_with_config(&m, model_dir, config, be) != 0 || qwen3_set_precision(&m, precision) != 0) {
        if (m.be) qwen3_free(&m);
        pt_backend_destroy(be);
        return cli_fail();
    }
    // One pass over the rows, each once, the last batch short (filled with empty rows that count no tokens), as
    // HF's Trainer.evaluate reads an eval set: "hf" epoch boundaries, first epoch only.
    pt_loader_config lc = {.data_path = data, .seq_len = (int)T, .rows_per_step = (int)B, .dp_world = 1,
                           .model_vocab = (uint32_t)m.cfg.vocab_size, .epochs = PT_LOADER_EPOCHS_HF,
                           .mode = documents ? PT_LOADER_DOCUMENTS : PT_LOADER_PACKED};
    pt_loader *l = pt_loader_open(&lc);
    if (!l) {
        qwen3_free(&m);
        pt_backend_destroy(be);
        return cli_fail();
    }
    // documents: the stream's full rows, each once (the loader would wrap past them)
    const uint64_t nrows = pt_loader_num_rows(l);
    uint64_t nbatches = documents ? (nrows + (uint64_t)B - 1) / (uint64_t)B : pt_loader_steps_per_epoch(l);
    if (max_batches >= 0 && (uint64_t)max_batches < nbatches) nbatches = (uint64_t)max_batches;
    int32_t *ids = pt_malloc(sizeof(int32_t) * B * T), *labels = pt_malloc(sizeof(int32_t) * B * T);
    double total = 0;
    long tokens = 0;
    eval_aux aux = {.on = m.moe && m.cfg.output_router_logits};
    int rc = 0;
    for (uint64_t b = 0; b < nbatches; b++) {
        int row_len;
        double ls;
        int nt;
        int rows = documents && nrows - b * (uint64_t)B < (uint64_t)B ? (int)(nrows - b * (uint64_t)B) : (int)B;
        if (pt_loader_batch(l, b, ids, labels, &row_len) != 0) {
            rc = cli_fail();
            break;
        }
        // MoE: the real rows only, as HF's short last batch (the load-balancing loss counts every row given)
        if (m.moe && !documents) rows = pt_loader_last_real_rows(l);
        qwen3_set_positions(&m, pt_loader_last_positions(l));
        if (qwen3_forward(&m, ids, labels, rows, row_len, &ls, &nt, NULL) != 0) {
            rc = cli_fail();
            break;
        }
        total += ls;
        tokens += nt;
        if (aux.on) aux.sum += rows * qwen3_moe_aux_loss(&m), aux.rows += rows;
        if (b == 0 && logits_out) {
            const size_t V = (size_t)m.cfg.vocab_size;
            float *lg = pt_malloc(sizeof(float) * (size_t)B * row_len * V);
            double unused;
            int un;
            qwen3_set_positions(&m, pt_loader_last_positions(l));
            int wrc = qwen3_forward(&m, ids, NULL, (int)B, row_len, &unused, &un, lg);
            st_write_tensor t[2] = {
                {.name = "input_ids", .dtype = ST_I32, .ndim = 2, .shape = {B, row_len}, .data = ids},
                {.name = "logits", .dtype = ST_F32, .ndim = 3, .shape = {B, row_len, (int64_t)V}, .data = lg}};
            if (wrc == 0) wrc = st_write(logits_out, t, 2, NULL, 0);
            free(lg);
            if (wrc) {
                rc = cli_fail();
                break;
            }
        }
    }
    if (!rc) rc = print_result(&m, model_dir, total, tokens, &aux, nbatches, be->name, precision);
    free(ids);
    free(labels);
    pt_loader_free(l);
    qwen3_free(&m);
    pt_backend_destroy(be);
    return rc;
}
