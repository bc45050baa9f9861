// The run manifest: OUTPUT/manifest.json, written by every `portatrain train`
// run at its start (again on resume). It records what must be identical for
// two runs to be comparable ("frozen": file hashes of the model config, the
// initial weights, the tokenizer and the data, the seed and the numerics-
// changing hyper-parameters) apart from what may differ ("platform",
// "software", "run"). `portatrain compare` checks "frozen" (docs/COMPARE.md).
//
// manifest.json (format "portatrain-manifest", version 1):
//   {
//     "format": "portatrain-manifest", "version": 1, "created_utc": "2026-12-03T12:00:00Z",
//     "frozen": {
//       "config":    {"name": "config.json", "bytes": n, "sha256": "<hex>"},
//       "weights":   [{"name": "model.safetensors", "bytes": n, "sha256": "<hex>"}, ...],
//       "tokenizer": {"name": "tokenizer.json", "bytes": n, "sha256": "<hex>"} | null,
//       "data":      [{"name": "shard-00000.bin", "bytes": n, "sha256": "<hex>"}, ...],
//       "seed": 42,
//       "hyperparameters": {learning_rate, lr_scheduler_type, warmup_steps, max_steps,
//                           per_device_train_batch_size, gradient_accumulation_steps, seq_len,
//                           weight_decay, adam_beta1, adam_beta2, adam_epsilon, max_grad_norm,
//                           data_mode, shuffle}
//     },
//     "platform": {backend, backend_device, precision, parallel{tp,dp,fsdp}, world_size,
//                  ranks[{rank, hostname}], device{cpu_model, cpu_flags[], nproc, omp_threads,
//                  memory_total_bytes}, tf32},
//     "software": {portatrain_version, git_commit, git_dirty, compiler, openblas, cjson, openssl},
//     "run": {output_dir, model, data, resume_from_checkpoint}
//   }
// Names are file names (no directories), so copies of the same inputs in
// other places compare equal; the paths are in "run". Weights are the files
// of --model (model.safetensors, or the shards named by
// model.safetensors.index.json, sorted); data are the shard files --data
// resolves to (a shard file, or the shards of a data set in index order).
#pragma once
#include <cjson/cJSON.h>

#include "train/trainer.h"

#define PT_MANIFEST_FORMAT "portatrain-manifest"
#define PT_MANIFEST_VERSION 1
#define PT_MANIFEST_FILE "manifest.json"

// Builds the manifest of a run with resolved args `a` on a backend named
// `backend` described as `device` (may be NULL). NULL + error naming the file
// that could not be hashed.
// epochs_change_rows (pt_loader_epochs_change_rows): whether the epoch boundaries change the rows the run reads;
// only then are epoch_boundary and dataloader_drop_last frozen inputs (recorded), so a run that reads the same
// rows either way compares with runs recorded before the choice existed (which have neither field).
// layout: {tp, fsdp, dp} of a distributed run (platform.parallel, world_size); NULL: one process.
cJSON *pt_manifest_build(const pt_train_args *a, const char *backend, const char *device, bool epochs_change_rows,
                         const int layout[3]);
// Builds it and writes OUTPUT/manifest.json atomically; 0 or -1 (error set).
int pt_manifest_write(const pt_train_args *a, const char *backend, const char *device, bool epochs_change_rows,
                      const int layout[3]);
// Adds "platform.compile" {compile_s, cache_hits, cache_misses,
// recompilations} from be->ops->compile_stats to OUTPUT/manifest.json (rewritten
// atomically) at the end of a run on a backend that compiles kernels at run time;
// 0 without touching anything when OUTPUT has no manifest.json.
struct pt_backend;
int pt_manifest_add_compile(const char *output_dir, struct pt_backend *be);
// The portatrain version string ("0.1.0").
const char *pt_version(void);
