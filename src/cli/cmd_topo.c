// portatrain topo: the mesh of a layout, which ranks share a node, memory per
// rank and the bytes each collective moves per step, from the model config
// alone (the same plan the runtime uses: src/dist/mesh.h).
#include "backend/backend.h"
#include "cli/cli.h"
#include "dist/mesh.h"
#include "dist/placement.h"
#include "io/hf_model.h"
#include "model/qwen3.h"
#include "model/qwen3_moe.h"
#include "util/common.h"
#include "util/fileio.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf("usage: portatrain topo --world N --tp T --fsdp F [--dp D] (--config CONFIG.json | --model DIR) [options]\n\n"
           "  --ep N                  Qwen3-MoE expert parallelism, as for train: carved from the data ranks\n"
           "                          (fsdp x dp), each EP rank owns num_experts/N experts whole\n"
           "  --hosts FILE            an MPI hostfile (\"host slots=N\" or \"host:N\" lines); ranks fill each host's\n"
           "                          slots in order, as mpirun --map-by slot does\n"
           "  --ranks-per-node K      instead of --hosts: K ranks per node (default: all ranks on one node)\n"
           "  --mesh-order LIST       placement, innermost dimension first (tp,fsdp,dp)\n"
           "  --per-device-train-batch-size B  --seq-len S  --gradient-accumulation-steps A\n"
           "                          the step whose traffic is computed (8, 2048, 1)\n"
           "  --activation-checkpointing none|full|selective[:every=N]|op  as for train (none)\n"
           "  --backend NAME          the training backend (cpu-ref, as for train): its attention keeps\n"
           "                          backend-specific state, part of the activations; cuda and opencl are\n"
           "                          planned without opening a device\n"
           "  --device-memory GIB     the device's memory per rank: the plan says whether a rank fits\n"
           "  --json                  machine-readable output\n");
}

static const char *human(double b, char *buf) {
    static const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) b /= 1024, i++;
    sprintf(buf, "%.2f %s", b, u[i]);
    return buf;
}

typedef struct {
    int world, B, S, A, rpn, json, tp, fsdp, dp, ep;
    double device_gib;  // --device-memory (0: not given)
    const char *config, *model, *hosts, *order, *ac, *backend;
} topo_opts;

// -1: parsed; else the exit status (--help, a usage error).
static int parse(int argc, char **argv, topo_opts *t) {
    *t = (topo_opts){.B = 8, .S = 2048, .A = 1, .backend = "cpu-ref"};
    pt_argparse p;
    argp_init(&p, argc, argv);
    const char *o;
    while ((o = argp_next(&p))) {
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) { help(); return 0; }
        else if (!strcmp(o, "--world")) t->world = (int)argp_int_range(&p, 1, 1 << 24);
        else if (!strcmp(o, "--tp")) t->tp = (int)argp_int_range(&p, 1, 65536);
        else if (!strcmp(o, "--fsdp")) t->fsdp = (int)argp_int_range(&p, 1, 65536);
        else if (!strcmp(o, "--dp")) t->dp = (int)argp_int_range(&p, 1, 65536);
        else if (!strcmp(o, "--ep")) t->ep = (int)argp_int_range(&p, 1, 65536);
        else if (!strcmp(o, "--config")) t->config = argp_value(&p);
        else if (!strcmp(o, "--model")) t->model = argp_value(&p);
        else if (!strcmp(o, "--hosts")) t->hosts = argp_value(&p);
        else if (!strcmp(o, "--ranks-per-node")) t->rpn = (int)argp_int_range(&p, 1, 1 << 24);
        else if (!strcmp(o, "--mesh-order")) t->order = argp_value(&p);
        else if (!strcmp(o, "--per-device-train-batch-size")) t->B = (int)argp_int_range(&p, 1, INT_MAX);
        else if (!strcmp(o, "--seq-len")) t->S = (int)argp_int_range(&p, 1, INT_MAX);
        else if (!strcmp(o, "--gradient-accumulation-steps")) t->A = (int)argp_int_range(&p, 1, INT_MAX);
        else if (!strcmp(o, "--activation-checkpointing")) t->ac = argp_value(&p);
        else if (!strcmp(o, "--backend")) t->backend = argp_value(&p);
        else if (!strcmp(o, "--device-memory")) t->device_gib = argp_double_min(&p, 1e-3);
        else if (!strcmp(o, "--json")) t->json = argp_flag(&p);
        else return argp_unknown(&p, o);
    }
    if (t->world <= 0) return cli_usage_error("topo", "--world N is required");
    if (!t->config && !t->model) return cli_usage_error("topo", "--config CONFIG.json or --model DIR is required");
    return -1;
}

