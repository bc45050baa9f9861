#include "dist/placement.h"
#include "util/common.h"
#include "util/fileio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// An MPI hostfile as OpenMPI 4 reads it: one host per line, "NAME slots=N [max_slots=M]" or "NAME:N", '#'
// starts a comment. What mpirun would refuse or read otherwise is refused here with the line named: another
// token, a slot count that is not a whole positive number, a host listed twice (mpirun: "multiple
// definitions of the slot count"), a host without a slot count (mpirun gives it one slot per core, which
// topo cannot know).
static int parse_slots(const char *s, int *out) {
    char *end;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v <= 0 || v > (1 << 24)) return -1;
    *out = (int)v;
    return 0;
}

// The slot count of one hostfile line (tok: its host name, "NAME:N" split here; save: strtok_r's state
// for the rest of the line). 0 or -1 with an error naming path:lineno.
static int line_slots(const char *path, int lineno, char *tok, char **save, int *slots) {
    *slots = 0;
    char *colon = strchr(tok, ':');
    if (colon) {
        *colon = 0;
        if (parse_slots(colon + 1, slots) != 0) {
            pt_set_error("%s:%d: '%s:%s': the slot count must be a positive whole number", path, lineno, tok,
                         colon + 1);
            return -1;
        }
    }
    if (!*tok || strlen(tok) > 63) {
        pt_set_error("%s:%d: host name '%s' is empty or longer than 63 characters", path, lineno, tok);
        return -1;
    }
    for (char *kv = strtok_r(NULL, " \t\r\v\f", save); kv; kv = strtok_r(NULL, " \t\r\v\f", save)) {
        int v;
        if (!strncmp(kv, "slots=", 6) && !colon && !*slots) {
            if (parse_slots(kv + 6, slots) != 0) {
                pt_set_error("%s:%d: '%s': the slot count must be a positive whole number", path, lineno, kv);
                return -1;
            }
        } else if (!strncmp(kv, "max_slots=", 10) && parse_slots(kv + 10, &v) == 0) {
            // a cap on oversubscription: where ranks go is decided by slots
        } else {
            pt_set_error("%s:%d: unexpected '%s' (want 'NAME slots=N [max_slots=M]' or 'NAME:N')", path, lineno, kv);
            return -1;
        }
    }
    if (!*slots) {
        pt_set_error("%s:%d: host '%s' has no slot count: mpirun would give it one slot per core, which topo "
                     "cannot know (write '%s slots=N')", path, lineno, tok, tok);
        return -1;
    }
    return 0;
}

int pt_hostfile_read(const char *path, pt_hostlist *h) {
    size_t len;
    char *text = pt_read_file(path, &len);
    if (!text) return -1;
    h->n = 0;
    int lineno = 0, rc = -1;
    int *first_line = pt_calloc(PT_MAX_HOSTS, sizeof(int));
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        lineno++;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *save = NULL, *tok = strtok_r(line, " \t\r\v\f", &save);
        if (!tok) continue;
        if (h->n == PT_MAX_HOSTS) {
            pt_set_error("%s: more than %d hosts", path, PT_MAX_HOSTS);
            goto done;
        }
        int slots;
        if (line_slots(path, lineno, tok, &save, &slots) != 0) goto done;
        for (int i = 0; i < h->n; i++)
            if (!strcmp(h->name[i], tok)) {
                pt_set_error("%s:%d: host '%s' is already listed on line %d (mpirun refuses two slot counts for one "
                             "node: give it one line with the total)", path, lineno, tok, first_line[i]);
                goto done;
            }
        snprintf(h->name[h->n], 64, "%s", tok);
        first_line[h->n] = lineno;
        h->slots[h->n++] = slots;
    }
    if (!h->n) {
        pt_set_error("%s: no hosts", path);
        goto done;
    }
    rc = 0;
done:
    free(first_line);
    free(text);
    return rc;
}

int pt_hosts_uniform(int world, int ranks_per_node, pt_hostlist *h) {
    const int k = ranks_per_node > 0 ? ranks_per_node : world;
    h->n = (world + k - 1) / k;
    if (h->n > PT_MAX_HOSTS) {
        pt_set_error("too many nodes");
        return -1;
    }
    for (int i = 0; i < h->n; i++) snprintf(h->name[i], 64, "node%d", i), h->slots[i] = k;
    return 0;
}

int pt_place_ranks(const pt_hostlist *h, int world, int *node) {
    int r = 0;
    for (int i = 0; i < h->n && r < world; i++)
        for (int s = 0; s < h->slots[i] && r < world; s++) node[r++] = i;
    if (r < world) {
        pt_set_error("the hosts have %d slots for %d ranks", r, world);
        return -1;
    }
    return 0;
}

void pt_mesh_groups_crossing(const pt_mesh *m, int world, const int *node, int groups[3], int crossing[3]) {
    for (int d = 0; d < 3; d++) {
        groups[d] = crossing[d] = 0;
        const int n = d == PT_DIM_TP ? m->tp : d == PT_DIM_FSDP ? m->fsdp : m->dp;
        for (int r = 0; r < world; r++) {
            int c[3];
            pt_mesh_coords(m, r, c);
            if (c[d] != 0) continue;  // r leads its group
            groups[d]++;
            int cross = 0;
            for (int i = 1; i < n; i++) {
                c[d] = i;
                cross |= node[pt_mesh_rank(m, c)] != node[r];
            }
            crossing[d] += cross;
        }
    }
}
