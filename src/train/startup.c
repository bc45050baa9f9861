// A distributed job's start-up: every rank joins within a time limit, and
// every set-up verdict (arguments, inputs, output dir) is agreed by all ranks
// before anyone goes on, so a rank's error is one error from rank 0 and no
// rank waits for a peer that has given up.
#include "train/trainer_ctx.h"
#include "util/common.h"
#include "util/fileio.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Test-only: PT_TEST_DIST_STALL_RANK=R makes world rank R stall before it
// joins the job (a missing rank at start-up).
static void test_stall_rank(void) {
    const char *s = getenv("PT_TEST_DIST_STALL_RANK");
    if (s && atoi(s) == pt_env_rank())
        for (;;) pause();
}

static double g_startup_timeout;
static void startup_alarm(int sig) {
    (void)sig;
    char msg[256];
    int n = snprintf(msg, sizeof msg,
                     "portatrain: error: distributed start-up: not every rank joined within %.0f s (a rank is missing "
                     "or stuck; PT_DIST_STARTUP_TIMEOUT sets the limit)\n", g_startup_timeout);
    if (write(2, msg, (size_t)n) < 0) {}
    _exit(1);
}

// Why rank r's resolved --model differs from rank 0's, when the command was not what differed: the directory is
// missing on one of them, or the same relative path was resolved in other working directories. true with the
// message in out; false: the --model given differs (the caller says the ranks were started differently).
static bool model_mismatch(const cJSON *rep0, const cJSON *rep, const cJSON *a0, const cJSON *a, int r, char *out,
                           size_t n) {
    const cJSON *g0 = cJSON_GetObjectItemCaseSensitive(rep0, "model_given"), *g = cJSON_GetObjectItemCaseSensitive(rep, "model_given");
    const cJSON *c0 = cJSON_GetObjectItemCaseSensitive(rep0, "cwd"), *c = cJSON_GetObjectItemCaseSensitive(rep, "cwd");
    const bool f0 = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rep0, "model_found"));
    const bool f = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rep, "model_found"));
    if (!cJSON_IsString(g0) || !cJSON_IsString(g) || !cJSON_IsString(c0) || !cJSON_IsString(c)) return false;
    if (f0 != f) {
        const int miss = f ? 0 : r;
        snprintf(out, n, "--model %s: not found on rank %d (working directory %s there), found on rank %d; every rank "
                 "must reach the same --model (a shared filesystem or identical copies at the same path)",
                 miss ? g->valuestring : g0->valuestring, miss, miss ? c->valuestring : c0->valuestring, miss ? 0 : r);
        return true;
    }
    if (strcmp(g0->valuestring, g->valuestring)) return false;
    snprintf(out, n, "--model %s is %s on rank %d (working directory %s) but %s on rank 0 (working directory %s): the "
             "ranks started in other directories; give --model as an absolute path", g0->valuestring,
             cJSON_IsString(a) ? a->valuestring : "?", r, c->valuestring, cJSON_IsString(a0) ? a0->valuestring : "?",
             c0->valuestring);
    return true;
}

typedef struct {
    int ok, usage;  // usage: every rank exits 2 (a usage error)
    char text[2040];
} startup_verdict;

// Rank 0's check of rank r's report against its own: the arguments, the resolved output dir, the inputs.
static void check_rank(const cJSON *rep0, const cJSON *args0, const cJSON *inputs0, const cJSON *rj, int r,
                       const pt_train_args *a, startup_verdict *v) {
    const cJSON *ar = cJSON_GetObjectItemCaseSensitive(rj, "args"), *x;
    cJSON_ArrayForEach(x, args0) {
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(ar, x->string);
        if (y && cJSON_Compare(x, y, 1)) continue;
        v->ok = 0;
        if (!strcmp(x->string, "model") && model_mismatch(rep0, rj, x, y, r, v->text, sizeof v->text))
            break;
        char *xs = cJSON_PrintUnformatted(x), *ys = y ? cJSON_PrintUnformatted(y) : pt_strdup("(absent)");
        snprintf(v->text, sizeof v->text,
                 "rank %d was started with other arguments than rank 0: %s is %s there, %s on rank 0 "
                 "(every rank must run the same command)", r, x->string, ys, xs);
        free(xs);
        free(ys);
        break;
    }
    const cJSON *o0 = cJSON_GetObjectItemCaseSensitive(rep0, "output_dir_abs");
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(rj, "output_dir_abs");
    if (v->ok && cJSON_IsString(o0) && cJSON_IsString(o) && strcmp(o0->valuestring, o->valuestring)) {
        snprintf(v->text, sizeof v->text,
                 "--output-dir %s is %s on rank %d but %s on rank 0: the ranks started in other "
                 "directories, and every rank writes its checkpoint shards there; give --output-dir as "
                 "an absolute path", a->output_dir, o->valuestring, r, o0->valuestring);
        v->ok = 0;
        v->usage = 1;
    }
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(rj, "inputs");
    cJSON_ArrayForEach(x, inputs0) {
        if (!v->ok) break;
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(in, x->string);
        if (!cJSON_IsString(x) || !cJSON_IsString(y) || !strcmp(x->valuestring, y->valuestring)) continue;
        snprintf(v->text, sizeof v->text,
                 "rank %d read other files than rank 0: the %s differs (sha256 %.12s... there, %.12s... on "
                 "rank 0); every rank must read the same --model and --data (a shared filesystem or "
                 "identical copies)", r, x->string, y->valuestring, x->valuestring);
        v->ok = 0;
    }
}

