#include "harness/report.h"
#include "harness/report_internal.h"
#include "util/common.h"
#include "util/fileio.h"
#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void esc(FILE *f, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc(*s, f);
        }
    }
}
// Markdown text (a cell, a list item, a heading): user text (paths, labels, error messages) must render as
// the text it is: pipes escaped (a cell border), backslashes ("\\|" would read as an escaped backslash and a
// border), link, emphasis, code and heading syntax ("[x](url)", "*", "`", "~", "#"), "_" where it could open
// or close emphasis (not inside a word: run_dir stays as it is), HTML-significant chars; newlines flattened.
static void mesc(FILE *f, const char *s) {
    const char *start = s;
    for (; s && *s; s++) {
        const bool word_before = s > start && isalnum((unsigned char)s[-1]), word_after = isalnum((unsigned char)s[1]);
        if (strchr("|\\[]*`~#", *s)) { fputc('\\', f); fputc(*s, f); }
        else if (*s == '_' && !(word_before && word_after)) fputs("\\_", f);
        else if (*s == '\n' || *s == '\r') fputc(' ', f);
        else if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("\\>", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
}
static const cJSON *get(const cJSON *o, const char *k) {
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}
static int num(const cJSON *o, const char *k, double *v) {
    const cJSON *it = get(o, k);
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble)) return 0;
    *v = it->valuedouble;
    return 1;
}
// Formats a field of o as display text (n/a when missing or non-finite).
static const char *fmt(const cJSON *o, const char *k, char *buf, size_t n) {
    const cJSON *it = get(o, k);
    if (cJSON_IsString(it)) return it->valuestring;
    if (cJSON_IsBool(it)) return cJSON_IsTrue(it) ? "yes" : "no";
    if (cJSON_IsNumber(it) && isfinite(it->valuedouble)) {
        double v = it->valuedouble;
        if (v == floor(v) && fabs(v) < 1e15) snprintf(buf, n, "%.0f", v);
        else snprintf(buf, n, "%.6g", v);
        return buf;
    }
    return "n/a";
}

// The length of s cut to at most max bytes without splitting a UTF-8 sequence
// (a cut label must stay valid UTF-8 in the HTML).
static int utf8_prefix_len(const char *s, int max) {
    int n = (int)strnlen(s, (size_t)max + 1);
    if (n <= max) return n;
    n = max;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;  // s[n] continues a sequence: cut before it
    return n;
}

// The helpers the other report_*.c sections share.
void rpt_esc(FILE *f, const char *s) { esc(f, s); }
void rpt_mesc(FILE *f, const char *s) { mesc(f, s); }
const cJSON *rpt_get(const cJSON *o, const char *k) { return get(o, k); }
int rpt_num(const cJSON *o, const char *k, double *v) { return num(o, k, v); }
const char *rpt_fmt(const cJSON *o, const char *k, char *buf, size_t n) { return fmt(o, k, buf, n); }

// A two-or-more column table of fields: rows are keys, columns are objects.
static void kv_table(out_t *o, const char *title, const char **keys, int nk,
                     const cJSON **cols, const char **names, int nc) {
    char b[64];
    fprintf(o->h, "<h2>"); esc(o->h, title); fprintf(o->h, "</h2>\n");
    fprintf(o->m, "\n## %s\n\n", title);
    int any = 0;
    for (int c = 0; c < nc; c++) any |= cJSON_IsObject(cols[c]);
    if (!any) {
        fprintf(o->h, "<p class=na>not measured</p>\n");
        fprintf(o->m, "not measured\n");
        return;
    }
    fprintf(o->h, "<table><tr><th>field</th>");
    fprintf(o->m, "| field |");
    for (int c = 0; c < nc; c++) {
        fprintf(o->h, "<th>"); esc(o->h, names[c]); fprintf(o->h, "</th>");
        fprintf(o->m, " %s |", names[c]);
    }
    fprintf(o->h, "</tr>\n");
    fprintf(o->m, "\n|---|");
    for (int c = 0; c < nc; c++) fprintf(o->m, "---|");
    fprintf(o->m, "\n");
    for (int k = 0; k < nk; k++) {
        fprintf(o->h, "<tr><td>"); esc(o->h, keys[k]); fprintf(o->h, "</td>");
        fprintf(o->m, "| %s |", keys[k]);
        for (int c = 0; c < nc; c++) {
            const char *s = fmt(cols[c], keys[k], b, sizeof b);
            fprintf(o->h, "<td>"); esc(o->h, s); fprintf(o->h, "</td>");
            fputc(' ', o->m); mesc(o->m, s); fprintf(o->m, " |");
        }
        fprintf(o->h, "</tr>\n");
        fprintf(o->m, "\n");
    }
    fprintf(o->h, "</table>\n");
}

