#include "train/schedule.h"
#include "util/common.h"
#include "util/json.h"

#include <math.h>
#include <string.h>

static const char *const NAMES[LR_SCHEDULE_COUNT] = {
    "constant",           "constant_with_warmup", "linear",
    "cosine",             "cosine_with_restarts", "polynomial",
    "inverse_sqrt",       "cosine_with_min_lr",   "cosine_warmup_with_min_lr",
    "warmup_stable_decay", "torchtitan"};
// The keyword arguments each schedule takes (HF's function signatures), space-separated.
static const char *const KWARGS[LR_SCHEDULE_COUNT] = {
    "", "", "", "num_cycles", "num_cycles", "lr_end power", "timescale", "num_cycles min_lr min_lr_rate",
    "num_cycles min_lr min_lr_rate warmup_lr_rate",
    "num_decay_steps num_stable_steps warmup_type decay_type min_lr_ratio num_cycles",
    "decay_type min_lr_factor decay_ratio total_steps"};  // TorchTitan's lr_scheduler fields (warmup: --warmup-steps)

const char *pt_lr_schedule_name(pt_lr_kind k) { return k >= 0 && k < LR_SCHEDULE_COUNT ? NAMES[k] : "?"; }
bool pt_lr_schedule_warms_up(const pt_lr_schedule *s) { return s->kind != LR_CONSTANT; }