// What a rank holds and moves: rank 0's (every rank's are the same up to the last vocabulary shard's rounding).
typedef struct {
    pt_plan plan;
    double state_b, act_b, load_b, save_b;
    double moe_host_b, moe_backend_b;  // the sparse blocks' buffers, part of act_b
    double moe_growth_b;               // the most uneven routing can add to them under EP
    double expert_b;                   // the parameter state of the experts this rank owns whole (EP)
    bool device_memory;
    pt_step_bytes sb;
    double wire[3], intra, inter;  // wire: per PT_DIM_*, on the wire per rank
    double ep_wire[2];             // EP: the expected all-to-all and the experts' all-reduce, on the wire per rank
} topo_cost;

// Start-up: every rank streams the HF weights a block of rows at a time into its shards
// (hf_model_stream_weights, pt_parallel_load_tensor): one fp32 buffer of the largest block (64 MiB or
// $PT_WEIGHT_BLOCK_BYTES, or the largest tensor if smaller), a second one of the embedding's while a tied
// lm_head.weight is compared with it, and on a device backend a host copy of the rank's parameter shard
// (uploaded once), beside the parameter state. Never the whole model, nor a whole embedding.
// The final HF save streams too (pt_parallel_save_hf): rank 0 holds a block of rows in fp32 and the
// gather's receive buffer of it; every rank sends its part of one block at a time.
static void load_save_bytes(const qwen3_config *cfg, topo_cost *c) {
    pt_backend *ref = pt_backend_cpu_ref_create();  // layout only: nothing is allocated
    qwen3_model fm;
    if (qwen3_create_layout(&fm, cfg, ref) == 0) {
        const double block_b = 4.0 * (double)hf_weight_block_numel(&fm, NULL);
        c->load_b = block_b;
        if (cfg->tie_word_embeddings)  // the embedding's block, again
            c->load_b += 4.0 * (double)hf_weight_block_numel(&fm, "model.embed_tokens.weight");
        c->save_b = 2 * block_b;
        if (c->device_memory) c->load_b += 4.0 * (double)c->plan.shard_numel;
        qwen3_free(&fm);
    }
    pt_backend_destroy(ref);
}

// cuda[:N] or opencl[:P:D]: a backend whose device topo never opens.
static bool device_backend(const char *spec) {
    for (const char *const *n = (const char *const[]){"cuda", "opencl", NULL}; *n; n++) {
        const size_t l = strlen(*n);
        if (!strncmp(spec, *n, l) && (spec[l] == 0 || spec[l] == ':')) return true;
    }
    return false;
}

