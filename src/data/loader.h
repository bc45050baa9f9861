// Deterministic, resumable training batches.
//
// The batch of optimizer step s is a pure function of (data, config, seed, s):
// the global batch (rows_per_step rows) is defined first, then rank r of a
// data-parallel group of W ranks takes its slice of each global micro-batch
// (micro_rows rows, cut into W slices of micro_rows/W; without micro_rows the
// whole batch is one micro-batch): Hugging Face's Trainer shards the loader's
// micro-batches over the ranks the same way. So the union over ranks is the
// same for any W, the global micro-batch i holds the rows one process puts in
// its micro-batch i, and the cursor is just the step number (restoring it =
// asking for step k in a new loader). Documents mode cuts its rows by part
// instead (TorchTitan's ranks, below).
//
// Epoch boundaries (cfg.epochs):
//   - PT_LOADER_EPOCHS_HF (what `portatrain train` uses by default): as Hugging
//     Face's Trainer with a DataLoader (single process, unshuffled sampler). An
//     epoch is cut into micro-batches of M = micro_rows rows (the last one short
//     unless R divides by M; dropped with drop_last), and those into optimizer
//     steps of A = rows_per_step / M micro-batches (the epoch's last step holds
//     fewer when the micro-batches do not divide by A). Steps per epoch
//     S = ceil(U / B), U = rows used per epoch (R, or floor(R/M)*M with
//     drop_last). Row j of step s is position p = (s mod S)*B + j of epoch
//     s div S; positions p >= U hold no row (PT_LOADER_NO_ROW): the batch
//     gets an empty row there (labels all -100, inputs the EOS id in padded
//     mode, else 0), so shapes stay fixed and the row adds nothing to the loss
//     or the gradient. Every epoch starts at its position 0.
//   - PT_LOADER_EPOCHS_WRAP (the behaviour before "hf" existed, the zero
//     value): global row g = s*B + j is position p = g mod R of epoch g div R;
//     batches are always full and a step may straddle two epochs.
//
// Rows. Position p of epoch e (R = rows per epoch, pt_loader_rows_per_epoch)
// reads row order_e[p]:
//   - unshuffled: order_e is the identity (the same every epoch);
//   - shuffled: order_e is a Fisher-Yates permutation driven by Philox
//     (util/philox.h) keyed by (seed, epoch): a pure function of (seed, epoch),
//     different every epoch;
//   - padded mode with group_by_bucket: see below.
//
// Packed mode: the token stream (the shards of the data set concatenated) is
// cut into windows of seq_len+1 tokens with stride seq_len (inputs w[0:T],
// labels w[1:T+1]). Unshuffled, step s takes windows s*B .. s*B+B-1 (B =
// rows_per_step), wrapping around at the end of the data (a new epoch).
// Documents are not separated (their EOS tokens stay in the stream).
//
// Padded mode: one document per row. Documents end at the EOS id (inclusive);
// tokens after the last EOS form a final document. A document of n tokens
// gives a row of n-1 inputs (d[0:n-1]) and labels (d[1:n]); documents of a
// single token give no row. Each row belongs to the smallest bucket >= its
// length; a document longer than the largest bucket is SPLIT (default) into
// pieces of largest-bucket inputs with stride largest-bucket (every label is
// predicted exactly once, like packed windows), or TRUNCATED to its first
// piece. Rows are padded at the end: inputs with the EOS id, labels -100. The
// step's row length is the smallest bucket that holds its longest global row
// (the same on every rank), so a static-shape backend sees only bucket lengths.
// With group_by_bucket, each epoch's order is: rows (permuted if shuffled)
// stably sorted by bucket, cut into batches of B rows, the last batch
// completed with the first rows of the epoch (so R is a multiple of B), and the
// batches put in a Philox-permuted order if shuffled. Steps then never straddle
// epochs and mostly hold rows of one bucket (little padding). Under "hf" the
// last batch is NOT completed (every row once per epoch, as HF): the sorted list
// is cut into S batches of B positions, positions >= U empty, and the S batches
// permuted if shuffled (so the short batch may come anywhere in the epoch).
//
// Documents mode (TorchTitan's packing): every document (ending at the EOS
// id, as in padded mode) of n tokens gives n-1 (input, label, position)
// triples (d[i], d[i+1], i): a label never crosses a document boundary. The
// triples of all documents, in order, form an endless stream (the end of the
// data wraps to its start, as TorchTitan's re-looping data set); row k is
// triples [k*T, (k+1)*T). A document may cross a row boundary; the leading
// piece of a row then has its positions shifted to start at 0 (TorchTitan's
// normalisation). Positions restart at 0 at every document, and attention is
// masked per document (block-causal): pt_loader_last_positions. Documents
// are never shuffled and every epoch is the stream's (wrap). With doc_shards
// S > 1 the documents are split into S contiguous parts as Hugging Face's
// split_dataset_by_node splits a data set (the first ndocs mod S parts get
// one more), each part its own stream, and global row j of a step comes from
// part j / (B/S): so S data-parallel ranks read what TorchTitan's S data
// ranks read, and any other rank count reads the same global batch.
//
// Layout: inputs and labels are dense [local_rows x row_len] int32 (row stride
// row_len); the buffers must hold local_rows x seq_len.
#pragma once
#include <stdbool.h>
#include <stdint.h>

