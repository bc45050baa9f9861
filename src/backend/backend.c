#include "backend/backend.h"

#include <string.h>

// The fast CPU backend (src/backend/cpu.c) is left out of the double-precision
// gradcheck build (PT_BACKEND_REF_ONLY) and of builds without OpenBLAS
// (PT_NO_CPU_BACKEND, set by CMakeLists.txt).
#if !defined(PT_BACKEND_REF_ONLY) && !defined(PT_NO_CPU_BACKEND)
#define PT_HAVE_CPU_BACKEND 1
pt_backend *pt_backend_cpu_create(void);
char *openblas_get_config(void);  // OpenBLAS extension (linked with the cpu backend)
#endif
// The OpenCL backend (src/backend/opencl.c) when CMake found OpenCL (PT_HAVE_OPENCL).
#if defined(PT_BACKEND_REF_ONLY)
#undef PT_HAVE_OPENCL
#endif
#ifdef PT_HAVE_OPENCL
pt_backend *pt_backend_opencl_create(const char *suffix);
int pt_opencl_print_devices(FILE *f);
int pt_opencl_probe(const char *suffix);
#endif
// The CUDA backend (src/backend/cuda/cuda_backend.cu under nvcc, PT_HAVE_CUDA)
// and the same source on the host CUDA emulator (cuda-sim, PT_HAVE_CUDA_SIM).
#if defined(PT_BACKEND_REF_ONLY)
#undef PT_HAVE_CUDA
#undef PT_HAVE_CUDA_SIM
#endif
#ifdef PT_HAVE_CUDA
pt_backend *pt_backend_cuda_create(const char *suffix);
int pt_cuda_print_devices(FILE *f);
int pt_cuda_probe(void);
#endif
#ifdef PT_HAVE_CUDA_SIM
pt_backend *pt_backend_cuda_sim_create(const char *suffix);
int pt_cuda_sim_print_devices(FILE *f);
#endif

pt_backend *pt_backend_create(const char *spec) {
    if (!spec || !strcmp(spec, "cpu-ref")) return pt_backend_cpu_ref_create();
#ifdef PT_HAVE_CPU_BACKEND
    if (!strcmp(spec, "cpu")) return pt_backend_cpu_create();
#endif
#ifdef PT_HAVE_OPENCL
    if (!strncmp(spec, "opencl", 6) && (spec[6] == 0 || spec[6] == ':')) return pt_backend_opencl_create(spec + 6);
#endif
#ifdef PT_HAVE_CUDA_SIM
    if (!strncmp(spec, "cuda-sim", 8) && (spec[8] == 0 || spec[8] == ':')) return pt_backend_cuda_sim_create(spec + 8);
#endif
#ifdef PT_HAVE_CUDA
    if (!strncmp(spec, "cuda", 4) && (spec[4] == 0 || spec[4] == ':')) return pt_backend_cuda_create(spec + 4);
#endif
    pt_backend_unknown(spec);
    return NULL;
}

int pt_backend_unknown(const char *spec) {
    static const char *const known[] = {"cpu-ref", "cpu", "opencl", "cuda", "cuda-sim"};
    const char *colon = strchr(spec, ':');
    const int n = colon ? (int)(colon - spec) : (int)strlen(spec);
    for (size_t k = 0; k < sizeof known / sizeof *known; k++)
        if ((int)strlen(known[k]) == n && !strncmp(spec, known[k], (size_t)n)) {
            pt_set_error("backend '%.*s' is not built into this binary (available: %s)", n, spec, pt_backend_list());
            return -1;
        }
    const char *near = pt_nearest_name(spec, n, known, (int)(sizeof known / sizeof *known), 1 + n / 4);
    pt_set_error("%.*s: unknown backend%s%s%s (known: cpu-ref, cpu, opencl, cuda, cuda-sim)", n, spec,
                 near ? "; did you mean " : "", near ? near : "", near ? "?" : "");
    return -1;
}

int pt_backend_probe(const char *spec) {
#ifdef PT_HAVE_CUDA
    if (spec && !strncmp(spec, "cuda", 4) && (spec[4] == 0 || spec[4] == ':')) return pt_cuda_probe();
#endif
#ifdef PT_HAVE_OPENCL
    if (spec && !strncmp(spec, "opencl", 6) && (spec[6] == 0 || spec[6] == ':')) return pt_opencl_probe(spec + 6);
#endif
    return 0;
}

void pt_backend_destroy(pt_backend *be) {
    if (be) be->destroy(be);
}

const char *pt_backend_list(void) {
    static char list[64];
    if (!list[0]) {
        snprintf(list, sizeof list, "cpu-ref");
#ifdef PT_HAVE_CPU_BACKEND
        strcat(list, ",cpu");
#endif
#ifdef PT_HAVE_OPENCL
        strcat(list, ",opencl");
#endif
#ifdef PT_HAVE_CUDA
        strcat(list, ",cuda");
#endif
#ifdef PT_HAVE_CUDA_SIM
        strcat(list, ",cuda-sim");
#endif
    }
    return list;
}

void pt_backend_print_devices(FILE *f) {
    fprintf(f, "cpu-ref      host CPU (reference kernels, %s)\n", sizeof(real_t) == 8 ? "fp64" : "fp32");
#ifdef PT_HAVE_CPU_BACKEND
    // the backend's own line: SIMD level, OpenBLAS kernels, threads, tile sgemm and bf16 matmul libraries
    pt_backend *cpu = pt_backend_cpu_create();
    fprintf(f, "cpu          %s; %s\n", cpu->device, openblas_get_config());
    pt_backend_destroy(cpu);
#else
    fprintf(f, "cpu          not built (OpenBLAS not found)\n");
#endif
#ifdef PT_HAVE_OPENCL
    pt_opencl_print_devices(f);
#else
    fprintf(f, "opencl       not built (OpenCL not found at build time)\n");
#endif
#ifdef PT_HAVE_CUDA
    pt_cuda_print_devices(f);
#else
    fprintf(f, "cuda         not built (no CUDA compiler at build time, or PT_CUDA=OFF)\n");
#endif
#ifdef PT_HAVE_CUDA_SIM
    pt_cuda_sim_print_devices(f);
#else
    fprintf(f, "cuda-sim     not built (PT_CUDA_SIM=OFF, or no emulator sources)\n");
#endif
}

const char *pt_backend_blas_config(void) {
#ifdef PT_HAVE_CPU_BACKEND
    return openblas_get_config();
#else
    return NULL;
#endif
}
