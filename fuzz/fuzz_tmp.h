// Fuzz targets whose parser reads a file: the input goes to one scratch file per process.
#pragma once
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

// Writes data to DIR/name (DIR made once per process) and returns the path (static storage).
static const char *fuzz_write_tmp(const char *name, const uint8_t *data, size_t size) {
    static char dir[64], path[128];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/pt-fuzz-XXXXXX");
        if (!mkdtemp(dir)) abort();
    }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    fuzz_write_file(path, data, size);
    return path;
}