typedef enum { PT_LOADER_PACKED = 0, PT_LOADER_PADDED = 1, PT_LOADER_DOCUMENTS = 2 } pt_loader_mode;
typedef enum { PT_LOADER_SPLIT_LONG = 0, PT_LOADER_TRUNCATE_LONG = 1 } pt_loader_long_docs;
typedef enum { PT_LOADER_EPOCHS_WRAP = 0, PT_LOADER_EPOCHS_HF = 1 } pt_loader_epochs;
// pt_loader_row_of's value for a position that holds no row ("hf" epochs).
#define PT_LOADER_NO_ROW UINT64_MAX

#define PT_LOADER_MAX_BUCKETS 32

typedef struct {
    // A v1 shard file, or a data set: a dataset.json file, a directory holding
    // one, or a directory of *.bin shards (data/dataset.h).
    const char *data_path;
    int seq_len;            // T (max row length in padded mode)
    int rows_per_step;      // global rows per optimizer step (batch x accumulation x dp world)
    int dp_rank, dp_world;  // this rank's share (0, 1 for a single process)
    pt_loader_mode mode;
    bool shuffle;
    uint64_t seed;
    uint32_t model_vocab;   // every id must be < this (0: only the shards' own vocab is checked)
    // ---- epoch boundaries (see above) ----
    pt_loader_epochs epochs;
    int micro_rows;         // global rows per micro-batch (batch x data ranks); 0 = rows_per_step
    bool drop_last;         // "hf": drop each epoch's incomplete last micro-batch (HF dataloader_drop_last)
    // ---- documents mode: parts the documents are split into (0 or 1: one) ----
    int doc_shards;
    // ---- padded and documents modes (ignored in packed mode) ----
    // End-of-document id; 0 = take "eos_id" from dataset.json (a bare shard has
    // none: then it must be given). Token id 0 cannot serve as the EOS.
    int64_t eos_id;
    // Ascending bucket lengths, each <= seq_len. num_buckets 0 = {T/8, T/4, T/2, T}
    // (those >= 1, deduplicated).
    int num_buckets;
    int buckets[PT_LOADER_MAX_BUCKETS];
    pt_loader_long_docs long_docs;
    bool group_by_bucket;
} pt_loader_config;

typedef struct pt_loader pt_loader;

