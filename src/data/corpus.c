#include "data/corpus.h"
#include "util/common.h"
#include "util/hash.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

struct pt_corpus_reader {
    char *path;
    FILE *f;
    pt_corpus_kind kind;
    char *field;
    char *buf;  // line buffer (getline) or whole-file buffer
    size_t cap;
    uint64_t line_no, bytes, docs;
    cJSON *json;  // the current jsonl document's tree
    char *doc;    // the document decoded again when it holds a NUL (raw_field_value)
    size_t doc_cap;
    char *alt;    // the line with NaN/Infinity/-Infinity replaced (nonfinite_to_zero)
    size_t alt_cap;
    pt_sha256 *sha;
    char hex[65];
    bool done;
    bool sniff;  // text by its name alone: warn if its first line is a JSON Lines record
    bool json_name;  // JSON Lines because of a .json name alone (it may be a JSON file meant as text)
};

static bool ends_with_ci(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

pt_corpus_kind pt_corpus_kind_of(const char *path, bool lines) {
    // .json too: HF datasets' to_json() and load_dataset("json") use it for JSON Lines. Read as text, its
    // JSON syntax would have become the training text.
    if (ends_with_ci(path, ".jsonl") || ends_with_ci(path, ".ndjson") || ends_with_ci(path, ".json"))
        return PT_CORPUS_JSONL;
    return lines ? PT_CORPUS_LINES : PT_CORPUS_TEXT;
}

pt_corpus_reader *pt_corpus_open(const char *path, bool lines, const char *text_field) {
    return pt_corpus_open_as(path, PT_CORPUS_AUTO, lines, text_field);
}

pt_corpus_reader *pt_corpus_open_as(const char *path, pt_corpus_format format, bool lines, const char *text_field) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        pt_set_error("%s: cannot open input: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || S_ISDIR(st.st_mode)) {
        pt_set_error("%s: not a readable file", path);
        fclose(f);
        return NULL;
    }
    // A compressed or UTF-16/32 corpus would be tokenized as garbage without a word: refuse it. Only regular
    // files are peeked at (a pipe's bytes cannot be read twice).
    if (S_ISREG(st.st_mode)) {
        static const struct { const char *magic; size_t n; const char *what; } kinds[] = {
            {"\x1F\x8B", 2, "gzip"}, {"\x28\xB5\x2F\xFD", 4, "zstd"}, {"BZh91AY", 0, "bzip2"},
            {"\xFD" "7zXZ\x00", 6, "xz"}, {"PK\x03\x04", 4, "zip"}, {"\x04\x22\x4D\x18", 4, "lz4"},
            {"\xFF\xFE", 2, NULL}, {"\xFE\xFF", 2, NULL}, {"\x00\x00\xFE\xFF", 4, NULL}};  // NULL: UTF-16/32
        unsigned char head[6] = {0};
        size_t got = fread(head, 1, sizeof head, f);
        // bzip2: "BZh", the block size digit 1-9, then the block magic 31 41 (text may start with "BZh")
        bool bz = got == 6 && memcmp(head, "BZh", 3) == 0 && head[3] >= '1' && head[3] <= '9' && head[4] == 0x31 &&
                  head[5] == 0x41;
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
            if (kinds[k].n ? got >= kinds[k].n && memcmp(head, kinds[k].magic, kinds[k].n) == 0 : bz) {
                if (!kinds[k].what)
                    pt_set_error("%s: UTF-16/UTF-32 text (byte order mark %02X %02X); convert it to UTF-8 first", path,
                                 head[0], head[1]);
                else
                    pt_set_error("%s: %s-compressed; decompress it first (inputs are plain UTF-8 text or jsonl)",
                                 path, kinds[k].what);
                fclose(f);
                return NULL;
            }
        if (fseek(f, 0, SEEK_SET) != 0) {
            pt_set_error("%s: cannot read input: %s", path, strerror(errno));
            fclose(f);
            return NULL;
        }
    }
    pt_corpus_reader *r = pt_calloc(1, sizeof *r);
    r->path = pt_strdup(path);
    r->f = f;
    r->kind = format == PT_CORPUS_AUTO ? pt_corpus_kind_of(path, lines)
              : format == PT_CORPUS_FORMAT_JSONL ? PT_CORPUS_JSONL
              : lines ? PT_CORPUS_LINES
                      : PT_CORPUS_TEXT;
    r->sniff = format == PT_CORPUS_AUTO && r->kind != PT_CORPUS_JSONL;
    r->json_name = format == PT_CORPUS_AUTO && ends_with_ci(path, ".json");
    r->field = pt_strdup(text_field && *text_field ? text_field : "text");
    r->sha = pt_sha256_new();
    return r;
}

