// portatrain: Qwen3 training and cross-platform acceptance in C.
#include "cli/cli.h"
#include "util/common.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} command;

static const command commands[] = {
    {"init", cmd_init, "write a randomly initialised Qwen3 model directory (HF format)"},
    {"train", cmd_train, "train a Qwen3 model on a token shard"},
    {"eval", cmd_eval, "evaluate a model's loss on a token shard"},
    {"tokenizer", cmd_tokenizer, "encode/decode text with an HF tokenizer.json"},
    {"tokenize", cmd_tokenize, "turn a text corpus into token shards"},
    {"ckpt", cmd_ckpt, "inspect or verify a training checkpoint"},
    {"export", cmd_export, "export a checkpoint as a Hugging Face model directory"},
    {"compare", cmd_compare, "compare two runs (or run logs) and give a convergence verdict"},
    {"accept", cmd_accept, "acceptance suite: baseline vs candidate platform, portability, recovery, cost"},
    {"topo", cmd_topo, "mesh, rank placement, memory and bytes per step of a distributed layout"},
    {"report", cmd_report, "render a report.json into report.html and report.md"},
    {"devices", cmd_devices, "list the backends and devices this build can use (--backend values)"},
    {"version", cmd_version, "the version (git describe), compiler and backends of this build (also --version)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: portatrain <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\nportatrain <command> --help shows a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "--version")) return cmd_version(1, argv + 1);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) {
            return commands[i].run(argc - 1, argv + 1);
        }
    fprintf(stderr, "portatrain: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
