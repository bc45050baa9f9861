#include "backend/backend.h"

#include <string.h>

// The fast CPU backend (src/backend/cpu.c) is left out of the double-precision
// gradcheck build (PT_BACKEND_REF_ONLY) and of builds without OpenBLAS
// (PT_NO_CPU_BACKEND, set by CMakeLists.txt); so are the device backends
// (PT_HAVE_OPENCL, PT_HAVE_CUDA, PT_HAVE_CUDA_SIM: set when CMake found them)
// from the gradcheck build.
#if !defined(PT_BACKEND_REF_ONLY) && !defined(PT_NO_CPU_BACKEND)
#define PT_HAVE_CPU_BACKEND 1
#endif
#if defined(PT_BACKEND_REF_ONLY)
#undef PT_HAVE_OPENCL
#undef PT_HAVE_CUDA
#undef PT_HAVE_CUDA_SIM
#endif

// Entry points of the backend files, each defined only in the builds that
// have that backend. `suffix` is what follows the backend's name in a spec:
// "" or ":..." (device indices).
pt_backend *pt_backend_cpu_create(const char *suffix);        // cpu.c
int pt_cpu_print_devices(FILE *f);
const char *pt_cpu_blas_config(void);
pt_backend *pt_backend_opencl_create(const char *suffix);     // opencl.c
int pt_opencl_probe(const char *suffix);
int pt_opencl_print_devices(FILE *f);
pt_backend *pt_backend_cuda_create(const char *suffix);       // cuda/cuda_backend.cu under nvcc
int pt_cuda_probe(const char *suffix);
int pt_cuda_print_devices(FILE *f);
pt_backend *pt_backend_cuda_sim_create(const char *suffix);   // the same source on the host emulator
int pt_cuda_sim_probe(const char *suffix);
int pt_cuda_sim_print_devices(FILE *f);

static pt_backend *cpu_ref_create(const char *suffix) { return pt_backend_cpu_ref_create(); }
static int cpu_ref_print_devices(FILE *f) {
    fprintf(f, "cpu-ref      host CPU (reference kernels, %s)\n", sizeof(real_t) == 8 ? "fp64" : "fp32");
    return 1;
}

// One backend a build may have; create == NULL: not in this build.
typedef struct {
    const char *name;   // the spec's first word
    bool indexed;       // the spec may go on with ":..." (device indices)
    pt_backend *(*create)(const char *suffix);
    int (*probe)(const char *suffix);   // cheap availability check; NULL: create tells
    int (*print_devices)(FILE *f);      // its `portatrain devices` lines
    const char *(*blas_config)(void);   // its BLAS library's build configuration, or NULL
    const char *not_built;              // why the build has it not (create == NULL)
} backend_entry;

// In `portatrain devices` and pt_backend_list order.
static const backend_entry BACKENDS[] = {
    {.name = "cpu-ref", .create = cpu_ref_create, .print_devices = cpu_ref_print_devices},
#ifdef PT_HAVE_CPU_BACKEND
    {.name = "cpu", .create = pt_backend_cpu_create, .print_devices = pt_cpu_print_devices,
     .blas_config = pt_cpu_blas_config},
#else
    {.name = "cpu", .not_built = "OpenBLAS not found"},
#endif
#ifdef PT_HAVE_OPENCL
    {.name = "opencl", .indexed = true, .create = pt_backend_opencl_create, .probe = pt_opencl_probe,
     .print_devices = pt_opencl_print_devices},
#else
    {.name = "opencl", .not_built = "OpenCL not found at build time"},
#endif
#ifdef PT_HAVE_CUDA
    {.name = "cuda", .indexed = true, .create = pt_backend_cuda_create, .probe = pt_cuda_probe,
     .print_devices = pt_cuda_print_devices},
#else
    {.name = "cuda", .not_built = "no CUDA compiler at build time, or PT_CUDA=OFF"},
#endif
#ifdef PT_HAVE_CUDA_SIM
    {.name = "cuda-sim", .indexed = true, .create = pt_backend_cuda_sim_create, .probe = pt_cuda_sim_probe,
     .print_devices = pt_cuda_sim_print_devices},
#else
    {.name = "cuda-sim", .not_built = "PT_CUDA_SIM=OFF, or no emulator sources"},
#endif
};

// The built backend a spec names ("cuda" names cuda, never cuda-sim), or NULL.
static const backend_entry *find(const char *spec) {
    for (size_t i = 0; i < PT_ARRAY_LEN(BACKENDS); i++) {
        const backend_entry *e = &BACKENDS[i];
        const size_t n = strlen(e->name);
        if (e->create && !strncmp(spec, e->name, n) && (spec[n] == 0 || (e->indexed && spec[n] == ':'))) return e;
    }
    return NULL;
}

pt_backend *pt_backend_create(const char *spec) {
    if (!spec) spec = "cpu-ref";
    const backend_entry *e = find(spec);
    if (e) return e->create(spec + strlen(e->name));
    pt_backend_unknown(spec);
    return NULL;
}

int pt_backend_unknown(const char *spec) {
    const char *known[PT_ARRAY_LEN(BACKENDS)];
    const char *colon = strchr(spec, ':');
    const int n = colon ? (int)(colon - spec) : (int)strlen(spec);
    for (size_t k = 0; k < PT_ARRAY_LEN(BACKENDS); k++) {
        const backend_entry *e = &BACKENDS[k];
        known[k] = e->name;
        if ((int)strlen(e->name) != n || strncmp(spec, e->name, (size_t)n)) continue;
        if (!e->create)
            pt_set_error("backend '%.*s' is not built into this binary (%s; available: %s)", n, spec, e->not_built,
                         pt_backend_list());
        else pt_set_error("unknown backend '%s' (%s takes no device index; available: %s)", spec, e->name,
                          pt_backend_list());
        return -1;
    }
    const char *near = pt_nearest_name(spec, n, known, (int)PT_ARRAY_LEN(BACKENDS), 1 + n / 4);
    pt_set_error("%.*s: unknown backend%s%s%s (known: cpu-ref, cpu, opencl, cuda, cuda-sim)", n, spec,
                 near ? "; did you mean " : "", near ? near : "", near ? "?" : "");
    return -1;
}

int pt_backend_probe(const char *spec) {
    const backend_entry *e = spec ? find(spec) : NULL;
    return e && e->probe ? e->probe(spec + strlen(e->name)) : 0;
}

void pt_backend_destroy(pt_backend *be) {
    if (be) be->ops->destroy(be);
}

const char *pt_backend_list(void) {
    static char list[64];
    if (!list[0])
        for (size_t i = 0; i < PT_ARRAY_LEN(BACKENDS); i++)
            if (BACKENDS[i].create)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? "," : "", BACKENDS[i].name);
    return list;
}

void pt_backend_print_devices(FILE *f) {
    for (size_t i = 0; i < PT_ARRAY_LEN(BACKENDS); i++) {
        const backend_entry *e = &BACKENDS[i];
        if (e->create) e->print_devices(f);
        else fprintf(f, "%-12s not built (%s)\n", e->name, e->not_built);
    }
}

const char *pt_backend_blas_config(void) {
    for (size_t i = 0; i < PT_ARRAY_LEN(BACKENDS); i++)
        if (BACKENDS[i].blas_config) return BACKENDS[i].blas_config();
    return NULL;
}
