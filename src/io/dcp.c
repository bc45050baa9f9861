#include "io/dcp.h"
#include "util/common.h"
#include "util/fileio.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int has_distcp_file(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    const struct dirent *e;
    while (!found && (e = readdir(d))) {
        const size_t n = strlen(e->d_name);
        found = n > 7 && !strcmp(e->d_name + n - 7, ".distcp");
    }
    closedir(d);
    return found;
}

int dcp_is_checkpoint_dir(const char *dir) {
    char *mp = pt_path_join(dir, ".metadata");
    FILE *f = fopen(mp, "rb");
    free(mp);
    if (!f) return 0;
    unsigned char head[2] = {0, 0};
    const int pickle = fread(head, 1, 2, f) == 2 && head[0] == 0x80 && head[1] >= 2;  // PROTO opcode
    fclose(f);
    return pickle && has_distcp_file(dir);
}

int dcp_refuse(const char *dir) {
    pt_set_error("%s: a TorchTitan/PyTorch DCP checkpoint (.metadata + *.distcp); convert it first: python3 "
                 "tools/dcp_to_hf.py %s OUT --config CONFIG.json", dir, dir);
    return -1;
}
