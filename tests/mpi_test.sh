# Sourced by the MPI CLI tests after their header (not a test itself): skip without mpirun, a temporary
# directory $T removed on exit, the check helpers (cli_check.sh, fail=0), the MPI environment (mpi_env.sh)
# and MPIRUN, the launcher: at most 120 s per job, more ranks than cores; under the sanitizers with leak
# checks off (OpenMPI's own allocations) and aborting on the first error.
set -uo pipefail
: "${PORTATRAIN:?}" "${PT_SOURCE_DIR:?}"
if ! command -v mpirun >/dev/null; then echo "SKIP: mpirun not found (scripts/deps.sh installs openmpi-bin)"; exit 77; fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
. "$PT_SOURCE_DIR/tests/cli_check.sh"
fail=0
. "$PT_SOURCE_DIR/tests/mpi_env.sh"
MPIRUN=(timeout -k 5 120 mpirun --oversubscribe)
[ -n "${PT_SANITIZED:-}" ] && MPIRUN=(env ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 "${MPIRUN[@]}")
