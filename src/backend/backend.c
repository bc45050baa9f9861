#include "backend/backend.h"

#include <string.h>

pt_backend *pt_backend_create(const char *spec) {
    if (!spec || !strcmp(spec, "cpu-ref")) return pt_backend_cpu_ref_create();
    pt_set_error("unknown backend '%s' (available: %s)", spec, pt_backend_list());
    return NULL;
}

void pt_backend_destroy(pt_backend *be) {
    if (be) be->destroy(be);
}

const char *pt_backend_list(void) { return "cpu-ref"; }
