# Sourced by the MPI tests (not a test itself: tests/tests.cmake registers only tests/test_*.sh): OpenMPI as
# root (CI containers), more ranks than cores, one OpenMP thread per rank, and OpenMPI kept off the network
# interfaces of CI machines (shared memory + loopback only).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