// Array-of-objects table.
static void arr_table(out_t *o, const char *title, const cJSON *arr, const char **keys, int nk) {
    char b[64];
    fprintf(o->h, "<h2>"); esc(o->h, title); fprintf(o->h, "</h2>\n");
    fprintf(o->m, "\n## %s\n\n", title);
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) == 0) {
        fprintf(o->h, "<p class=na>not measured</p>\n");
        fprintf(o->m, "not measured\n");
        return;
    }
    fprintf(o->h, "<table><tr>");
    fprintf(o->m, "|");
    for (int k = 0; k < nk; k++) {
        fprintf(o->h, "<th>%s</th>", keys[k]);
        fprintf(o->m, " %s |", keys[k]);
    }
    fprintf(o->h, "</tr>\n");
    fprintf(o->m, "\n|");
    for (int k = 0; k < nk; k++) fprintf(o->m, "---|");
    fprintf(o->m, "\n");
    const cJSON *r;
    cJSON_ArrayForEach(r, arr) {
        fprintf(o->h, "<tr>");
        fprintf(o->m, "|");
        for (int k = 0; k < nk; k++) {
            const char *s = fmt(r, keys[k], b, sizeof b);
            fprintf(o->h, "<td>"); esc(o->h, s); fprintf(o->h, "</td>");
            fputc(' ', o->m); mesc(o->m, s); fprintf(o->m, " |");
        }
        fprintf(o->h, "</tr>\n");
        fprintf(o->m, "\n");
    }
    fprintf(o->h, "</table>\n");
}

void rpt_kv_table(out_t *o, const char *title, const char **keys, int nk, const cJSON **cols, const char **names,
                  int nc) {
    kv_table(o, title, keys, nk, cols, names, nc);
}
void rpt_arr_table(out_t *o, const char *title, const cJSON *arr, const char **keys, int nk) {
    arr_table(o, title, arr, keys, nk);
}

// ---- generic SVG helpers ----
typedef struct {
    const char *name, *color;
    double *x, *y;
    int n;
    double width;  // stroke width (0: 1.8); a reference curve drawn wide stays visible under a thin one
} series_t;

#define W 1000
#define H 340
#define ML 80
#define MR 20
#define MT 52
#define MB 50

static double nice_step(double range, int ticks) {
    double raw = range / ticks, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * p;
}

// Line chart; band (lo/hi over series 0's x) optional; hline optional (NAN: none).
static void svg_lines(FILE *f, const char *title, const char *xl, const char *yl,
                      series_t *s, int ns, const double *blo, const double *bhi,
                      double hline, int logy) {
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int i = 0; i < ns; i++)
        for (int j = 0; j < s[i].n; j++) {
            double y = s[i].y[j];
            if (logy && y <= 0) continue;
            if (s[i].x[j] < x0) x0 = s[i].x[j];
            if (s[i].x[j] > x1) x1 = s[i].x[j];
            if (y < y0) y0 = y;
            if (y > y1) y1 = y;
            if (blo && i == 0) { if (blo[j] < y0) y0 = blo[j]; if (bhi[j] > y1) y1 = bhi[j]; }
        }
    if (isfinite(hline) && (!logy || hline > 0)) { if (hline < y0) y0 = hline; if (hline > y1) y1 = hline; }
    fprintf(f, "<figure><svg width='%d' height='%d' viewBox='0 0 %d %d' role='img'>\n", W, H, W, H);
    fprintf(f, "<text x='%d' y='18' class='t'>", W / 2); esc(f, title); fprintf(f, "</text>\n");
    if (!(x0 <= x1)) {
        fprintf(f, "<text x='%d' y='%d' class='t'>not measured</text></svg></figure>\n", W / 2, H / 2);
        return;
    }
    if (logy) { y0 = log10(y0); y1 = log10(y1); y0 = floor(y0); y1 = ceil(y1); }
    if (x1 == x0) { x0 -= 1; x1 += 1; }
    if (y1 == y0) { y0 -= logy ? 1 : (fabs(y0) > 0 ? fabs(y0) * 0.1 : 1); y1 += logy ? 1 : (fabs(y1) > 0 ? fabs(y1) * 0.1 : 1); }
    double pw = W - ML - MR, ph = H - MT - MB;
