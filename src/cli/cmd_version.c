// portatrain version / --version: what a bug report needs in one line (the build, the compiler, the backends).
#include "backend/backend.h"
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

// `git describe --always --dirty` of the source tree when CMake configured the build ("unknown" outside git).
#ifndef PT_GIT_DESCRIBE
#define PT_GIT_DESCRIBE "unknown"
#endif

#if defined(__clang__)
#define PT_COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define PT_COMPILER "gcc " __VERSION__
#else
#define PT_COMPILER "unknown compiler"
#endif

int cmd_version(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: portatrain version (or portatrain --version)\n\n"
               "Prints one line: the source version (git describe), the compiler and the backends built in.\n");
        return 0;
    }
    if (argc > 1) return cli_usage_error("version", "takes no arguments (got '%s')", argv[1]);
    printf("portatrain %s, %s, backends: %s\n", PT_GIT_DESCRIBE, PT_COMPILER, pt_backend_list());
    return 0;
}
