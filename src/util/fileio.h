// File helpers: whole-file reads, durable writes, directories.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// Reads a whole file; returns NULL (error set, naming the path) on failure.
// The buffer is NUL-terminated (not counted in *len).
char *pt_read_file(const char *path, size_t *len);
// Reads an open stream to its end, NUL-terminated like pt_read_file; NULL on a read error, with errno
// from the read and no error set, so the caller names the stream.
char *pt_read_all(FILE *f, size_t *len);
// Writes `len` bytes to `path` via a temporary file + fsync + rename, so a
// crash never leaves a half-written file under the final name.
int pt_write_file_atomic(const char *path, const void *data, size_t len);
// write(2) loop; names the path in the error.
int pt_write_all(int fd, const void *data, size_t len, const char *path);
int pt_fsync_dir(const char *dir);
int pt_mkdir_p(const char *dir);
// Removes a file or a directory tree (symlinks themselves, never what they point to); an absent path is
// no error. -1 with an error naming the path that could not be removed.
int pt_remove_tree(const char *path);
int pt_is_dir(const char *path);
int pt_file_exists(const char *path);
// Maps a whole regular file read-only. Returns 0 and sets *map (NULL for an
// empty file) and *size; -1 with an error naming the path. Unmap with
// pt_unmap_file.
int pt_map_file(const char *path, const void **map, size_t *size);
void pt_unmap_file(const void *map, size_t size);
// path join into a malloc'd string
char *pt_path_join(const char *a, const char *b);
