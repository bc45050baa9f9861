// Bad input gets one clear line naming the file/field and a non-zero exit,
// never a crash: broken safetensors, config.json and token shards, run
// through the real CLI.
#include "data/shard.h"
#include "util/common.h"
#include "util/fileio.h"
#include "testutil.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

static const char *BIN;
// Test-owned allocations, freed at the end (keeps LeakSanitizer quiet).
static void *owned[256];
static int nowned;
static void *keep(void *p) {
    if (nowned < 256) owned[nowned++] = p;
    return p;
}
static char *TMP;
static char *GOLD;

static void write_bytes(const char *path, const void *d, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(d, 1, n, f);
    fclose(f);
}

// A model dir = golden config + the given safetensors bytes.
static char *model_dir_with(const char *tag, const char *config_text, const void *st, size_t st_len) {
    char *dir = pt_path_join(TMP, tag);
    pt_mkdir_p(dir);
    char *cp = pt_path_join(dir, "config.json");
    if (config_text) write_bytes(cp, config_text, strlen(config_text));
    else {
        char *g = pt_path_join(GOLD, "config.json");
        size_t n;
        char *t = pt_read_file(g, &n);
        write_bytes(cp, t, n);
        free(t);
        free(g);
    }
    free(cp);
    if (st) {
        char *sp = pt_path_join(dir, "model.safetensors");
        write_bytes(sp, st, st_len);
        free(sp);
    }
    return dir;
}

static void expect_error(const char *what, const char *cmd, const char *must_contain) {
    char *out, *err;
    int rc = test_run(cmd, &out, &err);
    int lines = 0;
    for (char *p = err; *p; p++) lines += *p == '\n';
    CHECK(rc == 1, "%s: exit status %d (want 1); stderr: %s", what, rc, err);
    CHECK(strncmp(err, "portatrain: error: ", 19) == 0, "%s: stderr does not start with the error prefix: %s",
          what, err);
    CHECK(lines == 1, "%s: %d lines on stderr (want 1): %s", what, lines, err);
    CHECK(strstr(err, must_contain) != NULL, "%s: message lacks '%s': %s", what, must_contain, err);
    printf("ok  %-34s %s", what, err);
    free(out);
    free(err);
}

// Builds a safetensors file from a header string and a data size.
static uint8_t *st_bytes(const char *header, size_t data_len, size_t *total) {
    size_t hn = strlen(header);
    *total = 8 + hn + data_len;
    uint8_t *b = calloc(1, *total);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hn >> (8 * i));
    memcpy(b + 8, header, hn);
    return b;
}

static void eval_cmd(char *buf, size_t n, const char *model, const char *data) {
    snprintf(buf, n, "%s eval --model %s --data %s --seq-len 16 --per-device-eval-batch-size 2", BIN, model, data);
}

// One bad input: a model dir whose model.safetensors is given raw bytes or a header (with a zeroed data
// section of the given size) next to the golden config.json, a model dir with a broken config.json, or the
// golden token shard changed one way. Every case runs `portatrain eval` on it and wants exit 1 and one line
// on stderr holding must_contain.
typedef enum { ST_RAW, ST_HEADER, CONFIG, SHARD } input_kind;
typedef enum { WRONG_MAGIC, DROP_TAIL, KEEP_HEAD, IDS_WITH_VOCAB } shard_edit;
typedef struct {
    const char *what;
    input_kind kind;
    const uint8_t *bytes;  // ST_RAW: the whole file
    const char *text;      // ST_HEADER: the header JSON; CONFIG: the whole config.json
    size_t size;           // ST_RAW: bytes' length; ST_HEADER: the data section's bytes
    shard_edit edit;       // SHARD: the change, with arg: bytes dropped or kept, or the shard's vocab size
    size_t arg;
    const char *must_contain;
} bad_case;

#define EMB_HEADER(dtype, shape) \
    "{\"model.embed_tokens.weight\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[0,32768]}}"