#define PX(v) (ML + ((v) - x0) / (x1 - x0) * pw)
#define PY(v) (MT + ph - (((logy) ? log10(v) : (v)) - y0) / (y1 - y0) * ph)
    fprintf(f, "<rect x='%d' y='%d' width='%.0f' height='%.0f' class='pa'/>\n", ML, MT, pw, ph);
    // y ticks
    if (logy) {
        for (int e = (int)y0; e <= (int)y1; e++) {
            double py = MT + ph - (e - y0) / (y1 - y0) * ph;
            fprintf(f, "<line x1='%d' x2='%.0f' y1='%.1f' y2='%.1f' class='g'/><text x='%d' y='%.1f' class='yt'>1e%d</text>\n", ML, ML + pw, py, py, ML - 6, py + 4, e);
        }
    } else {
        double st = nice_step(y1 - y0, 5);
        for (double v = ceil(y0 / st) * st; v <= y1 + st * 1e-9; v += st) {
            double py = MT + ph - (v - y0) / (y1 - y0) * ph;
            fprintf(f, "<line x1='%d' x2='%.0f' y1='%.1f' y2='%.1f' class='g'/><text x='%d' y='%.1f' class='yt'>%.4g</text>\n", ML, ML + pw, py, py, ML - 6, py + 4, fabs(v) < st * 1e-9 ? 0.0 : v);
        }
    }
    double xs = nice_step(x1 - x0, 8);
    for (double v = ceil(x0 / xs) * xs; v <= x1 + xs * 1e-9; v += xs) {
        double px = PX(v);
        fprintf(f, "<line x1='%.1f' x2='%.1f' y1='%d' y2='%.0f' class='g'/><text x='%.1f' y='%.0f' class='xt'>%.4g</text>\n", px, px, MT, MT + ph, px, MT + ph + 16, v);
    }
    fprintf(f, "<text x='%.0f' y='%d' class='xl'>", ML + pw / 2, H - 8); esc(f, xl); fprintf(f, "</text>\n");
    fprintf(f, "<text transform='translate(16 %.0f) rotate(-90)' class='xl'>", MT + ph / 2); esc(f, yl); fprintf(f, "</text>\n");
    if (blo && ns > 0 && s[0].n > 0) {
        fprintf(f, "<polygon class='band' points='");
        for (int j = 0; j < s[0].n; j++) fprintf(f, "%.1f,%.1f ", PX(s[0].x[j]), PY(bhi[j]));
        for (int j = s[0].n - 1; j >= 0; j--) fprintf(f, "%.1f,%.1f ", PX(s[0].x[j]), PY(blo[j]));
        fprintf(f, "'/>\n");
    }
    if (isfinite(hline) && (!logy || hline > 0))
        fprintf(f, "<line x1='%d' x2='%.0f' y1='%.1f' y2='%.1f' class='tol'/>\n", ML, ML + pw, PY(hline), PY(hline));
    for (int i = 0; i < ns; i++) {
        fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='%.1f' stroke-linejoin='round' points='", s[i].color,
                s[i].width > 0 ? s[i].width : 1.8);
        for (int j = 0; j < s[i].n; j++) {
            if (logy && s[i].y[j] <= 0) continue;
            fprintf(f, "%.1f,%.1f ", PX(s[i].x[j]), PY(s[i].y[j]));
        }
        fprintf(f, "'/>\n");
    }
    // legend: one row between the title and the plot, never over the data
    int lx = ML, ly = MT - 12;
    for (int i = 0; i < ns; i++, lx += 190) {
        if (lx > W - 200 - (blo || isfinite(hline) ? 190 : 0)) {  // no room for more: the tables name them
            fprintf(f, "<text x='%d' y='%d' class='lg'>(+%d more)</text>\n", lx, ly + 1, ns - i);
            lx += 90;
            break;
        }
        fprintf(f, "<rect x='%d' y='%d' width='16' height='%.0f' fill='%s'/><text x='%d' y='%d' class='lg'>", lx, ly - 4,
                s[i].width > 2 ? s[i].width : 3, s[i].color, lx + 22, ly + 1);
        esc(f, s[i].name); fprintf(f, "</text>\n");
    }
    if (blo) { fprintf(f, "<rect x='%d' y='%d' width='16' height='8' class='band'/><text x='%d' y='%d' class='lg'>tolerance band</text>\n", lx, ly - 6, lx + 22, ly + 1); lx += 190; }
    if (isfinite(hline)) fprintf(f, "<line x1='%d' x2='%d' y1='%d' y2='%d' class='tol'/><text x='%d' y='%d' class='lg'>tolerance</text>\n", lx, lx + 16, ly - 2, ly - 2, lx + 22, ly + 1);
    fprintf(f, "</svg></figure>\n");
#undef PX
#undef PY
}