static void finish(pt_corpus_reader *r) {
    if (r->done) return;
    r->done = true;
    pt_sha256_final_hex(r->sha, r->hex);
    r->sha = NULL;
}

static int read_error(pt_corpus_reader *r) {
    pt_set_error("%s: read error: %s", r->path, strerror(errno));
    return -1;
}

// A UTF-8 byte order mark at the start of a text file marks the encoding and
// is not part of the text (Python's "utf-8-sig"; cJSON skips it in .jsonl).
static size_t bom_len(const char *s, size_t n) { return n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0; }

// Next line without its terminator: 1, 0 at EOF, -1 on error.
static int next_line(pt_corpus_reader *r, size_t *len) {
    ssize_t n = getline(&r->buf, &r->cap, r->f);
    if (n < 0) {
        if (ferror(r->f)) return read_error(r);
        return 0;
    }
    r->line_no++;
    r->bytes += (uint64_t)n;
    pt_sha256_update(r->sha, r->buf, (size_t)n);
    if (n > 0 && r->buf[n - 1] == '\n') n--;
    if (n > 0 && r->buf[n - 1] == '\r') n--;
    r->buf[n] = 0;
    size_t skip = r->line_no == 1 && r->kind == PT_CORPUS_LINES ? bom_len(r->buf, (size_t)n) : 0;
    if (skip) memmove(r->buf, r->buf + skip, (size_t)n - skip + 1);
    *len = (size_t)n - skip;
    return 1;
}

// ---- cJSON keeps no string length: a "\u0000" in the text would cut the
// document at its first NUL. Lines that contain the escape have the field's
// value decoded again here, from the raw line cJSON has already validated
// (so quotes close, escapes are complete and surrogates come in pairs).

static uint32_t hex4(const char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v = v << 4 | (uint32_t)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
}

static size_t put_utf8(char *out, uint32_t cp) {
    char b[4];
    size_t n;
    if (cp < 0x80) { b[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { b[0] = (char)(0xC0 | cp >> 6); b[1] = (char)(0x80 | (cp & 63)); n = 2; }
    else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | cp >> 12); b[1] = (char)(0x80 | (cp >> 6 & 63)); b[2] = (char)(0x80 | (cp & 63)); n = 3;
    } else {
        b[0] = (char)(0xF0 | cp >> 18); b[1] = (char)(0x80 | (cp >> 12 & 63));
        b[2] = (char)(0x80 | (cp >> 6 & 63)); b[3] = (char)(0x80 | (cp & 63)); n = 4;
    }
    if (out) memcpy(out, b, n);
    return n;
}

// The JSON string whose opening quote is at p: its decoded length, the bytes
// into out unless NULL; *end just past the closing quote.
static size_t json_string(const char *p, const char **end, char *out) {
    size_t k = 0;
    for (p++; *p != '"';) {
        unsigned char c = (unsigned char)*p++;
        if (c != '\\') {
            if (out) out[k] = (char)c;
            k++;
            continue;
        }
        uint32_t cp = (unsigned char)*p++;
        switch (cp) {
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u':
            cp = hex4(p);
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p[0] == '\\' && p[1] == 'u') {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (hex4(p + 2) - 0xDC00);
                p += 6;
            }
            break;
        default: break;  // \" \\ \/
        }
        k += put_utf8(out ? out + k : NULL, cp);
    }
    *end = p + 1;
    return k;
}

static bool is_hex4(const char *p, const char *e) {
    if (e - p < 4) return false;
    for (int i = 0; i < 4; i++)
        if (!((p[i] >= '0' && p[i] <= '9') || ((p[i] | 0x20) >= 'a' && (p[i] | 0x20) <= 'f'))) return false;
    return true;
}

