// Where a job's ranks run: the hosts of an MPI hostfile (or K ranks per node), the node of each rank as
// mpirun --map-by slot places them, and which groups of a mesh dimension cross nodes. `portatrain topo`
// reads these to name each collective's link class.
#pragma once
#include "dist/mesh.h"

#define PT_MAX_HOSTS 4096
typedef struct {
    int n;
    char name[PT_MAX_HOSTS][64];
    int slots[PT_MAX_HOSTS];
} pt_hostlist;

// An MPI hostfile as OpenMPI 4 reads it. 0, or -1 with an error naming the file and line.
int pt_hostfile_read(const char *path, pt_hostlist *h);
// node0, node1, ...: `world` ranks, ranks_per_node on each (0: all on one node). -1 + error if too many.
int pt_hosts_uniform(int world, int ranks_per_node, pt_hostlist *h);
// node[r] of each rank: the hosts' slots filled in order. -1 + error when they have fewer slots than ranks.
int pt_place_ranks(const pt_hostlist *h, int world, int *node);
// Per mesh dimension (PT_DIM_*): how many groups it has and how many of them span more than one node.
void pt_mesh_groups_crossing(const pt_mesh *m, int world, const int *node, int groups[3], int crossing[3]);
