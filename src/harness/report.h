// Acceptance report renderer: report.json -> report.html (self-contained,
// inline CSS + SVG) and report.md. Every section is optional.
#pragma once
#include <cjson/cJSON.h>
// Returns 0, or -1 with pt_set_error.
int pt_report_render(const cJSON *report, const char *out_dir);
// What `portatrain report` needs before rendering a file (the renderer itself
// takes any object): a JSON object with "version": 1, a "verdict" string and a
// "reasons" array. Returns 0, or -1 with pt_set_error naming path and field.
int pt_report_check(const cJSON *report, const char *path);