// Every rank reports whether its set-up succeeded and its resolved arguments
// (and, with `inputs`, the sha256 of the model and data it read); rank 0 checks
// that all succeeded and agree, and every rank gets the verdict.
// Returns 0, or -1 with the same error on every rank.
int pt_startup_agree(pt_comm *world, int ok, const pt_train_args *a, const pt_run_hashes *inputs) {
    cJSON *rep = cJSON_CreateObject();
    cJSON_AddBoolToObject(rep, "ok", ok);
    if (!ok) cJSON_AddStringToObject(rep, "error", pt_last_error());
    if (!ok) cJSON_AddBoolToObject(rep, "usage", pt_trainer_usage_error_now());
    cJSON *aj = pt_trainer_args_json(a);
    cJSON_DeleteItemFromObject(aj, "omp_threads");  // may differ per rank
    cJSON_AddItemToObject(rep, "args", aj);
    // "model" in args is the resolved path: where it differs, these say why (missing here, another cwd)
    char cwd[4096];
    cJSON_AddStringToObject(rep, "model_given", a->model_dir ? a->model_dir : "");
    cJSON_AddBoolToObject(rep, "model_found", a->model_dir && pt_is_dir(a->model_dir));
    cJSON_AddStringToObject(rep, "cwd", getcwd(cwd, sizeof cwd) ? cwd : "?");
    // --output-dir as this rank resolves it (lexically: it may not exist yet): every rank writes its checkpoint
    // shards and heartbeat there, so a relative one must not land in other directories
    if (a->output_dir && a->output_dir[0] != '/') {
        char *od = pt_path_join(cJSON_GetObjectItemCaseSensitive(rep, "cwd")->valuestring, a->output_dir);
        cJSON_AddStringToObject(rep, "output_dir_abs", od);
        free(od);
    }
    if (ok && inputs) {  // the same paths can hold other files on another node (no shared filesystem)
        cJSON *in = cJSON_AddObjectToObject(rep, "inputs");
        cJSON_AddStringToObject(in, "model config", inputs->config_sha256);
        cJSON_AddStringToObject(in, "model weights", inputs->initial_weights_sha256);
        cJSON_AddStringToObject(in, "data", inputs->dataset_sha256);
    }
    char *text = cJSON_PrintUnformatted(rep);
    cJSON_Delete(rep);
    const int W = pt_comm_size(world), me = pt_comm_rank(world);
    size_t *counts = pt_calloc(W, sizeof(size_t));
    char *all = NULL;
    pt_comm_gather_bytes(world, text, strlen(text), 0, &all, counts);
    free(text);
    startup_verdict verdict;
    memset(&verdict, 0, sizeof verdict);
    verdict.ok = 1;
    if (me == 0) {
        size_t off = 0;
        cJSON *args0 = NULL, *inputs0 = NULL, *rep0 = NULL;
        for (int r = 0; r < W && verdict.ok; r++) {
            cJSON *rj = cJSON_ParseWithLength(all + off, counts[r]);
            off += counts[r];
            if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rj, "ok"))) {
                const cJSON *e = cJSON_GetObjectItemCaseSensitive(rj, "error");
                if (r == 0) snprintf(verdict.text, sizeof verdict.text, "%s", cJSON_IsString(e) ? e->valuestring : "?");
                else snprintf(verdict.text, sizeof verdict.text, "rank %d: %s", r, cJSON_IsString(e) ? e->valuestring : "?");
                verdict.ok = 0;
                verdict.usage = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rj, "usage"));
            } else if (r == 0) {
                args0 = cJSON_DetachItemFromObject(rj, "args");
                inputs0 = cJSON_DetachItemFromObject(rj, "inputs");
                rep0 = rj;
                rj = NULL;
            } else {
                check_rank(rep0, args0, inputs0, rj, r, a, &verdict);
            }
            cJSON_Delete(rj);
        }
        cJSON_Delete(args0);
        cJSON_Delete(inputs0);
        cJSON_Delete(rep0);
    }
    free(all);
    free(counts);
    pt_comm_broadcast(world, &verdict, sizeof verdict, 0);
    if (verdict.ok) return 0;
    pt_trainer_set_usage_error(verdict.usage);
    pt_set_error("%s", verdict.text);
    return -1;
}

// Once rank 0 has made --output-dir (and every rank has agreed): whether every rank sees it. Each rank writes
// its checkpoint shards next to rank 0's checkpoint.json there, so ranks on nodes without a shared filesystem
// would leave checkpoints no rank can restore. 0, or -1 with the same error on every rank.
int pt_startup_output_dir_shared(pt_comm *world, const pt_train_args *a) {
    const int W = pt_comm_size(world);
    double mine = pt_is_dir(a->output_dir), *all = pt_calloc(W, sizeof(double));
    pt_comm_allgather_f64(world, &mine, all, 1, PT_COLL_CONTROL);
    int missing = -1;
    for (int r = 0; r < W && missing < 0; r++)
        if (all[r] == 0) missing = r;
    free(all);
    if (missing < 0) return 0;
    pt_trainer_set_usage_error(1);
    pt_set_error("--output-dir %s: rank %d does not see the directory rank 0 created; every rank writes its "
                 "checkpoint shards there: put it on a filesystem every rank shares", a->output_dir, missing);
    return -1;
}


int pt_startup_begin(pt_comm **world) {
    test_stall_rank();
    const char *to = getenv("PT_DIST_STARTUP_TIMEOUT");
    g_startup_timeout = to && atof(to) > 0 ? atof(to) : 120;
    signal(SIGALRM, startup_alarm);
    alarm((unsigned)(g_startup_timeout + 0.5));
    *world = pt_comm_init(1);
    return *world ? 0 : -1;
}

void pt_startup_end_alarm(void) { alarm(0); }