static bool takes(pt_lr_kind k, const char *key) {
    const char *list = KWARGS[k];
    const size_t n = strlen(key);
    if (n == 0) return false;  // strstr finds "" everywhere: the loop below would never end
    for (const char *p = list; (p = strstr(p, key)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return true;
    return false;
}

// HF's shape names; TorchTitan's decay_type calls 1-sqrt "sqrt".
static int shape_of(const cJSON *v, const char *key, bool titan, pt_lr_shape *out) {
    const char *const shapes[] = {"linear", "cosine", titan ? "sqrt" : "1-sqrt"};
    for (int i = 0; cJSON_IsString(v) && i < 3; i++)
        if (!strcmp(v->valuestring, shapes[i])) {
            *out = (pt_lr_shape)i;
            return 0;
        }
    pt_set_error("--lr-scheduler-kwargs: %s must be \"linear\", \"cosine\" or \"%s\"", key, shapes[2]);
    return -1;
}

// A numeric keyword argument x of k into s (min_lr and min_lr_rate, which exclude each other, into *min_lr and
// *min_lr_rate). 0, or -1 with the error.
static int number_kwarg(pt_lr_schedule *s, const char *k, double x, double *min_lr, double *min_lr_rate) {
    const bool count = !strcmp(k, "num_decay_steps") || !strcmp(k, "num_stable_steps") || !strcmp(k, "total_steps");
    const double lo = !strcmp(k, "total_steps") ? 1 : 0;
    if (count && (x < lo || x != floor(x) || x > 1e15)) {
        pt_set_error("--lr-scheduler-kwargs: %s must be a whole number >= %g, got %g", k, lo, x);
        return -1;
    }
    if (!strcmp(k, "timescale") && x <= 0) {
        pt_set_error("--lr-scheduler-kwargs: timescale must be > 0, got %g", x);
        return -1;
    }
    if (!strcmp(k, "decay_ratio") && !(x >= 0 && x <= 1)) {
        pt_set_error("--lr-scheduler-kwargs: decay_ratio must be in [0, 1], got %g", x);
        return -1;
    }
    if (!strcmp(k, "num_cycles")) s->num_cycles = x;
    else if (!strcmp(k, "min_lr")) *min_lr = x;
    else if (!strcmp(k, "min_lr_rate")) *min_lr_rate = x;
    else if (!strcmp(k, "warmup_lr_rate")) s->warmup_lr_rate = x;
    else if (!strcmp(k, "lr_end")) s->lr_end = x;
    else if (!strcmp(k, "power")) s->power = x;
    else if (!strcmp(k, "timescale")) s->timescale = x;
    else if (!strcmp(k, "num_decay_steps")) s->num_decay_steps = (long)x;
    else if (!strcmp(k, "num_stable_steps")) s->num_stable_steps = (long)x;
    else if (!strcmp(k, "min_lr_ratio")) s->min_lr_ratio = x;
    else if (!strcmp(k, "min_lr_factor")) s->min_lr_factor = x;
    else if (!strcmp(k, "decay_ratio")) s->decay_ratio = x;
    else if (!strcmp(k, "total_steps")) s->total_steps = (long)x;
    return 0;
}

int pt_lr_schedule_parse(pt_lr_schedule *s, const char *name, const char *kwargs_json, double lr) {
    memset(s, 0, sizeof *s);
    s->kind = LR_SCHEDULE_COUNT;
    for (int i = 0; i < LR_SCHEDULE_COUNT; i++)
        if (!strcmp(name, NAMES[i])) s->kind = (pt_lr_kind)i;
    if (s->kind == LR_SCHEDULE_COUNT) {
        const bool needs_eval = !strcmp(name, "reduce_lr_on_plateau") || !strcmp(name, "greedy");
        pt_set_error("--lr-scheduler-type '%s' %s (constant, constant_with_warmup, linear, cosine, "
                     "cosine_with_restarts, polynomial, inverse_sqrt, cosine_with_min_lr, cosine_warmup_with_min_lr, "
                     "warmup_stable_decay, torchtitan)", name,
                     needs_eval ? "follows evaluation metrics, which training here does not compute" : "unknown");
        return -1;
    }
    // HF's defaults
    s->num_cycles = s->kind == LR_COSINE_WITH_RESTARTS ? 1.0 : 0.5;
    s->lr_end = 1e-7;
    s->power = 1.0;
    s->lr_init = lr;
    s->warmup_lr_rate = NAN;
    s->num_stable_steps = -1;
    s->warmup_type = LR_SHAPE_LINEAR;
    s->decay_type = s->kind == LR_TORCHTITAN ? LR_SHAPE_LINEAR : LR_SHAPE_COSINE;
    s->decay_ratio = NAN;  // TorchTitan's None
    double min_lr = NAN, min_lr_rate = NAN;
    bool have_decay = false;
    cJSON *kw = NULL;
    if (kwargs_json && *kwargs_json) {
        kw = cJSON_Parse(kwargs_json);
        if (!cJSON_IsObject(kw)) {
            pt_set_error("--lr-scheduler-kwargs: not a JSON object: %s", kwargs_json);
            cJSON_Delete(kw);
            return -1;
        }
    }
    int rc = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, kw) {
        const char *k = v->string;
        if (!takes(s->kind, k)) {
            pt_set_error("--lr-scheduler-kwargs: %s takes no argument '%s'%s%s%s", name, k,
                         *KWARGS[s->kind] ? " (it takes: " : "", KWARGS[s->kind], *KWARGS[s->kind] ? ")" : "");
            rc = -1;
            break;
        }
        if (!strcmp(k, "warmup_type") || !strcmp(k, "decay_type")) {
            pt_lr_shape *shape = !strcmp(k, "warmup_type") ? &s->warmup_type : &s->decay_type;
            if ((rc = shape_of(v, k, s->kind == LR_TORCHTITAN, shape)) != 0) break;
            continue;
        }
        have_decay |= !strcmp(k, "num_decay_steps");
        if (cJSON_IsNull(v) && strcmp(k, "num_decay_steps")) continue;  // None: the default, as in Python
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
            pt_set_error("--lr-scheduler-kwargs: %s must be a number", k);
            rc = -1;
            break;
        }
        if ((rc = number_kwarg(s, k, v->valuedouble, &min_lr, &min_lr_rate)) != 0) break;
    }
    cJSON_Delete(kw);
    if (rc != 0) return -1;
    if (s->kind == LR_COSINE_WITH_MIN_LR || s->kind == LR_COSINE_WARMUP_WITH_MIN_LR) {
        if (isfinite(min_lr) && isfinite(min_lr_rate)) {
            pt_set_error("--lr-scheduler-kwargs: only one of min_lr or min_lr_rate should be set");
            return -1;
        }
        if (!isfinite(min_lr) && !isfinite(min_lr_rate)) {
            pt_set_error("--lr-scheduler-type %s needs min_lr or min_lr_rate in --lr-scheduler-kwargs, e.g. "
                         "'{\"min_lr_rate\": 0.1}'", name);
            return -1;
        }
        s->min_lr_rate = isfinite(min_lr) ? min_lr / lr : min_lr_rate;  // HF: min_lr / optimizer lr
        if (!isfinite(s->min_lr_rate)) {
            pt_set_error("--lr-scheduler-kwargs: min_lr needs a learning rate above 0");
            return -1;
        }
    }
    if (s->kind == LR_POLYNOMIAL && !(lr > s->lr_end)) {
        pt_set_error("--lr-scheduler-kwargs: lr_end (%g) must be smaller than the learning rate (%g)", s->lr_end, lr);
        return -1;
    }
    if (s->kind == LR_WARMUP_STABLE_DECAY && !have_decay) {
        pt_set_error("--lr-scheduler-type warmup_stable_decay needs num_decay_steps in --lr-scheduler-kwargs, e.g. "
                     "'{\"num_decay_steps\": 100}'");
        return -1;
    }
    return 0;
}