// Expert parallelism's groups, [0] the EP groups (the same TP coordinate, data rank d / ep) and [1] the
// ranks that own the same experts (d % ep): how many, and how many span more than one node.
static void ep_groups_crossing(const pt_mesh *m, int world, const int *node, int groups[2], int crossing[2]) {
    const int data = m->fsdp * m->dp;
    groups[0] = m->tp * (data / m->ep), groups[1] = m->tp * m->ep;
    for (int k = 0; k < 2; k++) {
        int *first = pt_malloc(sizeof(int) * (size_t)groups[k]), *cross = pt_calloc(groups[k], sizeof(int));
        for (int g = 0; g < groups[k]; g++) first[g] = -1;
        for (int r = 0; r < world; r++) {
            int co[3];
            pt_mesh_coords(m, r, co);
            const int d = co[PT_DIM_DP] * m->fsdp + co[PT_DIM_FSDP];
            const int g = co[PT_DIM_TP] + m->tp * (k == 0 ? d / m->ep : d % m->ep);
            if (first[g] < 0) first[g] = node[r];
            else cross[g] |= first[g] != node[r];
        }
        crossing[k] = 0;
        for (int g = 0; g < groups[k]; g++) crossing[k] += cross[g];
        free(first);
        free(cross);
    }
}

static int cost(const topo_opts *t, const qwen3_config *cfg, const pt_mesh *mesh, const int crossing[3],
                const int ep_crossing[2], topo_cost *c) {
    memset(c, 0, sizeof *c);
    int ac_policy, ac_every;
    if (qwen3_parse_activation_checkpointing(t->ac, &ac_policy, &ac_every) != 0) return -1;
    // rank 0's plan (EP rank 0): as pt_parallel_create builds it, so the state is pt_parallel_state_bytes
    if (pt_plan_build_ep(&c->plan, cfg, mesh->tp, 0, mesh->fsdp, 0, mesh->ep, 0) != 0) return -1;
    size_t slots[3], stage, recv;
    pt_plan_slots(&c->plan, slots, &stage, &recv);
    c->state_b = 4.0 * (c->plan.shard_numel * 4.0 + (slots[0] + slots[1] + slots[2]) * 2.0 + stage + recv);
    if (mesh->ep > 1) c->expert_b = 4.0 * 4.0 * (double)(c->plan.shard_numel - c->plan.expert_offset);
    // the activation allocation of the training model (the same carving, policy and backend)
    const qwen3_config *lc = &c->plan.local;
    size_t saved;
    if (device_backend(t->backend)) {
        // a plan needs no device: the device backends keep B x H x T softmax statistics per attention
        // (opencl.c, cuda_backend.cu attention_saved_floats) and hold their tensors in device memory
        saved = (size_t)t->B * lc->num_attention_heads * t->S;
        c->device_memory = true;
    } else {
        pt_backend *be = pt_backend_create(t->backend);
        if (!be) return -1;
        saved = be->ops->attention_saved_floats(be, t->B, t->S, lc->num_attention_heads, lc->head_dim);
        c->device_memory = !be->host_memory;
        pt_backend_destroy(be);
    }
    c->act_b = (double)qwen3_activation_bytes(lc, t->B, t->S, saved, ac_policy, ac_every, mesh->ep);
    size_t moe_host, moe_backend;
    qwen3_moe_buffer_bytes(lc, t->B * t->S, mesh->ep, &moe_host, &moe_backend);
    c->moe_host_b = (double)moe_host, c->moe_backend_b = (double)moe_backend;
    c->moe_growth_b = (double)qwen3_moe_ep_growth_bytes(lc, t->B * t->S, mesh->ep);
    load_save_bytes(cfg, c);
    int recomputed = 0;  // layers whose forward runs again in backward (FULL)
    qwen3_model acm;
    memset(&acm, 0, sizeof acm);
    acm.ac_policy = ac_policy, acm.ac_every = ac_every;
    for (int l = 0; l < cfg->num_hidden_layers; l++) recomputed += qwen3_layer_ac_mode(&acm, l) == QWEN3_AC_FULL;
    const pt_step_bytes *sb = &c->sb;
    pt_plan_step_bytes(&c->plan, mesh, (long)t->B * t->S, t->A, recomputed, &c->sb);
    // on the wire per rank, ring algorithms: all-reduce 2(P-1)/P x buffer, gather/scatter (P-1)/P x buffer
    const double fsdp_b = sb->fsdp_allgather + sb->fsdp_reduce_scatter;
    c->wire[0] = mesh->tp > 1 ? (sb->tp_allreduce * 2 + sb->tp_allgather) * (mesh->tp - 1) / mesh->tp : 0;
    c->wire[1] = mesh->fsdp > 1 ? fsdp_b * (mesh->fsdp - 1) / mesh->fsdp : 0;
    c->wire[2] = mesh->dp > 1 ? sb->dp_allreduce * 2 * (mesh->dp - 1) / mesh->dp : 0;
    // EP: a rank's own block of the all-to-all stays local; the experts' gradient all-reduce is a ring over
    // the fsdp x dp / ep ranks owning the same experts. Counted with the data dimensions' links.
    const int reps = mesh->fsdp * mesh->dp / mesh->ep;
    c->ep_wire[0] = sb->ep_alltoall * (mesh->ep - 1) / mesh->ep;
    c->ep_wire[1] = reps > 1 ? sb->ep_allreduce * 2 * (reps - 1) / reps : 0;
    // A collective's link class is that of its worst-placed group: the groups of a kind run in lockstep
    // (every step ends in collectives over the other dimensions), so one group that crosses nodes paces
    // them all, whichever group rank 0 is in.
    for (int k = 0; k < 3; k++) *(crossing[k] ? &c->inter : &c->intra) += c->wire[k];
    for (int k = 0; k < 2; k++) *(ep_crossing[k] ? &c->inter : &c->intra) += c->ep_wire[k];
    return 0;
}