// Offset of the first "\uD800".."\uDFFF" escape not part of a high-low pair, or -1. Such a line is valid
// JSON to Python's json.loads, but the string is not Unicode text (HF tokenizers refuses it) and cJSON
// fails on it: the error says which escape it is, not just "malformed".
static long lone_surrogate(const char *buf, size_t n) {
    const char *p = buf, *e = buf + n;
    while (p < e) {
        if (*p != '\\' || p + 1 >= e) {
            p++;
            continue;
        }
        if (p[1] != 'u' || !is_hex4(p + 2, e)) {
            p += 2;
            continue;
        }
        uint32_t cp = hex4(p + 2);
        if (cp >= 0xD800 && cp < 0xDC00) {
            if (e - p >= 12 && p[6] == '\\' && p[7] == 'u' && is_hex4(p + 8, e) && hex4(p + 8) >= 0xDC00 &&
                hex4(p + 8) < 0xE000) {
                p += 12;
                continue;
            }
            return (long)(p - buf);
        }
        if (cp >= 0xDC00 && cp < 0xE000) return (long)(p - buf);
        p += 6;
    }
    return -1;
}

static const char *skip_ws(const char *p, const char *e) {
    while (p < e && (unsigned char)*p <= 32) p++;  // cJSON's notion of whitespace
    return p;
}

// Past one value (scalar, string, object or array) starting at p.
static const char *skip_value(const char *p, const char *e) {
    int depth = 0;
    while (p < e) {
        if (*p == '"') {
            json_string(p, &p, NULL);
            if (depth == 0) return p;
            continue;
        }
        if (*p == '{' || *p == '[') depth++;
        else if (*p == '}' || *p == ']') {
            if (depth == 0) return p;
            if (--depth == 0) return p + 1;
        } else if (*p == ',' && depth == 0) return p;
        p++;
    }
    return p;
}

// The raw value of the first top-level member named field (cJSON's lookup
// also takes the first; a repeated field is refused before), NULL if not found.
static const char *raw_field_value(const char *buf, size_t n, const char *field) {
    const char *p = buf, *e = buf + n, *q;
    if (n >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0) p += 3;
    p = skip_ws(p, e);
    if (p >= e || *p++ != '{') return NULL;
    size_t flen = strlen(field);
    for (;;) {
        p = skip_ws(p, e);
        if (p >= e || *p != '"') return NULL;
        size_t klen = json_string(p, &q, NULL);
        bool match = false;
        if (klen == flen) {
            char *key = pt_malloc(klen + 1);
            json_string(p, &q, key);
            match = memcmp(key, field, flen) == 0;
            free(key);
        }
        p = skip_ws(q, e);
        if (p >= e || *p++ != ':') return NULL;
        p = skip_ws(p, e);
        if (match) return p;
        p = skip_ws(skip_value(p, e), e);
        if (p >= e || *p++ != ',') return NULL;
    }
}

// "\u0000" or a raw NUL byte anywhere in the line (an escaped backslash before
// it only costs the slow path). cJSON accepts raw control characters inside
// strings (strict JSON does not; Python's json.loads with strict=False does) and
// keeps them, but its strlen-terminated value would end at a raw NUL.
static bool has_nul_escape(const char *buf, size_t n) {
    if (memchr(buf, 0, n)) return true;
    for (size_t i = 0; i + 6 <= n; i++)
        if (buf[i] == '\\' && memcmp(buf + i + 1, "u0000", 5) == 0) return true;
    return false;
}

// Python's json.dumps writes a float nan/inf as the bare words NaN, Infinity, -Infinity (allow_nan=True, the
// default) and json.loads reads them back; cJSON refuses them. In a copy of the line, each such word outside
// strings becomes 0 padded with spaces (same length: offsets and the strings are unchanged). Returns how many.
static int nonfinite_to_zero(char *p, size_t n) {
    static const char *const words[3] = {"-Infinity", "Infinity", "NaN"};
    int count = 0;
    for (size_t i = 0; i < n;) {
        if (p[i] == '"') {
            for (i++; i < n && p[i] != '"'; i++)
                if (p[i] == '\\') i++;
            i++;
            continue;
        }
        bool hit = false;
        for (int w = 0; w < 3 && !hit; w++) {
            size_t k = strlen(words[w]);
            if (n - i >= k && memcmp(p + i, words[w], k) == 0 &&
                (i == 0 || strchr(" \t:,[", p[i - 1])) && (i + k == n || strchr(" \t,]}", p[i + k]))) {
                memset(p + i, ' ', k);
                p[i] = '0';
                i += k;
                count++;
                hit = true;
            }
        }
        if (!hit) i++;
    }
    return count;
}