pt_loader *pt_loader_open(const pt_loader_config *cfg);
void pt_loader_free(pt_loader *l);
// Rows this rank gets per step.
int pt_loader_local_rows(const pt_loader *l);
// The global row (0 .. rows_per_step-1) of this rank's local row r: its slice of each global micro-batch
// (the header's rule; documents mode: part by part).
int pt_loader_global_row(const pt_loader *l, int r);
// Fills this rank's rows of step `step`: inputs and labels are
// [local_rows x row_len] int32 (labels -100 where ignored); *row_len is the
// row length used (seq_len in packed mode, a bucket in padded mode).
int pt_loader_batch(pt_loader *l, uint64_t step, int32_t *inputs, int32_t *labels, int *row_len);
// Documents mode: the positions of the last pt_loader_batch call's rows
// ([local_rows x seq_len], restarting at 0 at each document); NULL otherwise.
const int32_t *pt_loader_last_positions(const pt_loader *l);
// Distinct rows available per epoch: windows (packed), document pieces
// (padded; pieces = documents when none is split), or whole rows of the
// triple stream (documents).
uint64_t pt_loader_num_rows(const pt_loader *l);
// sha256 (hex) of the data, for the run manifest: the shard file's sha256 for
// a single shard; for a data set, the sha256 of the concatenated token bodies
// of its shards (independent of how the stream is cut into shards).
const char *pt_loader_data_sha256(const pt_loader *l);

// ---- additions ----
// Rows per epoch R: "wrap": num_rows, or num_rows rounded up to a multiple of
// rows_per_step with group_by_bucket; "hf": the rows used per epoch U (num_rows,
// less the dropped incomplete micro-batch with drop_last).
uint64_t pt_loader_rows_per_epoch(const pt_loader *l);
// Epoch of the first row of `step`.
uint64_t pt_loader_epoch_of_step(const pt_loader *l, uint64_t step);
// Steps per epoch (rows per epoch / rows per step, rounded up; "hf": HF's
// num_update_steps_per_epoch = ceil(ceil(U / M) / A) = ceil(U / B)).
uint64_t pt_loader_steps_per_epoch(const pt_loader *l);
// Whether the first `steps` steps read other rows under these ("hf") epoch boundaries than under "wrap": only
// when an epoch is not a whole number of steps (or drop_last drops rows) and the run reaches the epoch's last
// step (or, grouped by bucket and shuffled, whose short batch may come at any step). false under "wrap".
bool pt_loader_epochs_change_rows(const pt_loader *l, uint64_t steps);
// Epochs done after `steps` steps, as HF logs "epoch": "hf": e + (micro-batches
// of epoch e done) / (micro-batches per epoch); "wrap": steps x B / R.
double pt_loader_epochs_done(const pt_loader *l, uint64_t steps);
// Rows of the global batch of the last pt_loader_batch call that hold a row
// (rows_per_step unless "hf" epochs gave it empty rows; the same on every rank).
int pt_loader_last_real_rows(const pt_loader *l);
uint64_t pt_loader_num_tokens(const pt_loader *l);
// Documents found (padded and documents modes: by EOS; packed mode: 0, documents are not scanned).
uint64_t pt_loader_num_documents(const pt_loader *l);
// Padded mode: fraction of the positions that are padding, over the global
// batches of all pt_loader_batch calls so far (the same on every rank), and for
// the last call alone. 0 in packed mode.
double pt_loader_padding_fraction(const pt_loader *l);
double pt_loader_last_padding_fraction(const pt_loader *l);
// Buckets in use (padded mode; packed mode: one bucket, seq_len). Returns the count.
int pt_loader_buckets(const pt_loader *l, const int **buckets);
// sha256 (hex) of everything that defines the batch sequence except the rank
// split: data sha256, mode, seq_len, rows_per_step, shuffle, seed, eos, buckets,
// long-doc policy, grouping, "hf" epochs (and drop_last with the micro-batch
// size); "wrap" has the key it had before epoch boundaries were configurable. Store it with the cursor (the step) in a
// checkpoint; a resumed run whose key differs would read other batches.
const char *pt_loader_state_key(const pt_loader *l);
// The global row index (into the epoch's row set, < num_rows) served as row j
// of step `step` (0 <= j < rows_per_step), or PT_LOADER_NO_ROW (an empty row,
// "hf" epochs). For tests and tools.
uint64_t pt_loader_row_of(pt_loader *l, uint64_t step, int j);