static const char *const DIM_NAME[3] = {"tp", "fsdp", "dp"};

// What must fit the device per rank: the parameter state and the activations, less the MoE blocks' host buffers
// when the backend's memory is not host memory.
static double device_need(const topo_cost *c) {
    return c->state_b + c->act_b - (c->device_memory ? c->moe_host_b : 0);
}

static void print_json(const topo_opts *t, const pt_mesh *mesh, int nodes, const int groups[3],
                       const int crossing[3], const int ep_groups[2], const int ep_crossing[2], const topo_cost *c) {
    char order_s[32];
    pt_mesh_order_str(mesh, order_s, sizeof order_s);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "world", t->world);
    cJSON_AddNumberToObject(r, "tp", mesh->tp);
    cJSON_AddNumberToObject(r, "fsdp", mesh->fsdp);
    cJSON_AddNumberToObject(r, "dp", mesh->dp);
    cJSON_AddNumberToObject(r, "ep", mesh->ep);
    cJSON_AddStringToObject(r, "mesh_order", order_s);
    cJSON_AddNumberToObject(r, "nodes", nodes);
    cJSON *g = cJSON_AddObjectToObject(r, "groups");
    for (int k = 0; k < 3; k++) {
        cJSON *e = cJSON_AddObjectToObject(g, DIM_NAME[k]);
        cJSON_AddNumberToObject(e, "count", groups[k]);
        cJSON_AddNumberToObject(e, "crossing_nodes", crossing[k]);
    }
    for (int k = 0; k < 2 && mesh->ep > 1; k++) {  // the EP groups, the ranks owning the same experts
        cJSON *e = cJSON_AddObjectToObject(g, k == 0 ? "ep" : "ep_replicas");
        cJSON_AddNumberToObject(e, "count", ep_groups[k]);
        cJSON_AddNumberToObject(e, "crossing_nodes", ep_crossing[k]);
    }
    cJSON *m = cJSON_AddObjectToObject(r, "memory_bytes_per_rank");
    cJSON_AddNumberToObject(m, "parameter_state", c->state_b);
    cJSON_AddNumberToObject(m, "activations", c->act_b);
    cJSON_AddNumberToObject(m, "moe_block_buffers", c->moe_host_b + c->moe_backend_b);  // part of activations
    cJSON_AddNumberToObject(m, "moe_block_host_buffers", c->moe_host_b);
    cJSON_AddNumberToObject(m, "moe_block_growth_worst_case", c->moe_growth_b);  // not part of activations
    cJSON_AddNumberToObject(m, "owned_experts_state", c->expert_b);  // part of parameter_state
    cJSON_AddNumberToObject(m, "startup_load_buffers", c->load_b);
    cJSON_AddNumberToObject(m, "final_save_buffers_rank0", c->save_b);
    cJSON_AddStringToObject(r, "backend", t->backend);
    cJSON_AddBoolToObject(r, "device_opened", !device_backend(t->backend));
    if (t->device_gib > 0) {
        cJSON_AddNumberToObject(m, "device_memory", t->device_gib * 1073741824.0);
        cJSON_AddBoolToObject(m, "fits", device_need(c) <= t->device_gib * 1073741824.0);
    }
    cJSON_AddStringToObject(r, "activation_checkpointing", t->ac ? t->ac : "none");
    cJSON *b = cJSON_AddObjectToObject(r, "comm_bytes_per_step");  // pt_comm counter units (metrics.jsonl)
    cJSON_AddNumberToObject(b, "allreduce", c->sb.tp_allreduce + c->sb.dp_allreduce + c->sb.ep_allreduce);
    cJSON_AddNumberToObject(b, "allgather", c->sb.tp_allgather + c->sb.fsdp_allgather);
    cJSON_AddNumberToObject(b, "reduce_scatter", c->sb.fsdp_reduce_scatter);
    // the EP token all-to-all (counter alltoall) depends on routing: not an exact prediction
    cJSON *a = cJSON_AddObjectToObject(r, "alltoall_bytes_per_step");
    cJSON_AddNumberToObject(a, "expected_uniform_routing", c->sb.ep_alltoall);
    cJSON_AddNumberToObject(a, "routing_independent", c->sb.ep_alltoall_min);
    cJSON_AddNumberToObject(a, "worst_case", c->sb.ep_alltoall_max);
    cJSON *w = cJSON_AddObjectToObject(r, "wire_bytes_per_step_per_rank");
    cJSON_AddNumberToObject(w, "intra_node", c->intra);
    cJSON_AddNumberToObject(w, "inter_node", c->inter);
    char *text = cJSON_Print(r);
    printf("%s\n", text);
    free(text);
    cJSON_Delete(r);
}

