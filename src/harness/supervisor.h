// Supervised training (issue 8, first cut): runs `train` as a worker process
// group, restarts it from the newest valid checkpoint after a death, and logs
// events.jsonl + recovery.json into the output directory.
#pragma once

enum { PT_FAULT_KILL = 0, PT_FAULT_KILL_SAVE = 1, PT_FAULT_HANG = 2 };

typedef struct {
    int max_restarts;        // bounded retries (default 3)
    double restart_backoff;  // first backoff in seconds, doubled per attempt
    double hang_timeout;     // seconds without step progress before a worker counts as hung (0: off)
    long max_steps;          // for goodput: steps 1..max_steps count as productive
    const char *output_dir;  // where events.jsonl and recovery.json go
    long kill_steps[64];     // kill:step=S faults, each fires once
    int kill_kind[64];       // PT_FAULT_*
    int n_kills;
} pt_supervise_opts;

// Parses "kill:step=S[,kill:rank=0:step=S...]"; only kill faults for now.
int pt_supervise_parse_inject(pt_supervise_opts *o, const char *spec);
// worker_argv: the train argv (without supervisor flags), NULL-terminated.
int pt_supervise(const pt_supervise_opts *o, int worker_argc, char **worker_argv);
