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

pt_backend *pt_backend_create(const char *spec) {
    if (!spec || !strcmp(spec, "cpu-ref")) return pt_backend_cpu_ref_create();
#ifdef PT_HAVE_CPU_BACKEND
    if (!strcmp(spec, "cpu")) return pt_backend_cpu_create();
#endif
    pt_set_error("unknown backend '%s' (available: %s)", spec, pt_backend_list());
    return NULL;
}

void pt_backend_destroy(pt_backend *be) {
    if (be) be->destroy(be);
}

const char *pt_backend_list(void) {
#ifdef PT_HAVE_CPU_BACKEND
    return "cpu-ref,cpu";
#else
    return "cpu-ref";
#endif
}

const char *pt_backend_blas_config(void) {
#ifdef PT_HAVE_CPU_BACKEND
    return openblas_get_config();
#else
    return NULL;
#endif
}