// The mesh, the model's split, the nodes and each group kind's placement.
static void print_layout(const topo_opts *t, const qwen3_config *cfg, const pt_mesh *mesh, const pt_hostlist *h,
                         const int *node, const int groups[3], const int crossing[3], const topo_cost *c) {
    char order_s[32];
    pt_mesh_order_str(mesh, order_s, sizeof order_s);
    const int world = t->world, nodes = node[world - 1] + 1;
    const qwen3_config *lc = &c->plan.local;
    printf("mesh: %d ranks = tp %d x fsdp %d x dp %d, placement innermost first %s, %d node(s)", world, mesh->tp,
           mesh->fsdp, mesh->dp, order_s, nodes);
    if (mesh->ep > 1) printf("; ep %d (expert parallelism over the data ranks)", mesh->ep);
    printf("\n");
    printf("model: %d layers, hidden %d, heads %d (kv %d), intermediate %d, vocab %d; per TP rank: %d heads, %d kv "
           "heads, %d intermediate, %d vocab rows\n", cfg->num_hidden_layers, cfg->hidden_size,
           cfg->num_attention_heads, cfg->num_key_value_heads, cfg->intermediate_size, cfg->vocab_size,
           lc->num_attention_heads, lc->num_key_value_heads, lc->intermediate_size, lc->vocab_size);
    if (cfg->moe) {
        int sparse = 0;
        for (int l = 0; l < cfg->num_hidden_layers; l++) sparse += qwen3_layer_is_sparse(cfg, l);
        printf("moe: %d sparse layers, %d experts, %d per token, expert intermediate %d (%d per TP rank)\n", sparse,
               cfg->num_experts, cfg->num_experts_per_tok, cfg->moe_intermediate_size, lc->moe_intermediate_size);
    }
    printf("\nnodes:\n");
    for (int i = 0; i < h->n; i++) {
        int lo = -1, hi = -1;
        for (int r = 0; r < world; r++)
            if (node[r] == i) { if (lo < 0) lo = r; hi = r; }
        if (lo >= 0) printf("  %-20s ranks %d-%d\n", h->name[i], lo, hi);
    }
    printf("\ngroups (a group inside one node talks over intra-node links):\n");
    for (int k = 0; k < 3; k++)
        printf("  %-5s %4d groups of %d, %d crossing nodes\n", DIM_NAME[k], groups[k],
               k == 0 ? mesh->tp : k == 1 ? mesh->fsdp : mesh->dp, crossing[k]);
    if (world <= 64) {
        printf("\nranks (tp, fsdp, dp) @ node:\n");
        for (int r = 0; r < world; r++) {
            int co[3];
            pt_mesh_coords(mesh, r, co);
            printf("  %3d (%d, %d, %d) @ %s\n", r, co[0], co[1], co[2], h->name[node[r]]);
        }
    }
}

