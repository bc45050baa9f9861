#include "train/outdir.h"
#include "train/manifest.h"
#include "util/common.h"
#include "util/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// "checkpoint-N" with N all digits (what checkpoint.c names its directories).
static bool is_ckpt_name(const char *n) {
    if (strncmp(n, "checkpoint-", 11) != 0 || !n[11]) return false;
    for (const char *q = n + 11; *q; q++)
        if (*q < '0' || *q > '9') return false;
    return true;
}

bool pt_outdir_has_run(const char *dir) {
    char *p = pt_path_join(dir, "metrics.jsonl"), *l = pt_path_join(dir, "latest");
    bool any = pt_file_exists(p) || pt_file_exists(l);
    free(p);
    free(l);
    DIR *d = any ? NULL : opendir(dir);
    if (d) {
        for (struct dirent *e; !any && (e = readdir(d));) {
            if (!is_ckpt_name(e->d_name)) continue;
            char *c = pt_path_join(dir, e->d_name);
            any = pt_is_dir(c);
            free(c);
        }
        closedir(d);
    }
    return any;
}

static bool has_prefix(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }
static bool has_suffix(const char *s, const char *x) {
    const size_t n = strlen(s), m = strlen(x);
    return n >= m && !strcmp(s + n - m, x);
}

// A file of the final model hf_model_save writes (model.safetensors, its
// shards "model-00001-of-00002.safetensors" and index, config.json).
static bool is_model_file(const char *n) {
    return !strcmp(n, "config.json") || !strcmp(n, "model.safetensors") ||
           !strcmp(n, "model.safetensors.index.json") || (has_prefix(n, "model-") && has_suffix(n, ".safetensors"));
}

int pt_outdir_clear(const char *dir, bool keep_model, bool supervisor_files) {
    DIR *d = opendir(dir);
    if (!d) return 0;  // nothing there yet
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        const char *n = e->d_name;
        // pt_write_file_atomic's temporaries are "<name>.tmpXXXXXX".
        const bool ours = !strcmp(n, "metrics.jsonl") || has_prefix(n, "metrics.jsonl.tmp") ||
                          !strcmp(n, "train_args.json") || has_prefix(n, "train_args.json.tmp") ||
                          !strcmp(n, PT_MANIFEST_FILE) || has_prefix(n, PT_MANIFEST_FILE ".tmp") ||
                          !strcmp(n, "latest") || has_prefix(n, ".latest.tmp-") || is_ckpt_name(n) ||
                          has_prefix(n, ".tmp-checkpoint-") || has_prefix(n, ".stale-checkpoint-") ||
                          !strcmp(n, "heartbeats") || (!keep_model && is_model_file(n)) ||
                          (supervisor_files && (!strcmp(n, "events.jsonl") || !strcmp(n, "recovery.json")));
        if (!ours) continue;
        char *p = pt_path_join(dir, n);
        if (!strcmp(n, "heartbeats")) {  // only the rank-*.json files the trainer writes there
            DIR *h = opendir(p);
            for (struct dirent *f; h && rc == 0 && (f = readdir(h));) {
                if (!has_prefix(f->d_name, "rank-")) continue;
                char *q = pt_path_join(p, f->d_name);
                rc = pt_remove_tree(q);
                free(q);
            }
            if (h) closedir(h);
            rmdir(p);  // kept when the user put something else there
        } else {
            rc = pt_remove_tree(p);
        }
        free(p);
    }
    closedir(d);
    return rc;
}
