"""maxrss.py OUT COMMAND...: runs COMMAND and writes its peak RSS (KiB, the children's ru_maxrss) to
OUT.<rank> (OMPI_COMM_WORLD_RANK, else 0); exits with its status."""
import os, resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
with open("%s.%s" % (sys.argv[1], os.environ.get("OMPI_COMM_WORLD_RANK", "0")), "w") as f:
    f.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(rc)