static const char *PAL[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#d62728", "#8c564b", "#e377c2"};
#define NPAL ((int)(sizeof PAL / sizeof PAL[0]))

// Horizontal bar chart: groups of nv values each (labels per group, legend per value index).
// stacked: values of a group are stacked into one bar.
static void svg_bars(FILE *f, const char *title, const char *unit, const char **glabels, int ng,
                     const char **vnames, int nv, const double *v, int stacked) {
    int bh = stacked ? 22 : 14, gap = 10;
    int gh = stacked ? bh : bh * nv;
    int h = MT + 20 + ng * (gh + gap) + 40 + 18 * ((nv + 3) / 4);
    int ml = 170;
    fprintf(f, "<figure><svg width='%d' height='%d' viewBox='0 0 %d %d' role='img'>\n", W, h, W, h);
    fprintf(f, "<text x='%d' y='18' class='t'>", W / 2); esc(f, title); fprintf(f, "</text>\n");
    double mx = 0;
    for (int g = 0; g < ng; g++) {
        double sum = 0;
        for (int k = 0; k < nv; k++) {
            double x = v[g * nv + k];
            if (!isfinite(x) || x < 0) continue;
            if (stacked) sum += x; else if (x > mx) mx = x;
        }
        if (stacked && sum > mx) mx = sum;
    }
    if (ng == 0 || !(mx > 0)) {
        fprintf(f, "<text x='%d' y='%d' class='t'>not measured</text></svg></figure>\n", W / 2, h / 2);
        return;
    }
    double pw = W - ml - MR - 60;
    double st = nice_step(mx, 5), top = ceil(mx / st) * st;
    int y = MT + 10, axis_y = MT + 10 + ng * (gh + gap);
    for (double t = 0; t <= top + st * 1e-9; t += st) {
        double px = ml + t / top * pw;
        fprintf(f, "<line x1='%.1f' x2='%.1f' y1='%d' y2='%d' class='g'/><text x='%.1f' y='%d' class='xt'>%.4g</text>\n", px, px, MT + 5, axis_y, px, axis_y + 16, t);
    }
    fprintf(f, "<text x='%.0f' y='%d' class='xl'>", ml + pw / 2, axis_y + 34); esc(f, unit); fprintf(f, "</text>\n");
    for (int g = 0; g < ng; g++, y += gh + gap) {
        fprintf(f, "<text x='%d' y='%d' class='yt'>", ml - 8, y + gh / 2 + 4); esc(f, glabels[g]); fprintf(f, "</text>\n");
        double acc = 0;
        for (int k = 0; k < nv; k++) {
            double x = v[g * nv + k];
            if (!isfinite(x) || x < 0) continue;
            double bx = ml + (stacked ? acc : 0) / top * pw, bw = x / top * pw;
            int by = stacked ? y : y + k * bh;
            fprintf(f, "<rect x='%.1f' y='%d' width='%.1f' height='%d' fill='%s'><title>", bx, by, bw, bh - 2, PAL[k % NPAL]);
            esc(f, vnames[k]); fprintf(f, ": %.4g</title></rect>\n", x);
            if (!stacked) fprintf(f, "<text x='%.1f' y='%d' class='lg'>%.3g</text>\n", bx + bw + 4, by + bh - 4, x);
            acc += x;
        }
        if (stacked) fprintf(f, "<text x='%.1f' y='%d' class='lg'>%.3g</text>\n", ml + acc / top * pw + 4, y + bh - 6, acc);
    }
    int ly = axis_y + 52;
    for (int k = 0; k < nv; k++) {
        int lx = ml + (k % 4) * 130;
        if (k && k % 4 == 0) ly += 18;
        fprintf(f, "<rect x='%d' y='%d' width='12' height='12' fill='%s'/><text x='%d' y='%d' class='lg'>", lx, ly - 10, PAL[k % NPAL], lx + 16, ly);
        esc(f, vnames[k]); fprintf(f, "</text>\n");
    }
    fprintf(f, "</svg></figure>\n");
}

// ---- curves ----
#define MAXPTS 2000
// Extracts (step, key) pairs, downsampled to at most MAXPTS points.
static int curve(const cJSON *arr, const char *xk, const char *yk, double **x, double **y) {
    *x = *y = NULL;
    int n = cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : 0, m = 0;
    if (n == 0) return 0;
    int stride = n > MAXPTS ? (n + MAXPTS - 1) / MAXPTS : 1;
    *x = malloc(sizeof(double) * (size_t)(n / stride + 2));
    *y = malloc(sizeof(double) * (size_t)(n / stride + 2));
    if (!*x || !*y) { free(*x); free(*y); *x = *y = NULL; return 0; }
    int i = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, arr) {
        double a, b;
        if ((i % stride == 0 || i == n - 1) && num(r, xk, &a) && num(r, yk, &b)) { (*x)[m] = a; (*y)[m] = b; m++; }
        i++;
    }
    return m;
}

static void md_curve(FILE *m, const char *title, series_t *s, int ns) {
    fprintf(m, "\n### %s (sampled)\n\n", title);
    int n = 0;
    for (int i = 0; i < ns; i++) if (s[i].n > n) n = s[i].n;
    if (n == 0) { fprintf(m, "not measured\n"); return; }
    fprintf(m, "| series | step | value |\n|---|---|---|\n");
    for (int i = 0; i < ns; i++) {
        if (s[i].n == 0) continue;
        int k = s[i].n < 10 ? s[i].n : 10;
        for (int j = 0; j < k; j++) {
            int idx = k == 1 ? 0 : (int)((long)j * (s[i].n - 1) / (k - 1));
            fprintf(m, "| "); mesc(m, s[i].name);
            fprintf(m, " | %.0f | %.6g |\n", s[i].x[idx], s[i].y[idx]);
        }
    }
}

// Title, style, creation time and the verdict banner with its reasons.
static void render_head(out_t *o, const cJSON *r) {
    FILE *h = o->h, *m = o->m;
    char b[64];
    const cJSON *t = get(r, "title");
    const char *title = cJSON_IsString(t) ? t->valuestring : "portatrain acceptance report";
    fprintf(h, "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>"); esc(h, title);
    fprintf(h, "</title>\n<style>\n"
               "body{font-family:sans-serif;margin:24px auto;max-width:1100px;padding:0 16px;color:#222;background:#fff}\n"
               "figure{margin:10px 0;width:100%%}figure svg{width:100%%;height:auto}\n"
               ".top{display:flex;gap:18px;align-items:flex-start}.top>table{flex:3}.top>.banner{flex:2}\n"
               ".sc td:nth-child(n+2){text-align:right;font-variant-numeric:tabular-nums}.note{font-size:12px;color:#555}\n"
               "pre{background:#f6f8fa;padding:8px;white-space:pre-wrap;word-break:break-all;font-size:12px}\n"
               "h1{font-size:22px}h2{font-size:17px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}\n"
               ".banner{padding:14px 18px;border-radius:6px;color:#fff;font-size:20px;font-weight:bold}\n"
               ".ok{background:#1e8e3e}.bad{background:#c5221f}.unk{background:#777}\n"
               ".banner ul{font-size:14px;font-weight:normal;margin:8px 0 0}\n"
               "table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}\n"
               "th{background:#f1f3f4}.na{color:#888;font-style:italic}figure{margin:10px 0}\n"
               "svg text{font-family:sans-serif;fill:#222}.t{font-size:14px;font-weight:bold;text-anchor:middle}\n"
               ".xt{font-size:11px;text-anchor:middle}.yt{font-size:11px;text-anchor:end}.xl{font-size:12px;text-anchor:middle}\n"
               ".lg{font-size:11px}.g{stroke:#e6e6e6}.pa{fill:none;stroke:#999}.band{fill:#1f77b4;fill-opacity:.18;stroke:none}\n"
               ".tol{stroke:#d62728;stroke-dasharray:5 3;stroke-width:1.3}\n"
               "</style></head><body>\n<h1>");
    esc(h, title); fprintf(h, "</h1>\n");
    fprintf(m, "# "); mesc(m, title); fprintf(m, "\n\n");
    const char *cu = fmt(r, "created_utc", b, sizeof b);
    fprintf(h, "<p>created: "); esc(h, cu); fprintf(h, "</p>\n");
    fprintf(m, "created: "); mesc(m, cu); fprintf(m, "\n\n");
}

