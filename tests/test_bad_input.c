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

int main(void) {
    BIN = getenv("PORTATRAIN");
    if (!BIN) {
        fprintf(stderr, "PORTATRAIN not set\n");
        return 1;
    }
    // An I/O error that may clear up on a retry vs input that fails the same way (train: exit 1 vs 2).
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
    TMP = test_tmpdir("badinput");
    GOLD = test_source_path("tests/fixtures/golden/tied");
    char *good_data = pt_path_join(GOLD, "data.bin");
    char cmd[8192];
    size_t n;

    // --- safetensors ---
    {
        uint8_t tiny[4] = {1, 2, 3, 4};
        char *d = keep(model_dir_with("st_tiny", NULL, tiny, sizeof tiny));
        eval_cmd(cmd, sizeof cmd, d, good_data);
        expect_error("safetensors: file too small", cmd, "model.safetensors");
    }
    {
        uint8_t b[16] = {0};
        b[0] = 200;  // header claims 200 bytes, file has 8
        char *d = keep(model_dir_with("st_trunc", NULL, b, sizeof b));
        eval_cmd(cmd, sizeof cmd, d, good_data);
        expect_error("safetensors: truncated header", cmd, "truncated header");
    }
    {
        uint8_t b[16] = {0};
        uint64_t big = 200ull * 1000 * 1000;
        memcpy(b, &big, 8);
        char *d = keep(model_dir_with("st_big", NULL, b, sizeof b));
        eval_cmd(cmd, sizeof cmd, d, good_data);
        expect_error("safetensors: oversized header", cmd, "exceeds");
    }
    {
        uint8_t *b = keep(st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                              "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, &n));
        char *d = keep(model_dir_with("st_overlap", NULL, b, n));
        eval_cmd(cmd, sizeof cmd, d, good_data);
        expect_error("safetensors: overlapping ranges", cmd, "overlaps");
    }
    {
        uint8_t *b = keep(st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, &n));
        char *d = keep(model_dir_with("st_outside", NULL, b, n));
        eval_cmd(cmd, sizeof cmd, d, good_data);
        expect_error("safetensors: range outside file", cmd, "outside the data section");
    }
    {
        uint8_t *b = keep(st_bytes("{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, &n));
        char *d = keep(model_dir_with("st_dtype", NULL, b, n));
        eval_cmd(cmd, sizeof cmd, d, good_data);
        expect_error("safetensors: unknown dtype", cmd, "unknown dtype");
    }
    {
        uint8_t *b = keep(st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, &n));
        char *d = keep(model_dir_with("st_size", NULL, b, n));
        eval_cmd(cmd, sizeof cmd, d, good_data);
        expect_error("safetensors: shape x dtype != range", cmd, "needs 12");
    }
    {
        uint8_t *b = keep(st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                              "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, &n));
        char *d = keep(model_dir_with("st_dup", NULL, b, n));
        eval_cmd(cmd, sizeof cmd, d, good_data);
        expect_error("safetensors: duplicate names", cmd, "duplicate tensor name");
    }
    {
        uint8_t *b = keep(st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]", 8, &n));
        char *d = keep(model_dir_with("st_json", NULL, b, n));
        eval_cmd(cmd, sizeof cmd, d, good_data);
        expect_error("safetensors: malformed header JSON", cmd, "malformed JSON");
    }
    // Model-level checks: a valid file with the wrong contents.
    {
        // only the embedding, with the right shape: every other tensor missing
        static float emb[128 * 64];
        uint8_t *b = keep(st_bytes("{\"model.embed_tokens.weight\":{\"dtype\":\"F32\",\"shape\":[128,64],"
                              "\"data_offsets\":[0,32768]}}", 32768, &n));
        memcpy(b + n - 32768, emb, 32768);
        char *d = keep(model_dir_with("st_missing", NULL, b, n));
        eval_cmd(cmd, sizeof cmd, d, good_data);
        expect_error("model: missing tensor", cmd, "missing tensor \"model.layers.0.input_layernorm.weight\"");
    }
    {
        uint8_t *b = keep(st_bytes("{\"model.embed_tokens.weight\":{\"dtype\":\"F32\",\"shape\":[64,128],"
                              "\"data_offsets\":[0,32768]}}", 32768, &n));
        char *d = keep(model_dir_with("st_shape", NULL, b, n));
        eval_cmd(cmd, sizeof cmd, d, good_data);
        expect_error("model: wrong shape", cmd, "has shape [64,128] but config.json implies [128,64]");
    }
    {
        uint8_t *b = keep(st_bytes("{\"model.embed_tokens.weight\":{\"dtype\":\"I32\",\"shape\":[128,64],"
                              "\"data_offsets\":[0,32768]}}", 32768, &n));
        char *d = keep(model_dir_with("st_wrongtype", NULL, b, n));
        eval_cmd(cmd, sizeof cmd, d, good_data);
        expect_error("model: integer weight dtype", cmd, "has dtype I32");
    }
    // --- config.json ---
    {
        char *d = keep(model_dir_with("cfg_bad_json", "{\"model_type\": \"qwen3\", \"vocab_size\": ", NULL, 0));
        eval_cmd(cmd, sizeof cmd, d, good_data);
        expect_error("config: malformed JSON", cmd, "config.json: malformed JSON");
    }
    {
        char *d = keep(model_dir_with("cfg_missing", "{\"model_type\": \"qwen3\", \"vocab_size\": 128}", NULL, 0));
        eval_cmd(cmd, sizeof cmd, d, good_data);
        expect_error("config: missing field", cmd, "missing required field \"hidden_size\"");
    }
    {
        char *d = keep(model_dir_with("cfg_type", "{\"model_type\": \"qwen3\", \"vocab_size\": \"128\"}", NULL, 0));
        eval_cmd(cmd, sizeof cmd, d, good_data);
        expect_error("config: wrong field type", cmd, "\"vocab_size\" must be an integer");
    }
    {
        char *d = keep(model_dir_with("cfg_gqa", "{\"model_type\": \"qwen3\", \"vocab_size\": 128, \"hidden_size\": 64, "
                                 "\"intermediate_size\": 96, \"num_hidden_layers\": 1, \"num_attention_heads\": 4, "
                                 "\"num_key_value_heads\": 3}", NULL, 0));
        eval_cmd(cmd, sizeof cmd, d, good_data);
        expect_error("config: heads not divisible", cmd, "multiple of num_key_value_heads");
    }
    {
        char *d = keep(model_dir_with("cfg_llama", "{\"model_type\": \"llama\"}", NULL, 0));
        eval_cmd(cmd, sizeof cmd, d, good_data);
        expect_error("config: other model type", cmd, "model_type is \"llama\"");
    }
    // --- token shards ---
    {
        size_t len;
        char *data = pt_read_file(good_data, &len);
        char *p = keep(pt_path_join(TMP, "magic.bin"));
        int32_t bad = 12345;
        memcpy(data, &bad, 4);
        write_bytes(p, data, len);
        eval_cmd(cmd, sizeof cmd, GOLD, p);
        expect_error("shard: wrong magic", cmd, "wrong magic");
        free(data);
        data = pt_read_file(good_data, &len);
        p = keep(pt_path_join(TMP, "trunc.bin"));
        write_bytes(p, data, len - 10);
        eval_cmd(cmd, sizeof cmd, GOLD, p);
        expect_error("shard: truncated body", cmd, "truncated");
        p = keep(pt_path_join(TMP, "header.bin"));
        write_bytes(p, data, 100);
        eval_cmd(cmd, sizeof cmd, GOLD, p);
        expect_error("shard: truncated header", cmd, "truncated shard header");
        // id >= the model's vocab (shard header says vocab 1000, model has 128)
        uint32_t toks[40];
        for (int i = 0; i < 40; i++) toks[i] = (uint32_t)(i * 3 % 128);
        toks[17] = 500;
        p = keep(pt_path_join(TMP, "vocab.bin"));
        pt_shard_write(p, toks, 40, 1000, NULL);
        eval_cmd(cmd, sizeof cmd, GOLD, p);
        expect_error("shard: id >= model vocab_size", cmd, "id 500 >= the model's vocab_size 128");
        // id >= the shard's own vocab
        p = keep(pt_path_join(TMP, "vocab2.bin"));
        pt_shard_write(p, toks, 40, 200, NULL);
        eval_cmd(cmd, sizeof cmd, GOLD, p);
        expect_error("shard: id >= shard vocab", cmd, "id 500 >= the shard's vocab size 200");
        free(data);
    }
    // --- CLI usage ---
    {
        char *out, *err;
        snprintf(cmd, sizeof cmd, "%s train --model %s --data %s --output-dir %s/x --max-steps 0 --seq-len 16", BIN,
                 GOLD, good_data, TMP);
        // a usage error (exit 2), refused while parsing the flag
        int rc0 = test_run(cmd, &out, &err);
        CHECK(rc0 == 2 && strstr(err, "option --max-steps must be in [1, "), "--max-steps 0: rc %d, %s", rc0, err);
        free(out);
        free(err);
        snprintf(cmd, sizeof cmd, "%s train --bogus 1", BIN);
        int rc = test_run(cmd, &out, &err);
        CHECK(rc == 2 && strstr(err, "unknown option"), "unknown option: rc %d, %s", rc, err);
        free(out);
        free(err);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", TMP);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", TMP);
    for (int i = 0; i < nowned; i++) free(owned[i]);
    free(good_data);
    free(GOLD);
    free(TMP);
    return test_summary("test_bad_input");
}