static double warmup_ramp(long step, long warmup) { return (double)step / (double)(warmup > 1 ? warmup : 1); }

static double wsd(const pt_lr_schedule *s, long step, long warmup, long total) {
    const long stable = s->num_stable_steps >= 0 ? s->num_stable_steps : total - warmup - s->num_decay_steps;
    const double lo = s->min_lr_ratio;
    double f;
    if (step < warmup) {
        const double p = warmup_ramp(step, warmup);
        f = s->warmup_type == LR_SHAPE_LINEAR ? p
          : s->warmup_type == LR_SHAPE_COSINE ? 0.5 * (1.0 - cos(M_PI * p))
                                              : 1.0 - sqrt(1.0 - p);
    } else if (step < warmup + stable) {
        return 1.0;
    } else if (step < warmup + stable + s->num_decay_steps) {
        const double p = (double)(step - warmup - stable) / (double)(s->num_decay_steps > 1 ? s->num_decay_steps : 1);
        f = s->decay_type == LR_SHAPE_LINEAR ? 1.0 - p
          : s->decay_type == LR_SHAPE_COSINE ? 0.5 * (1.0 + cos(M_PI * s->num_cycles * 2.0 * p))
                                             : 1.0 - sqrt(p);
    } else {
        return lo;
    }
    f = f * (1.0 - lo) + lo;
    return f > 0 ? f : 0.0;
}

// TorchTitan's phases over its total (total_steps, else the run's steps): warmup W (at most the total), then
// S steps at the peak, then D decay steps, D = round(total x decay_ratio) (Python's round: half to even) or all
// the steps after the warmup, S = total + 1 - W - D: one step more than the total, so the last step's rate is
// above min_lr_factor (TorchTitan's "virtual last step").
typedef struct { long warmup, stable, decay; } tt_phases;

static tt_phases titan_phases(const pt_lr_schedule *s, long warmup, long total) {
    const long n = s->total_steps > 0 ? s->total_steps : total;
    tt_phases p = {.warmup = warmup < n ? warmup : n};
    p.decay = isnan(s->decay_ratio) ? n - p.warmup : (long)nearbyint((double)n * s->decay_ratio);
    if (p.warmup + p.decay > n) p.decay = n - p.warmup;
    p.stable = n + 1 - p.warmup - p.decay;
    return p;
}

// Step k (1-based) of the warmup is k/W of the peak (HF's ramp: (k-1)/W); the decay's progress counts from 1 too.
static double titan(const pt_lr_schedule *s, long step, long warmup, long total) {
    const tt_phases p = titan_phases(s, warmup, total);
    if (step < p.warmup) return (double)(step + 1) / (double)p.warmup;
    if (step < p.warmup + p.stable) return 1.0;
    if (p.decay == 0) return NAN;  // past a total_steps with no decay phase: TorchTitan fails an assertion there
    const double progress = (double)(step + 1 - p.warmup - p.stable) / (double)p.decay;
    const double f = s->decay_type == LR_SHAPE_LINEAR ? 1.0 - progress
                   : s->decay_type == LR_SHAPE_1_SQRT ? 1.0 - sqrt(progress)
                                                      : 0.5 * (1.0 + cos(M_PI * progress));
    return s->min_lr_factor + (1.0 - s->min_lr_factor) * f;  // unclamped, as TorchTitan's
}

