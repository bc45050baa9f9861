// portatrain report DIR: renders DIR/report.json into report.html + report.md.
#include "cli/cli.h"
#include "harness/report.h"
#include "util/common.h"
#include "util/fileio.h"
#include "util/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf("usage: portatrain report DIR [--output-dir OUT]\n\n"
           "Reads DIR/report.json (written by `portatrain accept`) and writes report.html\n"
           "(self-contained: inline CSS and SVG) and report.md into OUT (default DIR).\n");
}

int cmd_report(int argc, char **argv) {
    pt_argparse p;
    argp_init(&p, argc, argv);
    const char *dir = NULL, *out = NULL, *o;
    while ((o = argp_next(&p))) {
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) { help(); return 0; }
        else if (!strcmp(o, "--output-dir")) out = argp_value(&p);
        else if (strncmp(o, "--", 2) && !dir) dir = o;
        else return argp_unknown(&p, o);
    }
    if (!dir) return cli_usage_error("report", "a report directory is required");
    char *path = pt_path_join(dir, "report.json");
    if (!path) { pt_set_error("out of memory"); return cli_fail(); }
    cJSON *r = pt_json_parse_file(path);
    if (r && pt_report_check(r, path) != 0) {
        cJSON_Delete(r);
        r = NULL;
    }
    free(path);
    if (!r) return cli_fail();
    int rc = pt_report_render(r, out ? out : dir);
    cJSON_Delete(r);
    if (rc) return cli_fail();
    printf("%s/report.html\n%s/report.md\n", out ? out : dir, out ? out : dir);
    return 0;
}