static int next_jsonl(pt_corpus_reader *r, const char **text, size_t *len) {
    for (;;) {
        size_t n;
        int rc = next_line(r, &n);
        if (rc <= 0) return rc;
        size_t i = 0;
        while (i < n && (r->buf[i] == ' ' || r->buf[i] == '\t')) i++;
        if (i == n) continue;  // blank line
        if (r->json) cJSON_Delete(r->json);
        const char *end = NULL;
        r->json = cJSON_ParseWithLengthOpts(r->buf, n, &end, 0);
        if (!r->json) {
            if (n + 1 > r->alt_cap) {
                r->alt_cap = n + 1;
                r->alt = pt_realloc(r->alt, r->alt_cap);
            }
            memcpy(r->alt, r->buf, n + 1);
            // Unpaired surrogate escapes become \ufffd (same length) in the copy: in another field they are
            // no concern of ours (json.loads reads them); in the text field they are refused below.
            int fixes = nonfinite_to_zero(r->alt, n);
            for (long off = 0, ls; (ls = lone_surrogate(r->alt + off, n - (size_t)off)) >= 0; off += ls + 6) {
                memcpy(r->alt + off + ls, "\\ufffd", 6);
                fixes++;
            }
            const char *end2 = NULL;
            if (fixes > 0) r->json = cJSON_ParseWithLengthOpts(r->alt, n, &end2, 0);
            if (end2) end = r->buf + (end2 - r->alt);  // where the copy's parse ended (or failed)
            if (r->json) {
                const char *raw = raw_field_value(r->buf, n, r->field), *q;
                if (raw && *raw == '"') {
                    json_string(raw, &q, NULL);
                    long ls = lone_surrogate(raw, (size_t)(q - raw));
                    if (ls >= 0) {
                        pt_set_error("%s:%llu: unpaired UTF-16 surrogate escape '%.6s' at byte %ld, in the \"%s\" "
                                     "field: not a Unicode character (Python's json.loads accepts it, HF tokenizers "
                                     "then refuses the string); replace it, e.g. with \\ufffd",
                                     r->path, (unsigned long long)r->line_no, raw + ls, (long)(raw - r->buf) + ls + 1,
                                     r->field);
                        return -1;
                    }
                }
            }
        }
        if (!r->json) {
            size_t at = end ? (size_t)(end - r->buf) : 0;
            if (at > n) at = n;
            // A JSON array or a pretty-printed object is not JSON Lines: say so rather than "malformed".
            // (an object is taken as spread over lines when the line does not end with its closing brace)
            size_t last = n;
            while (last > i && (r->buf[last - 1] == ' ' || r->buf[last - 1] == '\t')) last--;
            const char *hint = r->line_no == 1 && (r->buf[i] == '[' || (r->buf[i] == '{' && r->buf[last - 1] != '}'))
                                   ? " (JSON Lines input: one complete JSON object per line; a JSON array or "
                                     "an object over several lines is not read)"
                                   : "";
            pt_set_error("%s:%llu: malformed JSON line (near byte %zu)%s", r->path, (unsigned long long)r->line_no,
                         at + 1, hint);
            return -1;
        }
        for (const char *p = end; p && p < r->buf + n; p++)
            if (*p != ' ' && *p != '\t') {
                pt_set_error("%s:%llu: trailing characters after the JSON value", r->path,
                             (unsigned long long)r->line_no);
                return -1;
            }
        if (!cJSON_IsObject(r->json)) {
            pt_set_error("%s:%llu: expected a JSON object with a \"%s\" string%s", r->path,
                         (unsigned long long)r->line_no, r->field,
                         cJSON_IsArray(r->json) && r->line_no == 1
                             ? " (JSON Lines input: one object per line, not a JSON array)"
                             : "");
            return -1;
        }
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->json, r->field);
        if (!v) {
            pt_set_error("%s:%llu: no \"%s\" field (choose one with --text-field)", r->path,
                         (unsigned long long)r->line_no, r->field);
            return -1;
        }
        for (const cJSON *o = v->next; o; o = o->next)
            if (o->string && strcmp(o->string, r->field) == 0) {  // Python's json.loads would take the last
                pt_set_error("%s:%llu: field \"%s\" appears more than once", r->path, (unsigned long long)r->line_no,
                             r->field);
                return -1;
            }
        if (!cJSON_IsString(v) || !v->valuestring) {
            pt_set_error("%s:%llu: field \"%s\" is not a string", r->path, (unsigned long long)r->line_no, r->field);
            return -1;
        }
        size_t m = strlen(v->valuestring);
        *text = v->valuestring;
        if (has_nul_escape(r->buf, n)) {
            const char *raw = raw_field_value(r->buf, n, r->field), *q;
            if (!raw || *raw != '"') {
                pt_set_error("%s:%llu: cannot find field \"%s\" again to keep its NUL", r->path,
                             (unsigned long long)r->line_no, r->field);
                return -1;
            }
            m = json_string(raw, &q, NULL);
            if (m + 1 > r->doc_cap) {
                r->doc_cap = m + 1;
                r->doc = pt_realloc(r->doc, r->doc_cap);
            }
            json_string(raw, &q, r->doc);
            r->doc[m] = 0;
            *text = r->doc;
        }
        if (m == 0) continue;
        *len = m;
        return 1;
    }
}

