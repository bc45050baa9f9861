// What the report's section files share (report.c owns the page, its tables and charts; report_sections.c the
// scorecard, the reproduction block, the convergence evidence and the cost).
#pragma once
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>

typedef struct { FILE *h, *m; } out_t;  // report.html and report.md, written side by side

void rpt_esc(FILE *f, const char *s);   // HTML text
void rpt_mesc(FILE *f, const char *s);  // Markdown text
const cJSON *rpt_get(const cJSON *o, const char *k);
int rpt_num(const cJSON *o, const char *k, double *v);  // 1 with a finite number, else 0
const char *rpt_fmt(const cJSON *o, const char *k, char *buf, size_t n);  // display text, "n/a" when missing
// A table of fields (rows: keys; columns: objects) and a table of an array of objects, each under a heading.
void rpt_kv_table(out_t *o, const char *title, const char **keys, int nk, const cJSON **cols, const char **names,
                  int nc);
void rpt_arr_table(out_t *o, const char *title, const cJSON *arr, const char **keys, int nk);

// report_sections.c
void rpt_scorecard(out_t *o, const cJSON *r);
void rpt_scorecard_notes(out_t *o, const cJSON *r);  // what the scorecard's numbers are
void rpt_reproduction(out_t *o, const cJSON *r);
void rpt_convergence(out_t *o, const cJSON *cv);
void rpt_load_note(out_t *o, const cJSON *r);
void rpt_cost(out_t *o, const cJSON *r);
