// A training output directory that may hold a previous run (Hugging Face's
// --overwrite-output-dir semantics).
#pragma once
#include <stdbool.h>

// True when dir holds a previous run's progress: metrics.jsonl, `latest` or
// a checkpoint-N directory. Starting a fresh run there would mix two runs.
bool pt_outdir_has_run(const char *dir);
// Removes the files portatrain writes into an output directory (metrics,
// checkpoints, latest, train_args.json, manifest.json, heartbeats, the final
// model unless keep_model, and with supervisor_files the supervisor's
// events.jsonl and recovery.json). Never touches other files. 0 or -1 (error
// set).
int pt_outdir_clear(const char *dir, bool keep_model, bool supervisor_files);
