// The cost section: every phase's seconds priced from the price table (configs/prices.json).
#include "harness/accept_internal.h"

#include "util/fileio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double price;        // per unit-hour
    double units;        // units used (threads, or a fixed count)
    bool threads;        // units are the run's threads (one core each)
    const char *id, *unit, *source, *date, *device;
} price_t;

static int price_for(const cJSON *table, const char *path, const pt_platform *pl, int threads, price_t *out) {
    memset(out, 0, sizeof *out);
    const cJSON *bk = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(table, "backends"), pl->backend);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(bk, "entry");
    if (!cJSON_IsString(id)) {
        pt_set_error("%s: backends.%s.entry: missing (which price entry pays for backend %s?)", path, pl->backend, pl->backend);
        return -1;
    }
    const cJSON *e, *entries = cJSON_GetObjectItemCaseSensitive(table, "entries");
    cJSON_ArrayForEach(e, entries) {
        const cJSON *eid = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (!cJSON_IsString(eid) || strcmp(eid->valuestring, id->valuestring)) continue;
        out->id = eid->valuestring;
        const double pr = jnum(e, "price_per_hour");
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(e, "source"), *dt = cJSON_GetObjectItemCaseSensitive(e, "date");
        const cJSON *un = cJSON_GetObjectItemCaseSensitive(e, "unit"), *dv = cJSON_GetObjectItemCaseSensitive(e, "device");
        if (!isfinite(pr) || pr < 0 || !cJSON_IsString(src) || !cJSON_IsString(dt) || !cJSON_IsString(un)) {
            pt_set_error("%s: entries[id=%s]: needs a non-negative price_per_hour, a unit, a source and a date", path, out->id);
            return -1;
        }
        // No machine costs 1e12 an hour: a larger figure is a unit slip, and would overflow the cost to inf
        // (JSON null), which the report would read as "no accepted outcome".
        if (pr > 1e12) {
            pt_set_error("%s: entries[id=%s]: price_per_hour %g is above 1e12 (a unit error?)", path, out->id, pr);
            return -1;
        }
        out->price = pr;
        out->source = src->valuestring;
        out->date = dt->valuestring;
        out->unit = un->valuestring;
        out->device = cJSON_IsString(dv) ? dv->valuestring : out->id;
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(bk, "units");
        if (cJSON_IsString(u) && !strcmp(u->valuestring, "threads")) out->units = threads, out->threads = true;
        else if (cJSON_IsNumber(u) && u->valuedouble > 0) out->units = u->valuedouble;
        else {
            pt_set_error("%s: backends.%s.units: must be \"threads\" or a positive number", path, pl->backend);
            return -1;
        }
        return 0;
    }
    pt_set_error("%s: backends.%s.entry '%s' names no entry in \"entries\"", path, pl->backend, id->valuestring);
    return -1;
}

// "2 threads x $0.0408/core-hour = $0.0816/h, from TABLE entry ID: SOURCE (DATE)": the one place a side's
// hourly rate is explained (the rows show only the rate).
static cJSON *price_json(const price_t *p, const char *table, const char *currency) {
    cJSON *j = cJSON_CreateObject();
    char how[1024];
    const bool usd = !strcmp(currency, "USD");
    snprintf(how, sizeof how, "%g %s x %s%.4g/%s = %s%.4g/h, from %s entry %s: %s (%s)", p->units,
             p->threads ? (p->units == 1 ? "thread" : "threads") : "x", usd ? "$" : "", p->price, p->unit,
             usd ? "$" : "", p->price * p->units, table, p->id, p->source, p->date);
    cJSON_AddStringToObject(j, "entry", p->id);
    cJSON_AddNumberToObject(j, "units", p->units);
    cJSON_AddStringToObject(j, "unit", p->unit);
    cJSON_AddNumberToObject(j, "price_per_unit_hour", p->price);
    cJSON_AddNumberToObject(j, "per_hour", p->price * p->units);
    cJSON_AddStringToObject(j, "source", p->source);
    cJSON_AddStringToObject(j, "date", p->date);
    cJSON_AddStringToObject(j, "derivation", how);
    return j;
}