// The verdict banner with every reason.
static void render_verdict(out_t *o, const cJSON *r) {
    FILE *h = o->h, *m = o->m;
    const cJSON *v = get(r, "verdict");
    const char *verdict = cJSON_IsString(v) ? v->valuestring : "not measured";
    int acc = strcmp(verdict, "ACCEPTED") == 0, rej = strcmp(verdict, "REJECTED") == 0;
    fprintf(h, "<div class='banner %s'>", acc ? "ok" : rej ? "bad" : "unk"); esc(h, verdict);
    fprintf(m, "**Verdict: "); mesc(m, verdict); fprintf(m, "**\n\n");
    const cJSON *rs = get(r, "reasons"), *it;
    if (cJSON_IsArray(rs) && cJSON_GetArraySize(rs) > 0) {
        fprintf(h, "<ul>");
        cJSON_ArrayForEach(it, rs) if (cJSON_IsString(it)) {
            fprintf(h, "<li>"); esc(h, it->valuestring); fprintf(h, "</li>");
            fprintf(m, "- "); mesc(m, it->valuestring); fprintf(m, "\n");
        }
        fprintf(h, "</ul>");
    }
    fprintf(h, "</div>\n");
    fprintf(m, "\n");
}

// Run identity, run-time kernel compilation, frozen inputs.
static void render_identity(out_t *o, const cJSON *r) {
    const char *idk[] = {"spec", "run_dir", "backend", "device", "precision", "layout", "steps"};
    const cJSON *cols[] = {get(r, "baseline"), get(r, "candidate")};
    const char *names[] = {"baseline", "candidate"};
    kv_table(o, "Run identity", idk, 7, cols, names, 2);
    const char *cpk[] = {"compile_s", "cache_hits", "cache_misses", "recompilations"};
    const cJSON *cpc[] = {get(cols[0], "compile"), get(cols[1], "compile")};
    kv_table(o, "Kernel compilation (run time)", cpk, 4, cpc, names, 2);
    const char *fk[] = {"config_sha256", "initial_weights_sha256", "tokenizer_sha256", "dataset_sha256",
                        "eval_dataset_sha256", "seed"};
    const cJSON *fc[] = {get(r, "frozen_inputs")};
    const char *fn[] = {"value"};
    kv_table(o, "Frozen inputs", fk, 6, fc, fn, 1);
}

