// Supervised training: runs `train` as a worker process group (one
// process, or an MPI job through --launcher), watches its progress and every
// rank's heartbeat file (OUTPUT/heartbeats/rank-NNNNN.json: step, phase, pid,
// time), restarts it from the newest valid checkpoint after a death or hang,
// and logs events.jsonl + recovery.json into the output directory.
#pragma once
#include "harness/elastic.h"
#include "train/faults.h"

typedef struct {
    int max_restarts;        // bounded retries (default 3)
    double restart_backoff;  // first backoff in seconds, doubled per attempt
    double hang_timeout;     // seconds without step progress before a worker counts as hung (0: off)
    double startup_timeout;  // seconds an attempt may take to its first step (0: off)
    long max_steps;          // for goodput: steps 1..max_steps count as productive
    const char *output_dir;  // where events.jsonl and recovery.json go
    double mtbf_hours;       // > 0: Young/Daly checkpoint-interval advice in recovery.json
    pt_fault faults[64];     // --inject faults (train/faults.h), each fires once
    int n_faults;
    // --launcher "mpirun -np 4 ...": the worker is this command + portatrain
    // train ...; NULL: the worker is one process. world = its rank count.
    const char *launcher;
    int world;
    // --resume-from-checkpoint given: a continued run appends to events.jsonl
    // (its earlier supervisors' events are the same run's history)
    bool resume;
    // --elastic: lost nodes shrink the job (harness/elastic.h) instead of ending it
    pt_elastic_opts elastic;
} pt_supervise_opts;

// Parses --inject "kill:step=S[,hang:step=S,nan:step=S,...]" (train/faults.h).
int pt_supervise_parse_inject(pt_supervise_opts *o, const char *spec);
// worker_argv: the train argv (without supervisor flags), NULL-terminated.
// Returns 0 (completed), -1 (gave up; error set) or PT_SUPERVISE_NONFINITE
// when the worker stopped on a non-finite loss/gradient (exit 3): that is
// deterministic, so it is not retried.
#define PT_SUPERVISE_NONFINITE 3
// The worker exited 2 (a usage error, printed by the worker): not retried,
// a restart would be refused the same way.
#define PT_SUPERVISE_USAGE 2
// SIGTERM, SIGINT or SIGHUP N reached the supervisor: it stopped the worker
// group and returns PT_SUPERVISE_SIGNALED + N (the shell's 128 + N).
#define PT_SUPERVISE_SIGNALED 128
// Longest restart back-off (seconds), however many failures in a row.
#define PT_SUPERVISE_MAX_BACKOFF_S 30.0
int pt_supervise(const pt_supervise_opts *o, int worker_argc, char **worker_argv);