static const bad_case CASES[] = {
    // --- safetensors ---
    {"safetensors: file too small", ST_RAW, (const uint8_t[]){1, 2, 3, 4}, .size = 4,
     .must_contain = "model.safetensors"},
    // the header claims 200 bytes, the file has 8
    {"safetensors: truncated header", ST_RAW, (const uint8_t[16]){200}, .size = 16,
     .must_contain = "truncated header"},
    // a header length of 200e6 (little-endian 0x0bebc200)
    {"safetensors: oversized header", ST_RAW, (const uint8_t[16]){0x00, 0xc2, 0xeb, 0x0b}, .size = 16,
     .must_contain = "exceeds"},
    {"safetensors: overlapping ranges", ST_HEADER,
     .text = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
     .size = 12, .must_contain = "overlaps"},
    {"safetensors: range outside file", ST_HEADER,
     .text = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", .size = 8,
     .must_contain = "outside the data section"},
    {"safetensors: unknown dtype", ST_HEADER, .text = "{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}",
     .size = 8, .must_contain = "unknown dtype"},
    {"safetensors: shape x dtype != range", ST_HEADER,
     .text = "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", .size = 8, .must_contain = "needs 12"},
    {"safetensors: duplicate names", ST_HEADER,
     .text = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
     .size = 16, .must_contain = "duplicate tensor name"},
    {"safetensors: malformed header JSON", ST_HEADER,
     .text = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]", .size = 8,
     .must_contain = "malformed JSON"},
    // model-level checks: a valid file with the wrong contents (only the embedding, zeros)
    {"model: missing tensor", ST_HEADER, .text = EMB_HEADER("F32", "[128,64]"), .size = 32768,
     .must_contain = "missing tensor \"model.layers.0.input_layernorm.weight\""},
    {"model: wrong shape", ST_HEADER, .text = EMB_HEADER("F32", "[64,128]"), .size = 32768,
     .must_contain = "has shape [64,128] but config.json implies [128,64]"},
    {"model: integer weight dtype", ST_HEADER, .text = EMB_HEADER("I32", "[128,64]"), .size = 32768,
     .must_contain = "has dtype I32"},
    // --- config.json ---
    {"config: malformed JSON", CONFIG, .text = "{\"model_type\": \"qwen3\", \"vocab_size\": ",
     .must_contain = "config.json: malformed JSON"},
    {"config: missing field", CONFIG, .text = "{\"model_type\": \"qwen3\", \"vocab_size\": 128}",
     .must_contain = "missing required field \"hidden_size\""},
    {"config: wrong field type", CONFIG, .text = "{\"model_type\": \"qwen3\", \"vocab_size\": \"128\"}",
     .must_contain = "\"vocab_size\" must be an integer"},
    {"config: heads not divisible", CONFIG,
     .text = "{\"model_type\": \"qwen3\", \"vocab_size\": 128, \"hidden_size\": 64, \"intermediate_size\": 96, "
             "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"num_key_value_heads\": 3}",
     .must_contain = "multiple of num_key_value_heads"},
    {"config: other model type", CONFIG, .text = "{\"model_type\": \"llama\"}", .must_contain = "model_type is \"llama\""},
    // --- token shards ---
    {"shard: wrong magic", SHARD, .edit = WRONG_MAGIC, .must_contain = "wrong magic"},
    {"shard: truncated body", SHARD, .edit = DROP_TAIL, .arg = 10, .must_contain = "truncated"},
    {"shard: truncated header", SHARD, .edit = KEEP_HEAD, .arg = 100, .must_contain = "truncated shard header"},
    // ids 0..127 and one 500: the shard's header says vocab 1000 (the model has 128), then 200
    {"shard: id >= model vocab_size", SHARD, .edit = IDS_WITH_VOCAB, .arg = 1000,
     .must_contain = "id 500 >= the model's vocab_size 128"},
    {"shard: id >= shard vocab", SHARD, .edit = IDS_WITH_VOCAB, .arg = 200,
     .must_contain = "id 500 >= the shard's vocab size 200"},
};