// The cost of a recorded baseline's own runs, from the report.json its accept wrote beside it (DIR/..): its
// rows of run "baseline" (its start-up, training, checkpoint and eval). Added to no total: it was paid for
// when it was recorded. NULL when there is no such record.
static cJSON *carried_baseline_cost(const char *run_dir) {
    char *parent = acc_xprintf("%s/../report.json", run_dir);
    cJSON *rec = pt_file_exists(parent) ? pt_json_parse_file(parent) : NULL;
    pt_clear_error();
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(rec, "cost"), "rows"), *r;
    double sum = 0;
    int n = 0;
    cJSON_ArrayForEach(r, rows) {
        const cJSON *run = cJSON_GetObjectItemCaseSensitive(r, "run"), *item = cJSON_GetObjectItemCaseSensitive(r, "item");
        const bool mine = cJSON_IsString(run) ? !strcmp(run->valuestring, "baseline")
                                              : cJSON_IsString(item) && !strncmp(item->valuestring, "baseline ", 9);
        if (mine && isfinite(jnum(r, "cost"))) { sum += jnum(r, "cost"); n++; }
    }
    cJSON *j = NULL;
    if (n) {
        j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "cost", sum);
        cJSON_AddStringToObject(j, "record", parent);
        const cJSON *cu = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(rec, "cost"), "currency");
        cJSON_AddStringToObject(j, "currency", cJSON_IsString(cu) ? cu->valuestring : "USD");
        cJSON_AddStringToObject(j, "note", "the recorded baseline's own runs, carried from its record; not in this "
                                           "experiment's total (paid for when it was recorded)");
    }
    cJSON_Delete(rec);
    free(parent);
    return j;
}

// What each side's phases cost in this experiment, the candidate's own cost per accepted outcome beside it.
static void side_costs(acc_ctx *c, cJSON *cost, const double side[2], bool accepted) {
    cJSON *by = cJSON_AddObjectToObject(cost, "by_side");
    const char *names[] = {"baseline", "candidate"};
    for (int i = 0; i < 2; i++) {
        cJSON *s = cJSON_AddObjectToObject(by, names[i]);
        cJSON_AddNumberToObject(s, "cost", side[i]);
        if (i == 0 && c->o->baseline_run) {
            cJSON *carried = carried_baseline_cost(c->o->baseline_run);
            if (carried) cJSON_AddItemToObject(s, "recorded", carried);
            else cJSON_AddStringToObject(s, "recorded_note", "the recorded baseline's own cost is not known (no "
                                                             "report.json beside its run)");
        }
    }
    cJSON *cand = cJSON_GetObjectItemCaseSensitive(by, "candidate");
    if (accepted) cJSON_AddNumberToObject(cand, "cost_per_accepted_outcome", side[1]);
    else cJSON_AddNullToObject(cand, "cost_per_accepted_outcome");
    cJSON_AddStringToObject(cost, "basis", "every phase this experiment ran, at configs' price per platform; each "
                                           "side's cost is the phases billed to it (shared set-up: the baseline)");
}

// The optional engineering effort per backend ("engineering": {"opencl": {"hours", "rate_per_hour", "source",
// "date", "what"}}): people's time to port, profile and deploy, reported apart from machine cost.
static cJSON *engineering_section(const cJSON *table, const pt_platform *base, const pt_platform *cand) {
    const cJSON *eng = cJSON_GetObjectItemCaseSensitive(table, "engineering");
    if (!cJSON_IsObject(eng)) return NULL;
    cJSON *rows = cJSON_CreateArray();
    const pt_platform *pl[] = {base, cand};
    const char *side[] = {"baseline", "candidate"};
    for (int i = 0; i < 2; i++) {
        if (i == 1 && !strcmp(base->backend, cand->backend)) break;
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(eng, pl[i]->backend);
        if (!cJSON_IsObject(e)) continue;
        cJSON *r = cJSON_Duplicate(e, 1);
        cJSON_AddStringToObject(r, "platform", pl[i]->backend);
        cJSON_AddStringToObject(r, "side", side[i]);
        cJSON_AddNumberToObject(r, "cost", jnum(e, "hours") * jnum(e, "rate_per_hour"));
        cJSON_AddItemToArray(rows, r);
    }
    return rows;
}

