// The suite's file work: a checkpoint's transfer between platforms, the test-only corruption of one, and
// the hashes of the frozen inputs.
#define _GNU_SOURCE
#include "harness/accept_internal.h"
#include "util/fileio.h"
#include "util/hash.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int acc_copy_file(const char *src, const char *dst) {
    int in = open(src, O_RDONLY);
    if (in < 0) { pt_set_error("%s: %s", src, strerror(errno)); return -1; }
    int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0) { pt_set_error("%s: %s", dst, strerror(errno)); close(in); return -1; }
    char buf[1 << 16];
    ssize_t r;
    int rc = 0;
    while ((r = read(in, buf, sizeof buf)) > 0)
        if (pt_write_all(out, buf, (size_t)r, dst) != 0) { rc = -1; break; }
    if (r < 0) { pt_set_error("%s: %s", src, strerror(errno)); rc = -1; }
    if (close(out) != 0 && rc == 0) { pt_set_error("%s: %s", dst, strerror(errno)); rc = -1; }
    close(in);
    return rc;
}

// Copies the regular files of a (flat) checkpoint directory: the transfer of
// a checkpoint from one platform's storage to another's.
int acc_copy_dir(const char *src, const char *dst) {
    DIR *d = opendir(src);
    if (!d) { pt_set_error("%s: %s", src, strerror(errno)); return -1; }
    if (pt_mkdir_p(dst) != 0) { closedir(d); return -1; }
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char *s = pt_path_join(src, e->d_name), *t = pt_path_join(dst, e->d_name);
        struct stat st;
        if (stat(s, &st) == 0 && S_ISREG(st.st_mode)) rc = acc_copy_file(s, t);
        free(s); free(t);
    }
    closedir(d);
    return rc;
}

// Test-only fault: flip one byte in the middle of a checkpoint's tensor data.
int acc_corrupt_checkpoint(const char *ckpt_dir, char *what, size_t n) {
    DIR *d = opendir(ckpt_dir);
    if (!d) { pt_set_error("%s: %s", ckpt_dir, strerror(errno)); return -1; }
    char *victim = NULL;
    for (struct dirent *e; !victim && (e = readdir(d));) {
        const size_t l = strlen(e->d_name);
        if (l > 12 && !strcmp(e->d_name + l - 12, ".safetensors")) victim = pt_path_join(ckpt_dir, e->d_name);
    }
    closedir(d);
    if (!victim) { pt_set_error("%s: no .safetensors file to corrupt", ckpt_dir); return -1; }
    int fd = open(victim, O_RDWR);
    struct stat st;
    int rc = -1;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 16) {
        const off_t at = st.st_size - st.st_size / 3;
        unsigned char b;
        if (pread(fd, &b, 1, at) == 1) {
            b ^= 0x5a;
            if (pwrite(fd, &b, 1, at) == 1) { rc = 0; snprintf(what, n, "%s byte %lld", victim, (long long)at); }
        }
    }
    if (rc) pt_set_error("%s: cannot corrupt: %s", victim, strerror(errno));
    if (fd >= 0) close(fd);
    free(victim);
    return rc;
}

// sha256 of a file, or of a directory as the hash of "name sha256\n" lines of
// its regular files in name order (a data shard set).
int acc_sha256_path(const char *path, char hex[65]) {
    if (!pt_is_dir(path)) return pt_sha256_file_hex(path, hex);
    struct dirent **names = NULL;
    const int n = scandir(path, &names, NULL, alphasort);
    if (n < 0) { pt_set_error("%s: %s", path, strerror(errno)); return -1; }
    pt_sha256 *h = pt_sha256_new();
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (rc == 0 && names[i]->d_name[0] != '.') {
            char *f = pt_path_join(path, names[i]->d_name);
            char fh[65];
            if (!pt_is_dir(f)) {
                if (pt_sha256_file_hex(f, fh) != 0) rc = -1;
                else {
                    char line[512];
                    const int l = snprintf(line, sizeof line, "%s %s\n", names[i]->d_name, fh);
                    pt_sha256_update(h, line, (size_t)l);
                }
            }
            free(f);
        }
        free(names[i]);
    }
    free(names);
    pt_sha256_final_hex(h, hex);
    return rc;
}

int acc_files_equal(const char *a, const char *b) {
    const void *ma, *mb;
    size_t na, nb;
    if (pt_map_file(a, &ma, &na) != 0) return -1;
    if (pt_map_file(b, &mb, &nb) != 0) { pt_unmap_file(ma, na); return -1; }
    const int eq = na == nb && (na == 0 || memcmp(ma, mb, na) == 0);
    pt_unmap_file(ma, na);
    pt_unmap_file(mb, nb);
    return eq;
}
