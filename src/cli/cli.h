// Subcommand entry points and the small argument parser they share.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// Each subcommand: argv[0] is the subcommand name. Returns the exit status
// (0 ok, 1 failure, 2 usage error).
int cmd_init(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_tokenizer(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_ckpt(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_accept(int argc, char **argv);
int cmd_topo(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_devices(int argc, char **argv);
int cmd_version(int argc, char **argv);

// Argument parsing: options are "--name value" or "--name=value".
typedef struct {
    int argc;
    char **argv;
    int i;             // current index
    const char *cmd;   // for messages
} pt_argparse;

void argp_init(pt_argparse *p, int argc, char **argv);
// "--my_name=v" -> name "--my-name", *value "v" (as HF's parser, underscores in an option name are dashes).
// Returns true when name differs from arg (an '=' or an underscore); false for a non-option or a too-long
// name (then name may be partial and arg is used as it is).
bool argp_canonical_name(const char *arg, char *name, size_t size, const char **value);
// Returns the next option name (e.g. "--seed", also for "--seed=1"; "--max_steps" comes back as
// "--max-steps") or NULL when done. Positional arguments are returned as-is (not starting with "--").
const char *argp_next(pt_argparse *p);
// Value of the option just returned (from "=value" or the next argv); exits
// with a usage error if missing.
const char *argp_value(pt_argparse *p);
int64_t argp_int(pt_argparse *p);
// An integer within [min, max]; anything else is a usage error naming the
// option (exit 2), so callers may narrow it to int safely.
int64_t argp_int_range(pt_argparse *p, int64_t min, int64_t max);
// A finite number; argp_double_min also >= min.
double argp_double(pt_argparse *p);
double argp_double_min(pt_argparse *p, double min);
// A boolean flag: "--flag" is true; "--flag=V" takes V in true/false/1/0/
// yes/no (any case, as Hugging Face's parser does); any other V is a usage
// error (exit 2) rather than silently ignored.
bool argp_flag(pt_argparse *p);
// The same flag's "=V" text unparsed (NULL for the bare flag), for a parser of its own (train's flag table).
const char *argp_flag_value(pt_argparse *p);
// The same checks on a value parsed outside pt_argparse (train --supervise).
int64_t argp_parse_int(const char *cmd, const char *opt, const char *v, int64_t min, int64_t max);
double argp_parse_double(const char *cmd, const char *opt, const char *v, double min);
bool argp_parse_bool(const char *cmd, const char *opt, const char *v);
// Prints "portatrain CMD: unknown option X" and returns 2.
int argp_unknown(pt_argparse *p, const char *opt);

// Prints "portatrain: error: <last error>" and returns 1.
int cli_fail(void);
// Raw text given to a data flag (a corpus not yet tokenized, the commonest first mistake): prints the one-line
// error naming the file and the tokenize command that fixes it, and returns true (the command exits 2).
bool cli_raw_text(const char *path);
int cli_usage_error(const char *cmd, const char *fmt, ...);
