// portatrain devices: every backend of this build and the devices it finds.
#include "backend/backend.h"
#include "cli/cli.h"
#include "dist/devcomm.h"

#include <stdio.h>
#include <string.h>

static void help(void) {
    printf("usage: portatrain devices\n\n"
           "Lists every backend compiled into this binary and each device it finds, one per line, as the\n"
           "--backend value that selects it: cpu-ref, cpu, and opencl:PLATFORM:DEVICE for each OpenCL\n"
           "platform and device (\"no OpenCL platform\" when the OpenCL loader finds none), cuda:N for each\n"
           "CUDA device (\"no CUDA device: ...\" without a GPU or driver), and cuda-sim, the cuda kernels on\n"
           "the host CUDA emulator.\n");
}

int cmd_devices(int argc, char **argv) {
    pt_argparse p;
    argp_init(&p, argc, argv);
    const char *o;
    while ((o = argp_next(&p))) {
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) { help(); return 0; }
        else return argp_unknown(&p, o);
    }
    pt_backend_print_devices(stdout);
    // last: whether cuda ranks under mpirun exchange data with NCCL (its version) or through the host
    printf("nccl         %s\n", pt_devcomm_describe());
    return 0;
}