cJSON *acc_cost_section(acc_ctx *c, const cJSON *table, const pt_platform *base, const pt_platform *cand,
                           int threads_base, int threads_cand, bool accepted, const char *cpu) {
    const pt_accept_opts *o = c->o;
    price_t pb, pc;
    if (price_for(table, o->price_table, base, threads_base, &pb) != 0) return NULL;
    if (price_for(table, o->price_table, cand, threads_cand, &pc) != 0) return NULL;
    cJSON *cost = cJSON_CreateObject();
    cJSON_AddStringToObject(cost, "price_table", o->price_table);
    const cJSON *cur = cJSON_GetObjectItemCaseSensitive(table, "currency");
    const char *currency = cJSON_IsString(cur) ? cur->valuestring : "USD";
    cJSON_AddStringToObject(cost, "currency", currency);
    cJSON *prices = cJSON_AddObjectToObject(cost, "prices");
    cJSON_AddItemToObject(prices, "baseline", price_json(&pb, o->price_table, currency));
    cJSON_AddItemToObject(prices, "candidate", price_json(&pc, o->price_table, currency));
    cJSON *rows = cJSON_AddArrayToObject(cost, "rows");
    double total = 0, side[2] = {0, 0};
    const cJSON *ph;
    cJSON_ArrayForEach(ph, c->phases) {
        const char *pl = cJSON_GetObjectItemCaseSensitive(ph, "platform")->valuestring;
        const char *billed = cJSON_GetObjectItemCaseSensitive(ph, "billed_to")->valuestring;
        const bool to_cand = !strcmp(billed, "candidate");
        const price_t *p = to_cand ? &pc : &pb;
        const char *run = cJSON_GetObjectItemCaseSensitive(ph, "run")->valuestring;
        const char *phase = cJSON_GetObjectItemCaseSensitive(ph, "phase")->valuestring;
        const double ranks = jnum(ph, "ranks");
        const double hours = jnum(ph, "seconds") / 3600.0, per_hour = p->price * p->units * ranks, cost_i = hours * per_hour;
        cJSON *r = cJSON_CreateObject();
        char item[160], dev[300];
        snprintf(item, sizeof item, "%s %s", run, phase);
        if (!strcmp(p->unit, "core-hour")) snprintf(dev, sizeof dev, "%s (%g cores)", cpu, p->units * ranks);
        else snprintf(dev, sizeof dev, "%s (%g x %s)", p->device, p->units * ranks, p->unit);
        cJSON_AddStringToObject(r, "item", item);
        cJSON_AddStringToObject(r, "run", run);
        cJSON_AddStringToObject(r, "billed_to", billed);
        cJSON_AddStringToObject(r, "platform", pl);
        cJSON_AddStringToObject(r, "device", dev);
        cJSON_AddStringToObject(r, "phase", phase);
        cJSON_AddNumberToObject(r, "ranks", ranks);
        cJSON_AddNumberToObject(r, "hours", hours);
        cJSON_AddNumberToObject(r, "price_per_hour", per_hour);
        cJSON_AddStringToObject(r, "price_entry", p->id);
        cJSON_AddStringToObject(r, "source", p->source);
        cJSON_AddStringToObject(r, "date", p->date);
        cJSON_AddNumberToObject(r, "cost", cost_i);
        cJSON_AddItemToArray(rows, r);
        total += cost_i;
        side[to_cand] += cost_i;
    }
    cJSON_AddNumberToObject(cost, "total_cost", total);
    cJSON_AddNumberToObject(cost, "accepted_outcomes", accepted ? 1 : 0);
    if (accepted) cJSON_AddNumberToObject(cost, "cost_per_accepted_outcome", total);
    else {
        cJSON_AddNullToObject(cost, "cost_per_accepted_outcome");
        cJSON_AddStringToObject(cost, "note", "the candidate was not accepted: no accepted training outcome to divide by");
    }
    side_costs(c, cost, side, accepted);
    cJSON_AddNumberToObject(cost, "tokens", (double)c->tokens);
    if (total > 0) cJSON_AddNumberToObject(cost, "tokens_per_dollar", (double)c->tokens / total);
    cJSON *eng = engineering_section(table, base, cand);
    if (eng) cJSON_AddItemToObject(cost, "engineering", eng);
    return cost;
}

// A bad price table is found before the runs, not after them.
int acc_check_prices(const pt_accept_opts *o, const cJSON *prices) {
    // an absent currency is USD; a present one that is not a code would be shown as USD, a false claim
    const cJSON *cur = cJSON_GetObjectItemCaseSensitive(prices, "currency");
    if (cur && (!cJSON_IsString(cur) || !*cur->valuestring)) {
        pt_set_error("%s: currency: must be a non-empty string such as \"USD\"", o->price_table);
        return -1;
    }
    const cJSON *eng = cJSON_GetObjectItemCaseSensitive(prices, "engineering"), *e;
    if (eng && !cJSON_IsObject(eng)) {
        pt_set_error("%s: engineering: must be an object of backend -> {hours, rate_per_hour, source, date}",
                     o->price_table);
        return -1;
    }
    cJSON_ArrayForEach(e, eng) {
        const double h = jnum(e, "hours"), r = jnum(e, "rate_per_hour");
        if (!(h >= 0) || !(r >= 0) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "source"))) {
            pt_set_error("%s: engineering.%s: needs hours >= 0, rate_per_hour >= 0 and a source", o->price_table,
                         e->string);
            return -1;
        }
    }
    price_t p;
    if (price_for(prices, o->price_table, &o->baseline, 1, &p) != 0 ||
        price_for(prices, o->price_table, &o->candidate, 1, &p) != 0)
        return -1;
    return 0;
}