static int next_whole(pt_corpus_reader *r, const char **text, size_t *len) {
    if (r->docs > 0 || r->line_no > 0) return 0;
    r->line_no = 1;  // marks "read"
    size_t n = 0;
    for (;;) {
        if (r->cap - n < (1u << 16) + 1) {
            r->cap = r->cap ? 2 * r->cap : (1u << 20);
            r->buf = pt_realloc(r->buf, r->cap);
        }
        size_t got = fread(r->buf + n, 1, r->cap - n - 1, r->f);
        pt_sha256_update(r->sha, r->buf + n, got);
        n += got;
        if (got == 0) {
            if (ferror(r->f)) return read_error(r);
            break;
        }
    }
    r->buf[n] = 0;
    r->bytes = n;
    size_t skip = bom_len(r->buf, n);
    if (n == skip) return 0;
    *text = r->buf + skip;
    *len = n - skip;
    return 1;
}

// A text input (by its name) whose first line is a JSON object holding the text field as a string: most
// likely JSON Lines under another name (a pipe, /dev/stdin, a .txt) whose JSON syntax would be trained on.
static void sniff_jsonl(pt_corpus_reader *r, const char *text, size_t len) {
    r->sniff = false;
    const char *p = text, *e = text + len;
    if (len >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0) p += 3;
    while (p < e && (*p == ' ' || *p == '\t')) p++;
    if (p >= e || *p != '{') return;
    const char *nl = memchr(p, '\n', (size_t)(e - p));
    cJSON *j = cJSON_ParseWithLength(p, (size_t)((nl ? nl : e) - p));
    const cJSON *v = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, r->field) : NULL;
    if (cJSON_IsString(v))
        pt_warn("%s: read as text (by its name), but its first line is a JSON object with a \"%s\" string: "
                "its JSON syntax is tokenized as text. For JSON Lines use --format jsonl (or a .jsonl name)",
                r->path, r->field);
    cJSON_Delete(j);
}

int pt_corpus_next(pt_corpus_reader *r, const char **text, size_t *len) {
    if (r->done) return 0;
    int rc;
    switch (r->kind) {
    case PT_CORPUS_JSONL: rc = next_jsonl(r, text, len); break;
    case PT_CORPUS_LINES:
        for (;;) {
            rc = next_line(r, len);
            if (rc != 1 || *len > 0) break;
        }
        if (rc == 1) *text = r->buf;
        break;
    default: rc = next_whole(r, text, len); break;
    }
    if (rc < 0 && r->json_name && r->docs == 0) {
        // A .json that is not JSON Lines may be a JSON file meant as a text document (code corpora).
        char *msg = pt_strdup(pt_last_error());
        pt_set_error("%s (a .json name is read as JSON Lines; --format text reads each input as text)", msg);
        free(msg);
    }
    if (rc == 1 && r->sniff) sniff_jsonl(r, *text, *len);
    if (rc == 1) r->docs++;
    if (rc == 0) finish(r);
    return rc;
}

uint64_t pt_corpus_bytes(const pt_corpus_reader *r) { return r->bytes; }
uint64_t pt_corpus_documents(const pt_corpus_reader *r) { return r->docs; }
void pt_corpus_sha256(const pt_corpus_reader *r, char hex[65]) {
    if (r->done) memcpy(hex, r->hex, 65);
    else hex[0] = 0;
}

void pt_corpus_close(pt_corpus_reader *r) {
    if (!r) return;
    if (r->f) fclose(r->f);
    if (r->json) cJSON_Delete(r->json);
    if (r->sha) {
        char tmp[65];
        pt_sha256_final_hex(r->sha, tmp);
    }
    free(r->buf);
    free(r->doc);
    free(r->alt);
    free(r->field);
    free(r->path);
    free(r);
}