// Loss (with the tolerance band), per-step relative difference and throughput curves.
static void render_curves(out_t *o, const cJSON *r, const cJSON *cv) {
    FILE *h = o->h, *m = o->m;
    fprintf(h, "<h2>Curves</h2>\n");
    fprintf(m, "\n## Curves\n");
    const cJSON *cur = get(r, "curves");
    // the baseline wide underneath, the candidate thin and translucent over it: both stay visible
    series_t ls[2] = {{"baseline", PAL[0], 0, 0, 0, 4.5}, {"candidate", "#ff7f0ecc", 0, 0, 0, 1.6}};
    ls[0].n = curve(get(cur, "baseline"), "step", "loss", &ls[0].x, &ls[0].y);
    ls[1].n = curve(get(cur, "candidate"), "step", "loss", &ls[1].x, &ls[1].y);
    double tol;
    double *lo = NULL, *hi = NULL;
    if (num(cv, "tolerance_rel", &tol) && ls[0].n > 0) {
        lo = malloc(sizeof(double) * (size_t)ls[0].n);
        hi = malloc(sizeof(double) * (size_t)ls[0].n);
        if (lo && hi)
            for (int j = 0; j < ls[0].n; j++) { lo[j] = ls[0].y[j] * (1 - tol); hi[j] = ls[0].y[j] * (1 + tol); }
        else { free(lo); free(hi); lo = hi = NULL; }
    } else tol = NAN;
    svg_lines(h, "Training loss: baseline vs candidate", "optimizer step", "loss (cross-entropy, nats per token)", ls, 2,
              lo, hi, NAN, 0);
    md_curve(m, "Loss", ls, 2);
    free(lo); free(hi);

    series_t ds = {"relative difference", PAL[2], 0, 0, 0, 0};
    ds.n = curve(get(get(cv, "per_step"), "rel_diff"), "step", "rel", &ds.x, &ds.y);
    double ymn = INFINITY, ymx = 0;
    for (int j = 0; j < ds.n; j++) if (ds.y[j] > 0) { if (ds.y[j] < ymn) ymn = ds.y[j]; if (ds.y[j] > ymx) ymx = ds.y[j]; }
    if (isfinite(tol) && tol > ymx) ymx = tol;
    int logy = ymx > 0 && isfinite(ymn) && ymx / ymn >= 100;
    svg_lines(h, logy ? "Per-step relative loss difference (log scale; zeros omitted)" : "Per-step relative loss difference",
              "optimizer step", "|candidate - baseline| / |baseline| (loss)", &ds, 1, NULL, NULL, tol, logy);
    md_curve(m, "Per-step relative difference", &ds, 1);

    series_t ts[2] = {{"baseline", PAL[0], 0, 0, 0, 4.5}, {"candidate", "#ff7f0ecc", 0, 0, 0, 1.6}};
    ts[0].n = curve(get(cur, "baseline"), "step", "tokens_per_s", &ts[0].x, &ts[0].y);
    ts[1].n = curve(get(cur, "candidate"), "step", "tokens_per_s", &ts[1].x, &ts[1].y);
    svg_lines(h, "Throughput per step", "optimizer step", "throughput (tokens/s)", ts, 2, NULL, NULL, NAN, 0);
    rpt_load_note(o, r);
    md_curve(m, "Throughput (tokens/s)", ts, 2);
    for (int i = 0; i < 2; i++) { free(ls[i].x); free(ls[i].y); free(ts[i].x); free(ts[i].y); }
    free(ds.x); free(ds.y);
    const char *names[] = {"baseline", "candidate"};
    const cJSON *tp = get(r, "throughput");
    const char *tk[] = {"median_tokens_per_s", "median_step_time_s"};
    const cJSON *tc[] = {get(tp, "baseline"), get(tp, "candidate")};
    kv_table(o, "Throughput", tk, 2, tc, names, 2);
}

// --seeds K: every seed's trailing-mean loss (what the envelope judges) over the baseline seeds' envelope, the
// baseline seeds drawn before the candidate's (translucent) so both stay visible, then the tests' numbers.
static void render_seeds(out_t *o, const cJSON *r) {
    const cJSON *sd = get(r, "seeds"), *env = get(sd, "envelope"), *stt = get(sd, "steps_to_target");
    if (!cJSON_IsObject(sd)) return;
    const cJSON *sides[2] = {get(sd, "baseline"), get(sd, "candidate")}, *it;
    const int ns = 1 + cJSON_GetArraySize(sides[0]) + cJSON_GetArraySize(sides[1]);
    series_t *s = calloc((size_t)ns, sizeof *s);
    char(*nm)[48] = calloc((size_t)ns, sizeof *nm);
    if (!s || !nm) { free(s); free(nm); return; }
    s[0] = (series_t){"baseline seeds' mean", "#08306b", 0, 0, 0, 0};
    s[0].n = curve(get(env, "bounds"), "step", "mean", &s[0].x, &s[0].y);
    double *lx = NULL, *hx = NULL, *lo = NULL, *hi = NULL;
    const int nlo = curve(get(env, "bounds"), "step", "lo", &lx, &lo), nhi = curve(get(env, "bounds"), "step", "hi", &hx, &hi);
    const bool band = s[0].n > 0 && nlo == s[0].n && nhi == s[0].n;
    int k = 1;
    for (int side = 0; side < 2; side++) cJSON_ArrayForEach(it, sides[side]) {
        double seed = NAN;
        num(it, "train_seed", &seed);
        snprintf(nm[k], sizeof nm[k], "%s --seed %.0f", side ? "candidate" : "baseline", seed);
        s[k] = (series_t){nm[k], side ? "#ff7f0eb3" : "#6baed6", 0, 0, 0, 0};
        s[k].n = curve(get(it, "curve"), "step", "trailing_loss", &s[k].x, &s[k].y);
        k++;
    }
    fprintf(o->h, "<h2>Seeds</h2>\n");
    fprintf(o->m, "\n## Seeds\n");
    svg_lines(o->h, "Trailing-mean loss of every seed, in the baseline seeds' envelope", "step", "loss", s, k,
              band ? lo : NULL, band ? hi : NULL, NAN, 0);
    md_curve(o->m, "Trailing-mean loss of every seed", s, k);
    for (int i = 0; i < k; i++) { free(s[i].x); free(s[i].y); }
    free(s); free(nm); free(lx); free(hx); free(lo); free(hi);
    const char *fn[] = {"value"};
    const char *sk[] = {"k", "verdict", "derivation"};
    kv_table(o, "Seeds", sk, 3, &sd, fn, 1);
    const char *tk[] = {"target_loss", "target_source", "window", "alpha", "verdict"};
    kv_table(o, "Steps to target", tk, 5, &stt, fn, 1);
    const char *wk[] = {"mean_steps_baseline", "mean_steps_candidate", "var_baseline", "var_candidate", "t", "df", "p_value"};
    const cJSON *wt = get(stt, "welch_t_test");
    kv_table(o, "One-sided Welch t-test (H1: the candidate needs more steps)", wk, 7, &wt, fn, 1);
    const char *rk[] = {"run", "steps_to_target", "final_window_loss"};
    arr_table(o, "Baseline seeds: steps to target", get(stt, "baseline"), rk, 3);
    arr_table(o, "Candidate seeds: steps to target", get(stt, "candidate"), rk, 3);
    const char *ek[] = {"window", "level", "t_quantile", "std_multiple", "max_outside_fraction", "justification"};
    kv_table(o, "Per-step envelope of the baseline seeds", ek, 6, &env, fn, 1);
    const char *ck[] = {"seed_index", "judged_steps", "outside_steps", "first_outside_step", "ok"};
    arr_table(o, "Candidate seeds in the envelope", get(env, "candidates"), ck, 5);
}