// Writes the golden shard changed as c says to path.
static void write_bad_shard(const bad_case *c, const char *golden, const char *path) {
    size_t len;
    char *data = pt_read_file(golden, &len);
    switch (c->edit) {
    case WRONG_MAGIC: {
        int32_t bad = 12345;
        memcpy(data, &bad, 4);
        write_bytes(path, data, len);
        break;
    }
    case DROP_TAIL: write_bytes(path, data, len - c->arg); break;
    case KEEP_HEAD: write_bytes(path, data, c->arg); break;
    case IDS_WITH_VOCAB: {
        uint32_t toks[40];
        for (int i = 0; i < 40; i++) toks[i] = (uint32_t)(i * 3 % 128);
        toks[17] = 500;
        pt_shard_write(path, toks, 40, (int)c->arg, NULL);
        break;
    }
    }
    free(data);
}

// Makes case number i's bad input under TMP and runs eval on it.
static void run_case(size_t i, const char *good_data) {
    const bad_case *c = &CASES[i];
    char tag[32], cmd[8192];
    snprintf(tag, sizeof tag, "case%02zu", i);
    const char *model = GOLD, *data = good_data;
    if (c->kind == SHARD) {
        char *p = keep(pt_path_join(TMP, tag));
        write_bad_shard(c, good_data, p);
        data = p;
    } else if (c->kind == CONFIG) {
        model = keep(model_dir_with(tag, c->text, NULL, 0));
    } else if (c->kind == ST_RAW) {
        model = keep(model_dir_with(tag, NULL, c->bytes, c->size));
    } else {
        size_t n;
        uint8_t *b = keep(st_bytes(c->text, c->size, &n));
        model = keep(model_dir_with(tag, NULL, b, n));
    }
    eval_cmd(cmd, sizeof cmd, model, data);
    expect_error(c->what, cmd, c->must_contain);
}

// A usage error: exit 2, and stderr holds must_contain.
static void expect_usage_error(const char *what, const char *cmd, const char *must_contain) {
    char *out, *err;
    int rc = test_run(cmd, &out, &err);
    CHECK(rc == 2 && strstr(err, must_contain), "%s: rc %d, %s", what, rc, err);
    free(out);
    free(err);
}

// An I/O error that may clear up on a retry vs input that fails the same way (train: exit 1 vs 2).
static void check_transient_marks(void) {
    CHECK(pt_read_file("/nonexistent-dir/x", NULL) == NULL && !pt_last_error_transient(), "ENOENT is not transient");
    pt_set_error("x");
    pt_mark_error_transient(EIO);
    CHECK(pt_last_error_transient(), "EIO is transient");
    pt_prefix_error("context: ");
    CHECK(pt_last_error_transient(), "a prefix keeps the mark");
    pt_set_error("y");
    CHECK(!pt_last_error_transient(), "a new error clears the mark");
    pt_mark_error_transient(EACCES);
    CHECK(!pt_last_error_transient(), "EACCES is not transient");
    pt_clear_error();
}

int main(void) {
    BIN = getenv("PORTATRAIN");
    if (!BIN) {
        fprintf(stderr, "PORTATRAIN not set\n");
        return 1;
    }
    check_transient_marks();
    TMP = test_tmpdir("badinput");
    GOLD = test_source_path("tests/fixtures/golden/tied");
    char *good_data = pt_path_join(GOLD, "data.bin");
    for (size_t i = 0; i < PT_ARRAY_LEN(CASES); i++) run_case(i, good_data);

    // --- CLI usage (exit 2) ---
    char cmd[8192];
    // refused while parsing the flag
    snprintf(cmd, sizeof cmd, "%s train --model %s --data %s --output-dir %s/x --max-steps 0 --seq-len 16", BIN, GOLD,
             good_data, TMP);
    expect_usage_error("--max-steps 0", cmd, "option --max-steps must be in [1, ");
    snprintf(cmd, sizeof cmd, "%s train --bogus 1", BIN);
    expect_usage_error("unknown option", cmd, "unknown option");

    snprintf(cmd, sizeof cmd, "rm -rf %s", TMP);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", TMP);
    for (int i = 0; i < nowned; i++) free(owned[i]);
    free(good_data);
    free(GOLD);
    free(TMP);
    return test_summary("test_bad_input");
}