// Whether a rank's parameter state and activations fit the --device-memory given; for a device backend, that
// the plan opened no device.
static void device_note(const topo_opts *t, const topo_cost *c) {
    char b1[32], b2[32];
    const double need = device_need(c);
    if (t->device_gib > 0)
        printf("  device memory %s per rank (--device-memory): parameter state + activations%s %s %s\n",
               human(t->device_gib * 1073741824.0, b1),
               c->device_memory && c->moe_host_b > 0 ? " (less the MoE blocks' host buffers)" : "", human(need, b2),
               need <= t->device_gib * 1073741824.0 ? "fit" : "do NOT fit");
    if (device_backend(t->backend))
        printf("  planned for %s without opening a device%s\n", t->backend,
               t->device_gib > 0 ? "" : " (pass --device-memory GIB, e.g. 80 for an H100, to check the fit)");
}

// Memory per rank and the bytes of each collective, with its link class.
// Expert parallelism: who owns which experts, their memory, and the EP collectives (before the wire total).
static void print_ep(const qwen3_config *cfg, const pt_mesh *mesh, const int ep_groups[2], const int ep_crossing[2],
                     const char *const cls_of[2], const topo_cost *c) {
    char b1[32], b2[32], b3[32];
    const int data = mesh->fsdp * mesh->dp, reps = data / mesh->ep, K = cfg->num_experts_per_tok,
              El = cfg->num_experts / mesh->ep;
    const pt_step_bytes *sb = &c->sb;
    printf("  expert parallelism: ep %d carved from the %d data ranks, %d EP group(s) (%d crossing nodes); each rank "
           "owns %d of the %d experts of every sparse layer whole (TP-local, not FSDP-sharded); %d rank(s) own the "
           "same experts (%d of %d such groups crossing nodes)\n", mesh->ep, data, ep_groups[0], ep_crossing[0], El,
           cfg->num_experts, reps, ep_crossing[1], ep_groups[1]);
    printf("  %-34s %14s  %s, %s\n", "ep all-reduce (owned experts' grads)", human(sb->ep_allreduce, b1),
           human(c->ep_wire[1], b2), reps > 1 ? cls_of[1] : "none (one owner)");
    printf("  %-34s %14s  %s, %s\n", "ep all-to-all (tokens), EXPECTED", human(sb->ep_alltoall, b1),
           human(c->ep_wire[0], b2), cls_of[0]);
    printf("    the all-to-all depends on routing: expected for uniform routing (each of the N x %d routed rows on "
           "an EP rank with probability 1/%d; also the mean over an EP group); %s of it is routing-independent "
           "(the counts, the rows out in forward and backward); worst case %s (every rank of the group routes "
           "min(%d, %d) rows per token to this rank's experts)\n", K, mesh->ep, human(sb->ep_alltoall_min, b1),
           human(sb->ep_alltoall_max, b3), K, El);
}

