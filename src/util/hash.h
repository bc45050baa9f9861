// SHA-256 through OpenSSL's EVP interface (hex digests for manifests).
#pragma once
#include <stddef.h>

typedef struct pt_sha256 pt_sha256;  // incremental hasher
pt_sha256 *pt_sha256_new(void);
void pt_sha256_update(pt_sha256 *h, const void *data, size_t len);
// Writes 64 hex chars + NUL into hex[65] and frees the hasher.
void pt_sha256_final_hex(pt_sha256 *h, char hex[65]);
void pt_sha256_hex(const void *data, size_t len, char hex[65]);
// Hashes a file by streaming it; -1 with error naming the file.
int pt_sha256_file_hex(const char *path, char hex[65]);
