// Manual check of pt_comm_gather_bytes past INT_MAX bytes (not a ctest: it needs ~4 GB of memory). Every rank
// sends N bytes; with 4 ranks x 750 MB the last displacement (2.25e9) does not fit MPI's int, as in the final
// model save of Qwen3-8B (a 2.49 GB embedding gathered from all ranks). Build and run from the repository root:
//   mpicc -O2 -Isrc tests/manual/gather_big.c build/libpt_dist.a build/libpt_util.a -lm -fopenmp -o /tmp/gather_big
//   mpirun --oversubscribe -np 4 /tmp/gather_big 750000000
// Before 2026-12-05: a segmentation fault in MPI_Gatherv; now "gathered 3000000000 bytes from 4 ranks: ok".
#include "dist/comm.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 750000000ull;
    pt_comm *w = pt_comm_init(1);
    int r = pt_comm_rank(w), W = pt_comm_size(w);
    unsigned char *s = malloc(n);
    for (size_t i = 0; i < n; i++) s[i] = (unsigned char)(i * 7 + r * 13);
    char *all = NULL; size_t *counts = calloc(W, sizeof(size_t));
    pt_comm_gather_bytes(w, s, n, 0, &all, counts);
    if (r == 0) {
        size_t bad = 0, off = 0;
        for (int q = 0; q < W; q++) { if (counts[q] != n) bad++; for (size_t i = 0; i < n; i += 4099) bad += (unsigned char)all[off + i] != (unsigned char)(i * 7 + q * 13); off += counts[q]; }
        printf("gathered %zu bytes from %d ranks: %s\n", off, W, bad ? "WRONG" : "ok");
    }
    pt_comm_free(w); pt_comm_finalize();
    return 0;
}