// Wall time per phase: groups = runs in order of appearance, values = phases (stacked).
static void render_phases(out_t *o, const cJSON *r) {
    FILE *h = o->h;
    const cJSON *it;
    // every phase accept writes (compilation: OpenCL's run-time builds), so a bar is the run's whole time
    enum { MAX_RUNS = 8, NPH = 7 };
    const char *phn[NPH] = {"start-up", "compilation", "training", "checkpoint", "portability", "recovery", "eval"};
    const char *runs[MAX_RUNS];
    int nruns = 0;
    double pv[MAX_RUNS * NPH];
    for (int i = 0; i < MAX_RUNS * NPH; i++) pv[i] = NAN;
    const cJSON *ph = get(r, "phases");
    if (cJSON_IsArray(ph)) cJSON_ArrayForEach(it, ph) {
        const cJSON *rn = get(it, "run"), *pn = get(it, "phase");
        double sec;
        if (!cJSON_IsString(rn) || !cJSON_IsString(pn) || !num(it, "seconds", &sec)) continue;
        int a = 0;
        while (a < nruns && strcmp(runs[a], rn->valuestring)) a++;
        if (a == nruns) {
            if (nruns == MAX_RUNS) continue;
            runs[nruns++] = rn->valuestring;
        }
        for (int c = 0; c < NPH; c++)
            if (!strcmp(pn->valuestring, phn[c]))
                pv[a * NPH + c] = isfinite(pv[a * NPH + c]) ? pv[a * NPH + c] + sec : sec;
    }
    svg_bars(h, "Wall time per phase", "seconds", runs, nruns, phn, NPH, pv, 1);
    const char *phk[] = {"run", "phase", "seconds"};
    arr_table(o, "Phases", ph, phk, 3);
}

static void render_portability(out_t *o, const cJSON *r) {
    FILE *h = o->h;
    const cJSON *po = get(r, "portability");
    int np = cJSON_IsArray(po) ? cJSON_GetArraySize(po) : 0;
    if (np > 64) np = 64;
    const char *pl[64];
    char lbl[64][96];
    double sv[128];
    const char *svn[] = {"save", "restore"};
    for (int i = 0; i < np; i++) {
        const cJSON *e = cJSON_GetArrayItem(po, i);
        char b1[64], b2[64];
        const char *w = fmt(e, "writer", b1, 64), *rd = fmt(e, "reader", b2, 64);
        snprintf(lbl[i], sizeof lbl[i], "%.*s -> %.*s", utf8_prefix_len(w, 40), w, utf8_prefix_len(rd, 40), rd);
        pl[i] = lbl[i];
        if (!num(e, "save_time_s", &sv[2 * i])) sv[2 * i] = NAN;
        if (!num(e, "restore_time_s", &sv[2 * i + 1])) sv[2 * i + 1] = NAN;
    }
    fprintf(h, "<h2>Checkpoint portability</h2>\n");
    svg_bars(h, "Checkpoint save / restore time", "seconds", pl, np, svn, 2, sv, 0);
    const char *pok[] = {"writer", "reader", "checkpoint_step", "ok", "max_rel_diff", "tolerance", "save_time_s", "restore_time_s", "bytes", "detail"};
    arr_table(o, "Portability", po, pok, 10);
}

static void render_recovery(out_t *o, const cJSON *r) {
    FILE *h = o->h;
    const char *fn[] = {"value"};
    const cJSON *rc = get(r, "recovery");
    const char *rsn[] = {"detect", "teardown", "restart", "restore", "replay"};
    const char *rkk[] = {"detect_s", "teardown_s", "restart_s", "restore_s", "replay_s"};
    double rv[5];
    for (int i = 0; i < 5; i++) if (!num(rc, rkk[i], &rv[i])) rv[i] = NAN;
    const char *rg[] = {"recovery"};
    fprintf(h, "<h2>Recovery</h2>\n");
    svg_bars(h, "Recovery timeline", "seconds", rg, cJSON_IsObject(rc) ? 1 : 0, rsn, 5, rv, 1);
    const char *rk[] = {"platform", "fault", "fault_step", "detect_s", "teardown_s", "restart_s", "restore_s", "replay_s", "total_s", "restored_step", "steps_recomputed", "goodput", "final_compare", "ok", "injection"};
    const cJSON *rcc[] = {rc};
    kv_table(o, "Recovery metrics", rk, 15, rcc, fn, 1);
    const char *dk[] = {"mode", "deterministic", "rule", "why", "loss_rel_max", "grad_norm_rel_max", "final_weights_rel_l2", "tolerance_loss_rel", "tolerance_grad_norm_rel", "tolerance_final_weights_rel_l2"};
    const cJSON *dc[] = {get(rc, "determinism")};
    kv_table(o, "Determinism (the recovery's rule)", dk, 10, dc, fn, 1);
}

