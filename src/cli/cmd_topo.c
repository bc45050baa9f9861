// portatrain topo: the mesh of a layout, which ranks share a node, memory per
// rank and the bytes each collective moves per step, from the model config
// alone (the same plan the runtime uses: src/dist/mesh.h).
#include "backend/backend.h"
#include "cli/cli.h"
#include "dist/mesh.h"
#include "io/hf_model.h"
#include "model/qwen3.h"
#include "util/common.h"
#include "util/fileio.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf("usage: portatrain topo --world N --tp T --fsdp F [--dp D] (--config CONFIG.json | --model DIR) [options]\n\n"
           "  --hosts FILE            an MPI hostfile (\"host slots=N\" or \"host:N\" lines); ranks fill each host's\n"
           "                          slots in order, as mpirun --map-by slot does\n"
           "  --ranks-per-node K      instead of --hosts: K ranks per node (default: all ranks on one node)\n"
           "  --mesh-order LIST       placement, innermost dimension first (tp,fsdp,dp)\n"
           "  --per-device-train-batch-size B  --seq-len S  --gradient-accumulation-steps A\n"
           "                          the step whose traffic is computed (8, 2048, 1)\n"
           "  --activation-checkpointing none|full|selective[:every=N]|op  as for train (none)\n"
           "  --backend NAME          the training backend (cpu-ref, as for train): its attention keeps\n"
           "                          backend-specific state, part of the activations\n"
           "  --json                  machine-readable output\n");
}

#define MAX_HOSTS 4096
typedef struct {
    int n;
    char name[MAX_HOSTS][64];
    int slots[MAX_HOSTS];
} hostlist;

// An MPI hostfile as OpenMPI 4 reads it: one host per line, "NAME slots=N [max_slots=M]" or "NAME:N", '#'
// starts a comment. What mpirun would refuse or read otherwise is refused here with the line named: another
// token, a slot count that is not a whole positive number, a host listed twice (mpirun: "multiple
// definitions of the slot count"), a host without a slot count (mpirun gives it one slot per core, which
// topo cannot know).
static int parse_slots(const char *s, int *out) {
    char *end;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v <= 0 || v > (1 << 24)) return -1;
    *out = (int)v;
    return 0;
}

static int read_hostfile(const char *path, hostlist *h) {
    size_t len;
    char *text = pt_read_file(path, &len);
    if (!text) return -1;
    h->n = 0;
    int lineno = 0, rc = -1;
    int *first_line = pt_calloc(MAX_HOSTS, sizeof(int));
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        lineno++;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *save = NULL, *tok = strtok_r(line, " \t\r\v\f", &save);
        if (!tok) continue;
        if (h->n == MAX_HOSTS) {
            pt_set_error("%s: more than %d hosts", path, MAX_HOSTS);
            goto done;
        }
        int slots = 0;
        char *colon = strchr(tok, ':');
        if (colon) {
            *colon = 0;
            if (parse_slots(colon + 1, &slots) != 0) {
                pt_set_error("%s:%d: '%s:%s': the slot count must be a positive whole number", path, lineno, tok,
                             colon + 1);
                goto done;
            }
        }
        if (!*tok || strlen(tok) > 63) {
            pt_set_error("%s:%d: host name '%s' is empty or longer than 63 characters", path, lineno, tok);
            goto done;
        }
        for (char *kv = strtok_r(NULL, " \t\r\v\f", &save); kv; kv = strtok_r(NULL, " \t\r\v\f", &save)) {
            int v;
            if (!strncmp(kv, "slots=", 6) && !colon && !slots) {
                if (parse_slots(kv + 6, &slots) != 0) {
                    pt_set_error("%s:%d: '%s': the slot count must be a positive whole number", path, lineno, kv);
                    goto done;
                }
            } else if (!strncmp(kv, "max_slots=", 10) && parse_slots(kv + 10, &v) == 0) {
                // a cap on oversubscription: where ranks go is decided by slots
            } else {
                pt_set_error("%s:%d: unexpected '%s' (want 'NAME slots=N [max_slots=M]' or 'NAME:N')", path, lineno,
                             kv);
                goto done;
            }
        }
        if (!slots) {
            pt_set_error("%s:%d: host '%s' has no slot count: mpirun would give it one slot per core, which topo "
                         "cannot know (write '%s slots=N')", path, lineno, tok, tok);
            goto done;
        }
        for (int i = 0; i < h->n; i++)
            if (!strcmp(h->name[i], tok)) {
                pt_set_error("%s:%d: host '%s' is already listed on line %d (mpirun refuses two slot counts for one "
                             "node: give it one line with the total)", path, lineno, tok, first_line[i]);
                goto done;
            }
        snprintf(h->name[h->n], 64, "%s", tok);
        first_line[h->n] = lineno;
        h->slots[h->n++] = slots;
    }
    if (!h->n) {
        pt_set_error("%s: no hosts", path);
        goto done;
    }
    rc = 0;