static void print_costs(const topo_opts *t, const qwen3_config *cfg, const pt_mesh *mesh, const int groups[3],
                        const int crossing[3], const int ep_groups[2], const int ep_crossing[2], const topo_cost *c) {
    char b1[32], b2[32], b3[32];
    const char *ac = t->ac ? t->ac : "none";
    printf("\nmemory per rank: parameter state %s (fp32 params, grads, AdamW m and v shards%s), activations %s "
           "(batch %d x %d tokens, backend %s, activation checkpointing %s)\n", human(c->state_b, b1),
           pt_plan_sharded(&c->plan) ? " + FSDP working slots" : "", human(c->act_b, b2), t->B, t->S, t->backend, ac);
    if (mesh->ep > 1)
        printf("  of the parameter state, %s is the experts this rank owns whole (EP: params, grads, AdamW m and "
               "v); the FSDP layer slots still span every expert of a layer\n", human(c->expert_b, b1));
    if (c->moe_host_b + c->moe_backend_b > 0)
        printf("  of the activations, %s is the sparse blocks' own buffers (routing and expert rows of every sparse "
               "layer, not subject to activation checkpointing; %s of it host memory)\n",
               human(c->moe_host_b + c->moe_backend_b, b1), human(c->moe_host_b, b2));
    if (c->moe_growth_b > 0)
        printf("  under EP the expert-side rows are sized for balanced routing and grow with the most a rank's "
               "experts receive: up to %s more if every rank routed all its rows to one rank\n",
               human(c->moe_growth_b, b1));
    printf("  at start-up each rank also holds %s while it streams the HF weights into its shards (the largest "
           "block of rows in fp32%s%s), beside its parameter state\n", human(c->load_b, b1),
           cfg->tie_word_embeddings ? ", the embedding's again for the tied lm_head check" : "",
           c->device_memory ? ", a host copy of its parameter shard" : "");
    printf("  for the final HF model rank 0 also holds %s (the largest block of rows in fp32, twice: as "
           "gathered and as written)\n", human(c->save_b, b1));
    device_note(t, c);
    printf("\nbytes per optimizer step per rank (batch %d x %d, accumulation %d):\n", t->B, t->S, t->A);
    printf("  %-34s %14s  %s\n", "collective", "buffer", "on the wire (ring), link");
    char cls[3][96];
    for (int k = 0; k < 3; k++) {
        if (!crossing[k]) snprintf(cls[k], sizeof cls[k], "intra-node");
        else if (crossing[k] == groups[k]) snprintf(cls[k], sizeof cls[k], "inter-node");
        else snprintf(cls[k], sizeof cls[k], "inter-node (%d of %d groups cross nodes)", crossing[k], groups[k]);
    }
    const pt_step_bytes *sb = &c->sb;
    const int tp = mesh->tp, fsdp = mesh->fsdp;
    if (tp > 1) {
        printf("  %-34s %14s  %s, %s\n", "tp all-reduce (activations)", human(sb->tp_allreduce, b1),
               human(sb->tp_allreduce * 2 * (tp - 1) / tp, b2), cls[0]);
        printf("  %-34s %14s  %s, %s\n", "tp all-gather (cross-entropy stats)", human(sb->tp_allgather, b1),
               human(sb->tp_allgather * (tp - 1) / tp, b2), cls[0]);
    }
    if (fsdp > 1) {
        printf("  %-34s %14s  %s, %s\n", "fsdp all-gather (parameters)", human(sb->fsdp_allgather, b1),
               human(sb->fsdp_allgather * (fsdp - 1) / fsdp, b2), cls[1]);
        printf("  %-34s %14s  %s, %s\n", "fsdp reduce-scatter (gradients)", human(sb->fsdp_reduce_scatter, b1),
               human(sb->fsdp_reduce_scatter * (fsdp - 1) / fsdp, b2), cls[1]);
    }
    if (mesh->dp > 1)
        printf("  %-34s %14s  %s, %s\n", "dp all-reduce (gradients)", human(sb->dp_allreduce, b1),
               human(c->wire[2], b2), cls[2]);
    if (mesh->ep > 1) {
        char ecls[2][96];
        for (int k = 0; k < 2; k++) {
            if (!ep_crossing[k]) snprintf(ecls[k], sizeof ecls[k], "intra-node");
            else if (ep_crossing[k] == ep_groups[k]) snprintf(ecls[k], sizeof ecls[k], "inter-node");
            else snprintf(ecls[k], sizeof ecls[k], "inter-node (%d of %d groups cross nodes)", ep_crossing[k],
                          ep_groups[k]);
        }
        print_ep(cfg, mesh, ep_groups, ep_crossing, (const char *const[]){ecls[0], ecls[1]}, c);
    }
    printf("  total on the wire: intra-node %s, inter-node %s%s\n", human(c->intra, b1), human(c->inter, b3),
           mesh->ep > 1 ? " (the all-to-all's expected bytes)" : "");
}

