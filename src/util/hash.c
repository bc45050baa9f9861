#include "util/hash.h"
#include "util/common.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pt_sha256 { EVP_MD_CTX *ctx; };

pt_sha256 *pt_sha256_new(void) {
    pt_sha256 *h = pt_malloc(sizeof *h);
    h->ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL);
    return h;
}
void pt_sha256_update(pt_sha256 *h, const void *data, size_t len) { EVP_DigestUpdate(h->ctx, data, len); }
void pt_sha256_final_hex(pt_sha256 *h, char hex[65]) {
    unsigned char md[32];
    unsigned int n = 0;
    EVP_DigestFinal_ex(h->ctx, md, &n);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    EVP_MD_CTX_free(h->ctx);
    free(h);
}
void pt_sha256_hex(const void *data, size_t len, char hex[65]) {
    pt_sha256 *h = pt_sha256_new();
    pt_sha256_update(h, data, len);
    pt_sha256_final_hex(h, hex);
}
int pt_sha256_file_hex(const char *path, char hex[65]) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        pt_set_error("%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    pt_sha256 *h = pt_sha256_new();
    static _Thread_local unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) pt_sha256_update(h, buf, n);
    int err = ferror(f);
    fclose(f);
    pt_sha256_final_hex(h, hex);
    if (err) {
        pt_set_error("%s: read error", path);
        return -1;
    }
    return 0;
}