double pt_lr_multiplier(const pt_lr_schedule *s, long step, long warmup, long total) {
    const long span = total - warmup > 1 ? total - warmup : 1;
    switch (s->kind) {
    case LR_CONSTANT: return 1.0;
    case LR_WARMUP_STABLE_DECAY: return wsd(s, step, warmup, total);
    case LR_TORCHTITAN: return titan(s, step, warmup, total);
    case LR_COSINE_WARMUP_WITH_MIN_LR: {  // its own warmup: (step + 1) / warmup, or from warmup_lr_rate
        if (step < warmup) {
            if (isnan(s->warmup_lr_rate)) return ((double)step + 1.0) / (double)(warmup > 1 ? warmup : 1);
            return s->warmup_lr_rate + (1.0 - s->warmup_lr_rate) * (double)step / (double)(warmup - 1 > 1 ? warmup - 1 : 1);
        }
        const double progress = ((double)step - (double)warmup + 1.0) / (double)span;
        const double f = 0.5 * (1.0 + cos(M_PI * s->num_cycles * 2.0 * progress)) * (1 - s->min_lr_rate) + s->min_lr_rate;
        return f > 0 ? f : 0.0;
    }
    default: break;
    }
    if (step < warmup) return warmup_ramp(step, warmup);
    const double progress = (double)(step - warmup) / (double)span;
    switch (s->kind) {
    case LR_CONSTANT_WITH_WARMUP: return 1.0;
    case LR_LINEAR: {
        const double r = (double)(total - step) / (double)span;
        return r > 0 ? r : 0.0;
    }
    case LR_COSINE: {
        const double r = 0.5 * (1.0 + cos(M_PI * s->num_cycles * 2.0 * progress));
        return r > 0 ? r : 0.0;
    }
    case LR_COSINE_WITH_RESTARTS: {
        if (progress >= 1.0) return 0.0;
        const double r = 0.5 * (1.0 + cos(M_PI * fmod(s->num_cycles * progress, 1.0)));
        return r > 0 ? r : 0.0;
    }
    case LR_COSINE_WITH_MIN_LR: {
        const double f = 0.5 * (1.0 + cos(M_PI * s->num_cycles * 2.0 * progress)) * (1 - s->min_lr_rate) + s->min_lr_rate;
        return f > 0 ? f : 0.0;
    }
    case LR_POLYNOMIAL: {
        if (step > total) return s->lr_end / s->lr_init;
        const double pct_remaining = 1.0 - (double)(step - warmup) / (double)(total - warmup);
        return ((s->lr_init - s->lr_end) * pow(pct_remaining, s->power) + s->lr_end) / s->lr_init;
    }
    case LR_INVERSE_SQRT: {
        const double timescale = s->timescale > 0 ? s->timescale : warmup > 0 ? (double)warmup : 10000.0;
        return 1.0 / sqrt(((double)step + (timescale - (double)warmup)) / timescale);
    }
    default: return 1.0;
    }
}

static int check_step(const pt_lr_schedule *s, double lr, long step, long warmup, long total) {
    if (step < 0 || step >= total) return 0;
    const double m = pt_lr_multiplier(s, step, warmup, total);
    if (isfinite(m) && m >= 0 && isfinite(lr * m)) return 0;
    pt_set_error("--lr-scheduler-type %s: the learning rate of step %ld would be %g (lr %g x %g); check "
                 "--lr-scheduler-kwargs and --warmup-steps", pt_lr_schedule_name(s->kind), step + 1, lr * m, lr, m);
    return -1;
}

int pt_lr_schedule_check(const pt_lr_schedule *s, double lr, long warmup, long total) {
    const long dense = 10000000;
    if (total <= dense) {
        for (long step = 0; step < total; step++)
            if (check_step(s, lr, step, warmup, total)) return -1;
        return 0;
    }
    // where a formula changes: warmup's end, WSD's (or TorchTitan's) stable and decay phases, the last step
    long w = warmup, stable = s->num_stable_steps >= 0 ? s->num_stable_steps : total - warmup - s->num_decay_steps;
    long decay = s->num_decay_steps;
    if (s->kind == LR_TORCHTITAN) {
        const tt_phases p = titan_phases(s, warmup, total);
        w = p.warmup, stable = p.stable, decay = p.decay;
    }
    const long edges[] = {0, w, w + stable, w + stable + decay, total - 1};
    for (size_t e = 0; e < sizeof edges / sizeof *edges; e++)
        for (long d = -2; d <= 2; d++)
            if (check_step(s, lr, edges[e] + d, warmup, total)) return -1;
    for (long i = 0; i < dense; i++)
        if (check_step(s, lr, (long)((double)i / dense * (double)total), warmup, total)) return -1;
    return 0;
}
