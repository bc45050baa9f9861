// Training-state checkpoints.
//
// A checkpoint is a directory OUTPUT/checkpoint-<step>/ holding
//   checkpoint.json          the manifest: format/version, training state
//                            (step, optimizer step, LR-schedule position,
//                            loader cursor, RNG state), resolved run config,
//                            model config, run manifest hashes, and per tensor
//                            its global shape, dtype and the slices that hold
//                            it (file, key, offset, shape, xxh3-128 checksum)
//   rank00000.safetensors    tensor slices (any safetensors reader opens it)
// Tensors: "model/<HF name>", "optim/exp_avg/<HF name>",
// "optim/exp_avg_sq/<HF name>". Each rank of a sharded run writes only its own
// slices into its own file; the reader assembles any requested slice from
// whatever slices were written (ckpt_read), so checkpoints reshard.
//
// Saving is atomic: everything is written and fsync'd in a temporary
// directory, renamed into place, the parent fsync'd, then OUTPUT/latest is
// replaced atomically, then old checkpoints are pruned. A crash at any point
// leaves the previous checkpoint intact and `latest` naming a complete one.
#pragma once
#include <cjson/cJSON.h>
#include <stdint.h>

#define CKPT_MAX_DIMS 8

// One slice a rank contributes: the box [offset, offset+shape) of the global
// tensor `name` (shape global_shape), data row-major host floats.
typedef struct {
    const char *name;
    int ndim;
    int64_t global_shape[CKPT_MAX_DIMS];
    int64_t offset[CKPT_MAX_DIMS];
    int64_t shape[CKPT_MAX_DIMS];
    const float *data;
} ckpt_slice;

typedef struct {
    double seconds;       // whole save, including fsyncs and renames
    uint64_t bytes;       // tensor + manifest bytes written
    double gb_per_s;
    char path[4096];      // final checkpoint directory
} ckpt_save_stats;

// Writes a single-rank checkpoint for `step` under output_dir. `state` is
// copied into checkpoint.json ("state"); keep_last > 0 prunes older ones.
int ckpt_save(const char *output_dir, long step, const ckpt_slice *slices, int n, const cJSON *state,
              int keep_last, ckpt_save_stats *stats);

// The ranks of a sharded save (callbacks over the job's communicator, so
// this layer needs no MPI): rank 0 creates the temporary directory, every
// rank writes rankNNNNN.safetensors into it, rank 0 merges the slice lists
// into checkpoint.json and publishes the checkpoint; all ranks get its result.
typedef struct {
    int rank, size;
    void *ctx;
    // rank 0 receives every rank's bytes back to back (*recv malloc'd, counts[size])
    void (*gather)(void *ctx, const void *send, size_t n, char **recv, size_t *counts);
    void (*bcast)(void *ctx, void *buf, size_t n);  // from rank 0
} ckpt_group;
int ckpt_save_group(const char *output_dir, long step, const ckpt_slice *slices, int n, const cJSON *state,
                    int keep_last, ckpt_save_stats *stats, const ckpt_group *g);

typedef struct ckpt ckpt;
// Opens a checkpoint directory: parses and checks the manifest and that every
// file exists with its recorded size. Checksums are checked on read.
ckpt *ckpt_open(const char *dir);
void ckpt_close(ckpt *c);
const char *ckpt_dir(const ckpt *c);
long ckpt_step(const ckpt *c);
const cJSON *ckpt_state(const ckpt *c);
// Verifies every slice's checksum; -1 naming the tensor and file on mismatch.
int ckpt_verify(ckpt *c);
// ckpt_verify's checksums of the slices in the files k with k % size == rank only (manifest order; the coverage
// check in full): the ranks of a job, each checking its share, check every file once between them.
int ckpt_verify_share(ckpt *c, int rank, int size);
// Global shape of a tensor (returns ndim, -1 if absent).
int ckpt_tensor_shape(const ckpt *c, const char *name, int64_t *shape);
// Reads the box [offset, offset+shape) of tensor `name` into out (row-major),
// assembling it from every stored slice that overlaps; fails if part of the
// box is not covered or a touched slice fails its checksum.
int ckpt_read(ckpt *c, const char *name, int ndim, const int64_t *offset, const int64_t *shape, float *out);
// Summary for `ckpt inspect`.
cJSON *ckpt_describe(const ckpt *c);

// OUTPUT/latest, the pointer a save moves after its checkpoint is complete (one writer, the save; one
// reader, these): the checkpoint it names ("checkpoint-N", malloc'd; NULL when absent or not such a name),
// and that step (0 when none).
char *ckpt_latest_name(const char *output_dir);
long ckpt_latest_step(const char *output_dir);

// Resolves "latest" (OUTPUT/latest, falling back with a warning to the
// newest checkpoint-* that opens and verifies) or a checkpoint directory.
// Returns an opened, verified checkpoint or NULL.
ckpt *ckpt_open_resume(const char *output_dir, const char *spec);
// The same with verify 0: no checksums (the manifest and the files' sizes only, for the choice and the fallback),
// for a caller that verifies otherwise (every rank of a job with ckpt_verify_share, then agreeing).
ckpt *ckpt_open_resume_opts(const char *output_dir, const char *spec, int verify);

// Test-only fault injection (environment):
//   PT_CKPT_CRASH_AT=<stage>   raise SIGKILL at a stage of the save:
//     tensors-written, manifest-written, renamed, pointer-updated
//   PT_FAULT_ENOSPC_AFTER=<bytes>  writes fail with ENOSPC past this many bytes
