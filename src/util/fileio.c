#define _XOPEN_SOURCE 700  // nftw
#include "util/fileio.h"
#include "util/common.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

// "PATH: WHAT: strerror(err)", marked transient where a retry may succeed (pt_mark_error_transient).
static void io_error(const char *path, const char *what, int err) {
    pt_set_error("%s: %s: %s", path, what, strerror(err));
    pt_mark_error_transient(err);
}

char *pt_read_all(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = pt_malloc(cap + 1);
    for (;;) {
        if (n == cap) {
            cap *= 2;
            buf = pt_realloc(buf, cap + 1);
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        const int e = errno;
        free(buf);
        errno = e;
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

char *pt_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        io_error(path, "cannot open", errno);
        return NULL;
    }
    char *buf = pt_read_all(f, len);
    const int e = errno;
    fclose(f);
    if (!buf) io_error(path, "read error", e);
    return buf;
}

int pt_write_all(int fd, const void *data, size_t len, const char *path) {
    const char *p = data;
    while (len > 0) {
        ssize_t w = write(fd, p, len > (1u << 30) ? (1u << 30) : len);
        if (w < 0) {
            if (errno == EINTR) continue;
            pt_set_error("%s: write failed: %s", path, strerror(errno));
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int pt_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) {
        pt_set_error("%s: cannot open directory: %s", dir, strerror(errno));
        return -1;
    }
    int rc = fsync(fd);
    close(fd);
    if (rc != 0) {
        pt_set_error("%s: fsync failed: %s", dir, strerror(errno));
        return -1;
    }
    return 0;
}

int pt_write_file_atomic(const char *path, const void *data, size_t len) {
    size_t n = strlen(path);
    char *tmp = pt_malloc(n + 16);
    snprintf(tmp, n + 16, "%s.tmpXXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        pt_set_error("%s: cannot create temporary file: %s", path, strerror(errno));
        free(tmp);
        return -1;
    }
    if (pt_write_all(fd, data, len, path) != 0 || fsync(fd) != 0) {
        if (!strstr(pt_last_error(), path)) pt_set_error("%s: fsync failed: %s", path, strerror(errno));
        close(fd);
        unlink(tmp);
        free(tmp);
        return -1;
    }
    fchmod(fd, 0644);
    close(fd);
    if (rename(tmp, path) != 0) {
        pt_set_error("%s: rename failed: %s", path, strerror(errno));
        unlink(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    // fsync the directory so the rename itself is durable.
    char *dir = pt_strdup(path);
    char *slash = strrchr(dir, '/');
    int rc = 0;
    if (slash) {
        if (slash == dir) slash[1] = 0; else *slash = 0;
        rc = pt_fsync_dir(dir);
    } else {
        rc = pt_fsync_dir(".");
    }
    free(dir);
    return rc;
}

int pt_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}
int pt_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int pt_mkdir_p(const char *dir) {
    char *tmp = pt_strdup(dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
            pt_set_error("%s: cannot create directory: %s", tmp, strerror(errno));
            free(tmp);
            return -1;
        }
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
        pt_set_error("%s: cannot create directory: %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    free(tmp);
    if (!pt_is_dir(dir)) {
        pt_set_error("%s: exists and is not a directory", dir);
        return -1;
    }
    return 0;
}

char *pt_path_join(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    char *r = pt_malloc(na + nb + 2);
    memcpy(r, a, na);
    size_t k = na;
    if (na > 0 && a[na - 1] != '/') r[k++] = '/';
    memcpy(r + k, b, nb + 1);
    return r;
}

int pt_map_file(const char *path, const void **map, size_t *size) {
    *map = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        io_error(path, "cannot open", errno);
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        pt_set_error("%s: not a regular file", path);
        close(fd);
        return -1;
    }
    size_t n = (size_t)st.st_size;
    void *m = n ? mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (n && m == MAP_FAILED) {
        io_error(path, "mmap failed", errno);
        return -1;
    }
    *map = m;
    *size = n;
    return 0;
}

void pt_unmap_file(const void *map, size_t size) {
    if (map && size) munmap((void *)map, size);
}

static int remove_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

int pt_remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return 0;
    const int rc = S_ISDIR(st.st_mode) ? nftw(path, remove_cb, 16, FTW_DEPTH | FTW_PHYS) : unlink(path);
    if (rc != 0) {
        pt_set_error("%s: cannot remove: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}