// accept's step-1 audit (accept_audit.c): its status, then the forward statistics and the per-tensor table;
// for an MoE model, the expert load of each sparse layer on both platforms.
static void render_audit(out_t *o, const cJSON *r) {
    const cJSON *au = get(r, "audit");
    const char *sk[] = {"status", "reason", "schedule", "verdict", "first_forward", "first_gradient", "first_update"};
    const char *fn[] = {"value"};
    const cJSON *cols[] = {au};
    kv_table(o, "Step-1 audit", sk, 7, cols, fn, 1);
    if (!cJSON_IsObject(au) || !get(au, "tensors")) return;
    const char *fk[] = {"name", "rms_baseline", "rel_diff", "tolerance", "ok"};
    arr_table(o, "Step-1 audit: forward statistics (forward order)", get(au, "forward"), fk, 5);
    const char *tk[] = {"name", "grad_l2", "grad_diff", "grad_metric", "grad_tolerance", "update_l2_diff",
                        "update_proj_diff", "ok"};
    arr_table(o, "Step-1 audit: per tensor (forward order)", get(au, "tensors"), tk, 8);
    if (!get(au, "expert_load")) return;  // a dense model
    const char *lk[] = {"layer", "baseline", "candidate", "moved_fraction", "ok"};
    arr_table(o, "Step-1 audit: expert load (tokens per expert, per MoE layer)", get(au, "expert_load"), lk, 5);
}

// accept of evidence directories (accept_evidence_judge.c): the recipe, the referee, the sections not shown.
static void render_evidence(out_t *o, const cJSON *r) {
    const cJSON *ev = get(r, "evidence");
    if (!cJSON_IsObject(ev)) return;
    const char *rk[] = {"field", "baseline", "candidate", "match"};
    arr_table(o, "Recipe (from each platform's configuration)", get(get(ev, "recipe"), "fields"), rk, 4);
    const char *fk[] = {"step", "eval_baseline", "eval_candidate", "rel_diff", "tolerance", "claim_baseline",
                        "claim_baseline_rel_diff", "claim_candidate", "claim_candidate_rel_diff", "ok"};
    arr_table(o, "Referee (portatrain eval of both platforms' checkpoints)", get(ev, "referee"), fk, 10);
    const char *nk[] = {"section", "why", "waived"};
    arr_table(o, "Sections not shown", get(ev, "not_shown"), nk, 3);
}

static void render(out_t *o, const cJSON *r) {
    const cJSON *cv = get(r, "convergence");
    render_head(o, r);
    fprintf(o->h, "<div class='top'>");
    rpt_scorecard(o, r);
    render_verdict(o, r);
    fprintf(o->h, "</div>\n");
    rpt_scorecard_notes(o, r);
    rpt_reproduction(o, r);
    render_identity(o, r);
    render_evidence(o, r);
    rpt_convergence(o, cv);
    render_curves(o, r, cv);
    render_seeds(o, r);
    render_phases(o, r);
    render_portability(o, r);
    render_recovery(o, r);
    render_audit(o, r);
    rpt_cost(o, r);
    fprintf(o->h, "</body></html>\n");
}

int pt_report_check(const cJSON *report, const char *path) {
    if (!cJSON_IsObject(report)) {
        pt_set_error("%s: not a JSON object (a report.json written by portatrain accept)", path);
        return -1;
    }
    const cJSON *v = get(report, "version");
    if (!v) { pt_set_error("%s: no \"version\" field (not a report.json written by portatrain accept)", path); return -1; }
    if (!cJSON_IsNumber(v) || v->valuedouble != 1) {
        pt_set_error("%s: \"version\": only version 1 is known", path);
        return -1;
    }
    if (!cJSON_IsString(get(report, "verdict"))) {
        pt_set_error("%s: \"verdict\": missing or not a string", path);
        return -1;
    }
    if (!cJSON_IsArray(get(report, "reasons"))) {
        pt_set_error("%s: \"reasons\": missing or not an array", path);
        return -1;
    }
    return 0;
}

int pt_report_render(const cJSON *report, const char *out_dir) {
    if (pt_mkdir_p(out_dir) != 0) return -1;
    char *hp = pt_path_join(out_dir, "report.html"), *mp = pt_path_join(out_dir, "report.md");
    int rc = -1;
    out_t o = {NULL, NULL};
    if (!hp || !mp) { pt_set_error("report: out of memory"); goto done; }
    o.h = fopen(hp, "w");
    if (!o.h) { pt_set_error("%s: cannot open for writing", hp); goto done; }
    o.m = fopen(mp, "w");
    if (!o.m) { pt_set_error("%s: cannot open for writing", mp); goto done; }
    render(&o, report);
    rc = 0;
done:
    if (o.h && fclose(o.h) != 0 && rc == 0) { pt_set_error("%s: write failed", hp); rc = -1; }
    if (o.m && fclose(o.m) != 0 && rc == 0) { pt_set_error("%s: write failed", mp); rc = -1; }
    free(hp); free(mp);
    return rc;
}