int cmd_topo(int argc, char **argv) {
    topo_opts t;
    int rc = parse(argc, argv, &t);
    if (rc >= 0) return rc;
    // the layout as train resolves it for a job of --world ranks
    pt_mesh mesh;
    if (pt_mesh_resolve(t.world, t.tp, t.fsdp, t.dp, t.order, &mesh) != 0) return cli_fail();
    mesh.ep = t.ep > 0 ? t.ep : 1;  // validated with the rest of the layout, as train does
    int ac_policy, ac_every;
    if (qwen3_parse_activation_checkpointing(t.ac, &ac_policy, &ac_every) != 0)
        return cli_usage_error("topo", "%s", pt_last_error());
    qwen3_config cfg;
    char *cpath = t.model ? pt_path_join(t.model, "config.json") : pt_strdup(t.config);
    const int crc = qwen3_config_load(&cfg, cpath);
    free(cpath);
    if (crc != 0 || pt_mesh_validate(&mesh, t.world, &cfg) != 0) return cli_fail();
    pt_hostlist *h = pt_calloc(1, sizeof *h);
    int *node = pt_calloc(t.world, sizeof(int));
    topo_cost c = {0};
    int groups[3], crossing[3], ep_groups[2], ep_crossing[2];
    if (t.hosts ? pt_hostfile_read(t.hosts, h) != 0 : pt_hosts_uniform(t.world, t.rpn, h) != 0)
        rc = t.hosts ? cli_fail() : cli_usage_error("topo", "%s", pt_last_error());
    else if (pt_place_ranks(h, t.world, node) != 0) rc = cli_fail();
    else {
        pt_mesh_groups_crossing(&mesh, t.world, node, groups, crossing);
        ep_groups_crossing(&mesh, t.world, node, ep_groups, ep_crossing);
        if (cost(&t, &cfg, &mesh, crossing, ep_crossing, &c) != 0) rc = cli_fail();
    }
    if (rc < 0 && t.json) print_json(&t, &mesh, node[t.world - 1] + 1, groups, crossing, ep_groups, ep_crossing, &c);
    if (rc < 0 && !t.json) {
        print_layout(&t, &cfg, &mesh, h, node, groups, crossing, &c);
        print_costs(&t, &cfg, &mesh, groups, crossing, ep_groups, ep_crossing, &c);
    }
    pt_plan_free(&c.plan);
    free(node);
    free(h);
    return rc < 0 ? 0 : rc;
}
