// Fuzz targets whose parser reads a file: the input goes to one scratch file per process.
#pragma once
#include <dirent.h>
#include <sys/stat.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Replaces the file at path with data.
static void fuzz_write_file(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
}

static char fuzz_tmp_dir[64];

// Removes path and, for a directory, everything under it (the targets write at most a checkpoint dir).
static void fuzz_remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char sub[4096];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            fuzz_remove_tree(sub);
        }
        if (d) closedir(d);
        rmdir(path);
    } else unlink(path);
}

// At a normal exit (-max_total_time, -runs): the scratch dir goes (a crash leaves it, next to libFuzzer's
// crash-* file, for the reproduction).
static void fuzz_remove_tmp(void) {
    if (fuzz_tmp_dir[0]) fuzz_remove_tree(fuzz_tmp_dir);
}

// Writes data to DIR/name (DIR made once per process) and returns the path (static storage).
static const char *fuzz_write_tmp(const char *name, const uint8_t *data, size_t size) {
    static char path[128];
    char *dir = fuzz_tmp_dir;
    if (!dir[0]) {
        snprintf(dir, sizeof fuzz_tmp_dir, "/tmp/pt-fuzz-XXXXXX");
        if (!mkdtemp(dir)) abort();
        atexit(fuzz_remove_tmp);
    }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    fuzz_write_file(path, data, size);
    return path;
}