done:
    free(first_line);
    free(text);
    return rc;
}

// node of each rank; -1 + error when the hosts have fewer slots than ranks
static int place(const hostlist *h, int world, int *node) {
    int r = 0;
    for (int i = 0; i < h->n && r < world; i++)
        for (int s = 0; s < h->slots[i] && r < world; s++) node[r++] = i;
    if (r < world) {
        pt_set_error("the hosts have %d slots for %d ranks", r, world);
        return -1;
    }
    return 0;
}

static const char *human(double b, char *buf) {
    static const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) b /= 1024, i++;
    sprintf(buf, "%.2f %s", b, u[i]);
    return buf;
}

int cmd_topo(int argc, char **argv) {
    int world = 0, B = 8, S = 2048, A = 1, rpn = 0, json = 0;
    pt_mesh mesh = {.tp = 1, .fsdp = 1, .dp = 0, .order = {PT_DIM_TP, PT_DIM_FSDP, PT_DIM_DP}};
    const char *config = NULL, *model = NULL, *hosts = NULL, *order = NULL, *ac = NULL, *backend = "cpu-ref";
    pt_argparse p;
    argp_init(&p, argc, argv);
    const char *o;
    while ((o = argp_next(&p))) {
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) { help(); return 0; }
        else if (!strcmp(o, "--world")) world = (int)argp_int_range(&p, 1, 1 << 24);
        else if (!strcmp(o, "--tp")) mesh.tp = (int)argp_int_range(&p, 1, 65536);
        else if (!strcmp(o, "--fsdp")) mesh.fsdp = (int)argp_int_range(&p, 1, 65536);
        else if (!strcmp(o, "--dp")) mesh.dp = (int)argp_int_range(&p, 1, 65536);
        else if (!strcmp(o, "--config")) config = argp_value(&p);
        else if (!strcmp(o, "--model")) model = argp_value(&p);
        else if (!strcmp(o, "--hosts")) hosts = argp_value(&p);
        else if (!strcmp(o, "--ranks-per-node")) rpn = (int)argp_int_range(&p, 1, 1 << 24);
        else if (!strcmp(o, "--mesh-order")) order = argp_value(&p);
        else if (!strcmp(o, "--per-device-train-batch-size")) B = (int)argp_int_range(&p, 1, INT_MAX);
        else if (!strcmp(o, "--seq-len")) S = (int)argp_int_range(&p, 1, INT_MAX);
        else if (!strcmp(o, "--gradient-accumulation-steps")) A = (int)argp_int_range(&p, 1, INT_MAX);
        else if (!strcmp(o, "--activation-checkpointing")) ac = argp_value(&p);
        else if (!strcmp(o, "--backend")) backend = argp_value(&p);
        else if (!strcmp(o, "--json")) json = argp_flag(&p);
        else return argp_unknown(&p, o);
    }
    if (world <= 0) return cli_usage_error("topo", "--world N is required");
    if (!config && !model) return cli_usage_error("topo", "--config CONFIG.json or --model DIR is required");
    if (B <= 0 || S <= 0 || A <= 0) return cli_usage_error("topo", "batch, sequence length and accumulation must be positive");
    // tp, fsdp >= 1 (parsed in range); their product in 64 bits, never a zero divisor
    const int64_t tf = (int64_t)mesh.tp * mesh.fsdp;
    if (mesh.dp == 0) mesh.dp = world % tf == 0 ? (int)(world / tf) : 1;
    if (order && pt_mesh_parse_order(order, mesh.order) != 0) return cli_fail();
    int ac_policy, ac_every;
    if (qwen3_parse_activation_checkpointing(ac, &ac_policy, &ac_every) != 0) return cli_usage_error("topo", "%s", pt_last_error());
    qwen3_config cfg;
    char *cpath = model ? pt_path_join(model, "config.json") : pt_strdup(config);
    const int crc = qwen3_config_load(&cfg, cpath);
    free(cpath);
    if (crc != 0) return cli_fail();
    if (pt_mesh_validate(&mesh, world, &cfg) != 0) return cli_fail();
    hostlist *h = pt_calloc(1, sizeof *h);
    if (hosts) {
        if (read_hostfile(hosts, h) != 0) { free(h); return cli_fail(); }
    } else {
        const int k = rpn > 0 ? rpn : world;
        h->n = (world + k - 1) / k;
        if (h->n > MAX_HOSTS) { free(h); return cli_usage_error("topo", "too many nodes"); }
        for (int i = 0; i < h->n; i++) snprintf(h->name[i], 64, "node%d", i), h->slots[i] = k;
    }
    int *node = pt_calloc(world, sizeof(int));
    if (place(h, world, node) != 0) { free(node); free(h); return cli_fail(); }
    const int nodes = node[world - 1] + 1;  // the hosts that get ranks (slots fill in order)

    // Per group kind: how many groups cross nodes.
    const int dims[3] = {PT_DIM_TP, PT_DIM_FSDP, PT_DIM_DP};
    const char *dname[3] = {"tp", "fsdp", "dp"};
    int groups[3] = {0, 0, 0}, crossing[3] = {0, 0, 0};
    for (int k = 0; k < 3; k++) {
        const int d = dims[k];
        for (int r = 0; r < world; r++) {
            int c[3];
            pt_mesh_coords(&mesh, r, c);
            if (c[d] != 0) continue;  // r leads its group
            groups[k]++;
            int cross = 0;
            const int n = d == PT_DIM_TP ? mesh.tp : d == PT_DIM_FSDP ? mesh.fsdp : mesh.dp;
            for (int i = 1; i < n; i++) {
                c[d] = i;
                cross |= node[pt_mesh_rank(&mesh, c)] != node[r];
            }
            crossing[k] += cross;
        }
    }
    // Memory and bytes of rank 0 (every rank's are the same up to the last
    // vocabulary shard's rounding).
    pt_plan plan;
    if (pt_plan_build(&plan, &cfg, mesh.tp, 0, mesh.fsdp, 0) != 0) { free(node); free(h); return cli_fail(); }
    size_t slots[3], stage, recv;
    pt_plan_slots(&plan, slots, &stage, &recv);
    const double state_b = 4.0 * (plan.shard_numel * 4.0 + (slots[0] + slots[1] + slots[2]) * 2.0 + stage + recv);
    // the activation allocation of the training model (the same carving, policy and backend)
    pt_backend *be = pt_backend_create(backend);
    if (!be) { pt_plan_free(&plan); free(node); free(h); return cli_fail(); }
    const double act_b = (double)qwen3_activation_bytes(
        &plan.local, B, S, be->ops->attention_saved_floats(be, B, S, plan.local.num_attention_heads, plan.local.head_dim),
        ac_policy, ac_every);
    const bool device_memory = !be->host_memory;
    pt_backend_destroy(be);
    // Start-up: every rank streams the HF weights a block of rows at a time into its shards
    // (hf_model_stream_weights, pt_parallel_load_tensor): one fp32 buffer of the largest block (64 MiB or
    // $PT_WEIGHT_BLOCK_BYTES, or the largest tensor if smaller), a second one of the embedding's while a tied
    // lm_head.weight is compared with it, and on a device backend a host copy of the rank's parameter shard
    // (uploaded once), beside the parameter state. Never the whole model, nor a whole embedding.
    // The final HF save streams too (pt_parallel_save_hf): rank 0 holds a block of rows in fp32 and the
    // gather's receive buffer of it; every rank sends its part of one block at a time.
    double load_b = 0, save_b = 0;
    {
        pt_backend *ref = pt_backend_cpu_ref_create();  // layout only: nothing is allocated
        qwen3_model fm;
        if (qwen3_create_layout(&fm, &cfg, ref) == 0) {
            const double block_b = 4.0 * (double)hf_weight_block_numel(&fm, NULL);
            load_b = block_b;
            if (cfg.tie_word_embeddings)  // the embedding's block, again
                load_b += 4.0 * (double)hf_weight_block_numel(&fm, "model.embed_tokens.weight");
            save_b = 2 * block_b;
            if (device_memory) load_b += 4.0 * (double)plan.shard_numel;
            qwen3_free(&fm);
        }
        pt_backend_destroy(ref);
    }
    int recomputed = 0;  // layers whose forward runs again in backward (FULL)
    {
        qwen3_model acm;
        memset(&acm, 0, sizeof acm);
        acm.ac_policy = ac_policy, acm.ac_every = ac_every;
        for (int l = 0; l < cfg.num_hidden_layers; l++) recomputed += qwen3_layer_ac_mode(&acm, l) == QWEN3_AC_FULL;
    }
    pt_step_bytes sb;
    pt_plan_step_bytes(&plan, &mesh, (long)B * S, A, recomputed, &sb);
    const double fsdp_b = sb.fsdp_allgather + sb.fsdp_reduce_scatter, dp_b = sb.dp_allreduce;
    // on the wire per rank, ring algorithms: all-reduce 2(P-1)/P x buffer, gather/scatter (P-1)/P x buffer
    const double wire_tp = mesh.tp > 1 ? (sb.tp_allreduce * 2 + sb.tp_allgather) * (mesh.tp - 1) / mesh.tp : 0;
    const double wire_fsdp = mesh.fsdp > 1 ? fsdp_b * (mesh.fsdp - 1) / mesh.fsdp : 0;
    const double wire_dp = mesh.dp > 1 ? dp_b * 2 * (mesh.dp - 1) / mesh.dp : 0;
    const double wire[3] = {wire_tp, wire_fsdp, wire_dp};
    // A collective's link class is that of its worst-placed group: the groups of a kind run in lockstep
    // (every step ends in collectives over the other dimensions), so one group that crosses nodes paces
    // them all, whichever group rank 0 is in.
    double intra = 0, inter = 0;
    for (int k = 0; k < 3; k++) {
        if (crossing[k]) inter += wire[k];
        else intra += wire[k];
    }
    char order_s[32];
    pt_mesh_order_str(&mesh, order_s, sizeof order_s);
    if (json) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddNumberToObject(r, "world", world);
        cJSON_AddNumberToObject(r, "tp", mesh.tp);
        cJSON_AddNumberToObject(r, "fsdp", mesh.fsdp);
        cJSON_AddNumberToObject(r, "dp", mesh.dp);
        cJSON_AddStringToObject(r, "mesh_order", order_s);
        cJSON_AddNumberToObject(r, "nodes", nodes);
        cJSON *g = cJSON_AddObjectToObject(r, "groups");
        for (int k = 0; k < 3; k++) {
            cJSON *e = cJSON_AddObjectToObject(g, dname[k]);
            cJSON_AddNumberToObject(e, "count", groups[k]);
            cJSON_AddNumberToObject(e, "crossing_nodes", crossing[k]);
        }
        cJSON *m = cJSON_AddObjectToObject(r, "memory_bytes_per_rank");
        cJSON_AddNumberToObject(m, "parameter_state", state_b);
        cJSON_AddNumberToObject(m, "activations", act_b);
        cJSON_AddNumberToObject(m, "startup_load_buffers", load_b);
        cJSON_AddNumberToObject(m, "final_save_buffers_rank0", save_b);
        cJSON_AddStringToObject(r, "backend", backend);
        cJSON_AddStringToObject(r, "activation_checkpointing", ac ? ac : "none");
        cJSON *b = cJSON_AddObjectToObject(r, "comm_bytes_per_step");  // pt_comm counter units (metrics.jsonl)
        cJSON_AddNumberToObject(b, "allreduce", sb.tp_allreduce + sb.dp_allreduce);
        cJSON_AddNumberToObject(b, "allgather", sb.tp_allgather + sb.fsdp_allgather);
        cJSON_AddNumberToObject(b, "reduce_scatter", sb.fsdp_reduce_scatter);
        cJSON *w = cJSON_AddObjectToObject(r, "wire_bytes_per_step_per_rank");
        cJSON_AddNumberToObject(w, "intra_node", intra);
        cJSON_AddNumberToObject(w, "inter_node", inter);
        char *text = cJSON_Print(r);
        printf("%s\n", text);
        free(text);
        cJSON_Delete(r);
    } else {
        char b1[32], b2[32], b3[32];
        printf("mesh: %d ranks = tp %d x fsdp %d x dp %d, placement innermost first %s, %d node(s)\n", world, mesh.tp,
               mesh.fsdp, mesh.dp, order_s, nodes);
        printf("model: %d layers, hidden %d, heads %d (kv %d), intermediate %d, vocab %d; per TP rank: %d heads, %d kv "
               "heads, %d intermediate, %d vocab rows\n", cfg.num_hidden_layers, cfg.hidden_size,
               cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size, cfg.vocab_size,
               plan.local.num_attention_heads, plan.local.num_key_value_heads, plan.local.intermediate_size,
               plan.local.vocab_size);
        printf("\nnodes:\n");
        for (int i = 0; i < h->n; i++) {
            int lo = -1, hi = -1;
            for (int r = 0; r < world; r++)
                if (node[r] == i) { if (lo < 0) lo = r; hi = r; }
            if (lo >= 0) printf("  %-20s ranks %d-%d\n", h->name[i], lo, hi);
        }
        printf("\ngroups (a group inside one node talks over intra-node links):\n");
        for (int k = 0; k < 3; k++)
            printf("  %-5s %4d groups of %d, %d crossing nodes\n", dname[k], groups[k],
                   k == 0 ? mesh.tp : k == 1 ? mesh.fsdp : mesh.dp, crossing[k]);
        if (world <= 64) {
            printf("\nranks (tp, fsdp, dp) @ node:\n");
            for (int r = 0; r < world; r++) {
                int c[3];
                pt_mesh_coords(&mesh, r, c);
                printf("  %3d (%d, %d, %d) @ %s\n", r, c[0], c[1], c[2], h->name[node[r]]);
            }
        }
        printf("\nmemory per rank: parameter state %s (fp32 params, grads, AdamW m and v shards%s), activations %s "
               "(batch %d x %d tokens, backend %s, activation checkpointing %s)\n", human(state_b, b1),
               mesh.fsdp > 1 ? " + FSDP working slots" : "", human(act_b, b2), B, S, backend, ac ? ac : "none");
        printf("  at start-up each rank also holds %s while it streams the HF weights into its shards (the largest "
               "block of rows in fp32%s%s), beside its parameter state\n", human(load_b, b1),
               cfg.tie_word_embeddings ? ", the embedding's again for the tied lm_head check" : "",
               device_memory ? ", a host copy of its parameter shard" : "");
        printf("  for the final HF model rank 0 also holds %s (the largest block of rows in fp32, twice: as "
               "gathered and as written)\n", human(save_b, b1));
        printf("\nbytes per optimizer step per rank (batch %d x %d, accumulation %d):\n", B, S, A);
        printf("  %-34s %14s  %s\n", "collective", "buffer", "on the wire (ring), link");
        char cls[3][96];
        for (int k = 0; k < 3; k++) {
            if (!crossing[k]) snprintf(cls[k], sizeof cls[k], "intra-node");
            else if (crossing[k] == groups[k]) snprintf(cls[k], sizeof cls[k], "inter-node");
            else snprintf(cls[k], sizeof cls[k], "inter-node (%d of %d groups cross nodes)", crossing[k], groups[k]);
        }
        if (mesh.tp > 1) {
            printf("  %-34s %14s  %s, %s\n", "tp all-reduce (activations)", human(sb.tp_allreduce, b1),
                   human(sb.tp_allreduce * 2 * (mesh.tp - 1) / mesh.tp, b2), cls[0]);
            printf("  %-34s %14s  %s, %s\n", "tp all-gather (cross-entropy stats)", human(sb.tp_allgather, b1),
                   human(sb.tp_allgather * (mesh.tp - 1) / mesh.tp, b2), cls[0]);
        }
        if (mesh.fsdp > 1) {
            printf("  %-34s %14s  %s, %s\n", "fsdp all-gather (parameters)", human(sb.fsdp_allgather, b1),
                   human(sb.fsdp_allgather * (mesh.fsdp - 1) / mesh.fsdp, b2), cls[1]);
            printf("  %-34s %14s  %s, %s\n", "fsdp reduce-scatter (gradients)", human(sb.fsdp_reduce_scatter, b1),
                   human(sb.fsdp_reduce_scatter * (mesh.fsdp - 1) / mesh.fsdp, b2), cls[1]);
        }
        if (mesh.dp > 1)
            printf("  %-34s %14s  %s, %s\n", "dp all-reduce (gradients)", human(sb.dp_allreduce, b1), human(wire_dp, b2),
                   cls[2]);
        printf("  total on the wire: intra-node %s, inter-node %s\n", human(intra, b1), human(inter, b3));
    }
    pt_plan_free(&plan);
    free(node);
    free(h);
    return 0;
}
