// OpenMPI's own start-up on N oversubscribed ranks, without portatrain: MPI_Init, one barrier, one 1-KiB
// gather to rank 0 (the size of a rank's start-up report), MPI_Finalize. scale_bench.py --mpi-baseline
// times it: the floor under portatrain's start-up at that rank count on this machine.
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Barrier(MPI_COMM_WORLD);
    char mine[1024] = {0};
    char *all = rank == 0 ? malloc((size_t)size * sizeof mine) : NULL;
    MPI_Gather(mine, sizeof mine, MPI_CHAR, all, sizeof mine, MPI_CHAR, 0, MPI_COMM_WORLD);
    const double t = MPI_Wtime();
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("%d ranks: last barrier %.3f s\n", size, MPI_Wtime() - t);
    free(all);
    MPI_Finalize();
    return 0;
}
