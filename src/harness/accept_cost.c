// The cost section: every phase's seconds priced from the price table (configs/prices.json).
#include "harness/accept_internal.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    double price;        // per unit-hour
    double units;        // units used (threads, or a fixed count)
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
        if (cJSON_IsString(u) && !strcmp(u->valuestring, "threads")) out->units = threads;
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

cJSON *acc_cost_section(acc_ctx *c, const cJSON *table, const pt_platform *base, const pt_platform *cand,
                           int threads_base, int threads_cand, bool accepted, const char *cpu) {
    const pt_accept_opts *o = c->o;
    price_t pb, pc;
    if (price_for(table, o->price_table, base, threads_base, &pb) != 0) return NULL;
    if (price_for(table, o->price_table, cand, threads_cand, &pc) != 0) return NULL;
    cJSON *cost = cJSON_CreateObject();
    cJSON_AddStringToObject(cost, "price_table", o->price_table);
    const cJSON *cur = cJSON_GetObjectItemCaseSensitive(table, "currency");
    cJSON_AddStringToObject(cost, "currency", cJSON_IsString(cur) ? cur->valuestring : "USD");
    cJSON *rows = cJSON_AddArrayToObject(cost, "rows");
    double total = 0;
    const cJSON *ph;
    cJSON_ArrayForEach(ph, c->phases) {
        const char *pl = cJSON_GetObjectItemCaseSensitive(ph, "platform")->valuestring;
        const price_t *p = !strcmp(cJSON_GetObjectItemCaseSensitive(ph, "billed_to")->valuestring, "candidate") ? &pc : &pb;
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
    }
    cJSON_AddNumberToObject(cost, "total_cost", total);
    cJSON_AddNumberToObject(cost, "accepted_outcomes", accepted ? 1 : 0);
    if (accepted) cJSON_AddNumberToObject(cost, "cost_per_accepted_outcome", total);
    else {
        cJSON_AddNullToObject(cost, "cost_per_accepted_outcome");
        cJSON_AddStringToObject(cost, "note", "the candidate was not accepted: no accepted training outcome to divide by");
    }
    cJSON_AddNumberToObject(cost, "tokens", (double)c->tokens);
    if (total > 0) cJSON_AddNumberToObject(cost, "tokens_per_dollar", (double)c->tokens / total);
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
    price_t p;
    if (price_for(prices, o->price_table, &o->baseline, 1, &p) != 0 ||
        price_for(prices, o->price_table, &o->candidate, 1, &p) != 0)
        return -1;
    return 0;
}
