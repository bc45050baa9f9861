// The training loop: each step reads its global batch, runs forward/backward
// over the micro-batches, applies --nan-policy, updates, checkpoints when due
// and writes its metrics record, under whichever runtime the process has.
#include "train/audit.h"
#include "train/ckpt_interval.h"
#include "train/faults.h"
#include "model/qwen3_moe.h"
#include "train/trainer_ctx.h"
#include "util/common.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY  // XXH64_state_t on the stack
#include <xxhash.h>

// What the loop carries from step to step.
typedef struct {
    bool quiet, tty;
    double t_start;
    double loss_first, loss_last, loss_min;
    long auto_next;  // --save-steps auto: the probe save, then Daly's interval (re-estimated per save)
    long step_time_n, log_loss_n;
    double step_time_sum, log_loss_sum;  // the progress line's loss: the mean since the previous line
    pt_audit *audit;  // --audit-dump (NULL: none)
} loop_state;

// One step in flight.
typedef struct {
    long step;  // 0-based: the record's step is step + 1
    int row_len;
    long targets;
    uint64_t batch_fp;
    double loss, gnorm, lr, dt;
    bool has_aux;  // Qwen3-MoE with output_router_logits: aux, the micro-batches' mean load-balancing loss
    double aux;
    const char *skip_reason;
    pt_comm_stats cs0;
} step_state;

// What the interrupt handler (below) reports: steps done, of, the latest checkpoint's step (-1: none), ...
static volatile sig_atomic_t g_int_step, g_int_max, g_int_ckpt = -1, g_int_rank, g_int_tty;

static void fmt_eta(double s, char *buf, size_t n) {
    if (!isfinite(s) || s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
}

// A fingerprint of the GLOBAL batch, the same whatever the layout: the sum (mod 2^64) over global rows of
// XXH64(inputs, labels; seed = row index).
static uint64_t batch_fingerprint(pt_trainer *t, size_t rows, int row_len) {
    double half[2] = {0, 0};  // exact: < 2^21 rows x 2^32
    for (size_t r = 0; r < rows; r++) {
        const uint64_t g = (uint64_t)pt_loader_global_row(t->loader, (int)r);
        XXH64_state_t hs;  // on the stack: no allocation per row
        XXH64_reset(&hs, g);
        XXH64_update(&hs, t->ids + r * row_len, sizeof(int32_t) * (size_t)row_len);
        XXH64_update(&hs, t->labels + r * row_len, sizeof(int32_t) * (size_t)row_len);
        const uint64_t h = XXH64_digest(&hs);
        half[0] += (double)(h & 0xffffffffu);
        half[1] += (double)(h >> 32);
    }
    t->ops->data_sum(t, half, 2);
    return (uint64_t)half[0] + ((uint64_t)half[1] << 32);
}

// Rows micro-batch mb runs on. A Qwen3-MoE micro-batch runs on its real rows only (none: skipped), as HF's
// Trainer runs an epoch's short last micro-batches: the load-balancing loss counts every row it is given, so
// empty rows would change it. A dense model keeps the full micro-batch (empty rows add nothing to it), and so
// do data-parallel ranks, whose micro-batches must keep one shape for the collectives inside them (HF's
// accelerate evens them out too, by repeating rows).
static int micro_batch_rows(const pt_trainer *t, int mb, int B) {
    if (!t->mdl->moe || t->data_world > 1) return B;
    const int left = pt_loader_last_real_rows(t->loader) - mb * B;
    return left < 0 ? 0 : left < B ? left : B;
}

// The batch, forward/backward over the micro-batches: s->loss and s->gnorm of the global batch.
//
// Qwen3-MoE with output_router_logits: the loss is HF Trainer's. Qwen3MoeForCausalLM returns per micro-batch
// ce_sum / num_items_in_batch + coef x aux_mb; it accepts loss kwargs, so the Trainer, given
// num_items_in_batch, does not divide by the accumulation steps, backpropagates that sum and logs the sum
// over the micro-batches: the step's mean cross-entropy + coef x (aux_1 + ... + aux_k), the aux term NOT
// averaged over the k micro-batches. The gradient (aux_scale 1 per micro-batch in qwen3_forward_backward)
// and the logged loss both follow that; s->aux is the mean aux_m, what one forward's aux_loss reads.
static int forward_backward(pt_trainer *t, step_state *s) {
    const int B = t->a.per_device_train_batch_size, accum = t->a.gradient_accumulation_steps;
    const size_t rows = (size_t)B * accum;
    s->row_len = t->a.seq_len;
    if (pt_loader_batch(t->loader, (uint64_t)s->step, t->ids, t->labels, &s->row_len) != 0) return -1;
    const int32_t *pos = pt_loader_last_positions(t->loader);  // documents mode: per-document positions
    long targets = 0;
    for (size_t i = 0; i < rows * (size_t)s->row_len; i++) targets += t->labels[i] != -100;
    s->batch_fp = batch_fingerprint(t, rows, s->row_len);
    double tg = (double)targets;
    t->ops->data_sum(t, &tg, 1);  // the global batch's
    s->targets = (long)tg;
    t->ops->zero_grads(t);
    double loss_sum = 0, aux_sum = 0;
    int aux_n = 0;
    const bool aux_on = t->mdl->moe && t->mdl->cfg.output_router_logits;
    const float scale = s->targets > 0 ? (float)(1.0 / (double)s->targets) : 0.0f;
    for (int mb = 0; mb < accum; mb++) {
        double ls = 0;
        int nt = 0;
        const int mrows = micro_batch_rows(t, mb, B);
        if (mrows == 0) continue;
        size_t off = (size_t)mb * B * s->row_len;
        if (pos) qwen3_set_positions(t->mdl, pos + off);
        if (qwen3_forward_backward(t->mdl, t->ids + off, t->labels + off, mrows, s->row_len, scale, &ls, &nt) != 0)
            return -1;
        loss_sum += ls;
        if (aux_on) aux_sum += qwen3_moe_aux_loss(t->mdl), aux_n++;
    }
    t->ops->finish_grads(t, &loss_sum);
    s->loss = s->targets > 0 ? loss_sum / (double)s->targets : 0.0;
    s->has_aux = aux_n > 0;
    s->aux = aux_n ? aux_sum / aux_n : 0.0;
    if (aux_n) s->loss += t->mdl->cfg.router_aux_loss_coef * aux_sum;
    t->ops->fault_after_backward(t, s->step + 1, &s->loss);
    s->gnorm = t->ops->grad_norm(t);
    return 0;
}

// The step's record, without its checkpoint's fields.
static void build_record(pt_trainer *t, const step_state *s, pt_metrics_step *r) {
    memset(r, 0, sizeof *r);
    r->step = s->step + 1;
    r->loss = s->loss;
    r->has_aux_loss = s->has_aux;
    r->aux_loss = s->aux;
    r->grad_norm = s->gnorm;
    r->lr = s->lr;
    r->epoch = pt_loader_epochs_done(t->loader, (uint64_t)(s->step + 1));  // passes over the data so far
    // the global batch's rows that hold data ("hf" epochs: an epoch's last step may have empty rows)
    r->tokens = (long)pt_loader_last_real_rows(t->loader) * s->row_len;
    r->step_time_s = s->dt;
    r->flops_per_token = t->flops_tok;
    r->batch_fingerprint = s->batch_fp;
    r->activation_bytes = t->mdl->act_bytes;
    t->ops->record_step(t, &s->cs0, r);
    r->skip_reason = s->skip_reason;
    if (s->step == t->nf.rb_first) {
        r->rolled_back_from = t->nf.rb_from;
        r->rollback_restore_time_s = t->nf.rb_time;
    }
    r->padded = t->a.padded;
    r->padding_fraction = t->a.padded ? pt_loader_last_padding_fraction(t->loader) : 0;
    r->row_len = s->row_len;
    if (t->be->ops->compile_stats) {  // run-time kernel compilation so far (opencl): build time, cache, recompilations
        pt_compile_stats cs;
        t->be->ops->compile_stats(t->be, &cs);
        r->has_compile = true;
        r->compile_s = cs.compile_seconds;
        r->cache_hits = cs.cache_hits, r->cache_misses = cs.cache_misses, r->recompilations = cs.recompilations;
    }
    r->restore_time_s = t->restore_time >= 0 && s->step == t->start_step ? t->restore_time : -1;
}

static bool save_due(const pt_trainer *t, const loop_state *L, long step) {
    const pt_train_args *a = &t->a;
    return a->save_steps > 0 ? (step + 1) % a->save_steps == 0
                             : a->save_steps == PT_SAVE_STEPS_AUTO && step + 1 == L->auto_next && step + 1 < a->max_steps;
}

// --save-steps auto: Daly's interval from this save's cost and the mean step time so far (re-estimated at
// every save: disks and step times drift); rank 0's estimate for everyone: the ranks must save together.
static void next_auto_save(pt_trainer *t, loop_state *L, long step, const ckpt_save_stats *ss, pt_metrics_step *r) {
    const pt_train_args *a = &t->a;
    const double mtbf_s = a->mtbf_hours * 3600.0, st_mean = L->step_time_sum / (L->step_time_n ? L->step_time_n : 1);
    const long every = t->ops->broadcast_long(t, pt_daly_interval_steps(ss->seconds, mtbf_s, st_mean));
    L->auto_next = step + 1 + (every > 0 ? every : 1);
    r->has_save_interval = true;
    r->save_interval_steps = every;
    if (t->rank == 0)
        pt_info("checkpoint interval: %ld steps (Daly: save %.3f s, MTBF %g h, step %.3f s; Young %.0f s); next at "
                "step %ld", every, ss->seconds, a->mtbf_hours, st_mean, pt_young_interval_s(ss->seconds, mtbf_s),
                L->auto_next);
}

// The checkpoint after a step, its record (without the save's fields) stored in it: the record is written
// to metrics.jsonl only after the checkpoint is safe, and a crash in between loses no line (the resume
// restores it). -1 (rc set) when the save failed.
static int save_step(pt_trainer *t, loop_state *L, long step, pt_metrics_step *r, int *rc) {
    const pt_train_args *a = &t->a;
    pt_trainer_heartbeat(t, step + 1, "save");  // a supervisor gives a save the start-up timeout
    pt_fault_before_save(step + 1);             // test-only kill:phase=save / enospc (rank-aware)
    cJSON *st = pt_trainer_state_json(t, step + 1);
    pt_strbuf line = {0};
    pt_metrics_format(&line, r);
    cJSON_AddStringToObject(st, "metrics_record", line.p);
    pt_strbuf_free(&line);
    ckpt_save_stats ss;
    const int src = t->ops->save(t, step + 1, st, &ss);
    cJSON_Delete(st);
    if (src != 0) {
        if (t->metrics) pt_metrics_write(t->metrics, r);
        pt_prefix_error("step %ld: the previous checkpoint is kept; ", step + 1);
        if (src == PT_SAVE_NONFINITE) *rc = PT_TRAIN_NONFINITE;
        t->collective_error = true;  // every rank got the save's verdict
        return -1;
    }
    r->saved = true;
    g_int_ckpt = (sig_atomic_t)(step + 1);  // latest now points at it
    r->save_time_s = ss.seconds, r->save_bytes = (unsigned long long)ss.bytes, r->save_gb_per_s = ss.gb_per_s;
    if (a->save_steps == PT_SAVE_STEPS_AUTO) next_auto_save(t, L, step, &ss, r);
    return 0;
}

// The progress line on stderr (as HF logs it: the mean loss of the steps since the previous line).
static void progress(pt_trainer *t, loop_state *L, const step_state *s, long tokens) {
    const pt_train_args *a = &t->a;
    const long step = s->step;
    if (!s->skip_reason) {
        if (isnan(L->loss_first)) L->loss_first = s->loss;
        L->loss_last = s->loss;
        if (s->loss < L->loss_min) L->loss_min = s->loss;
        L->log_loss_sum += s->loss;
        L->log_loss_n++;
    }
    const double elapsed = pt_now_s() - L->t_start;
    const double eta = elapsed / (step + 1 - t->start_step) * (a->max_steps - step - 1);
    char etab[32];
    fmt_eta(eta, etab, sizeof etab);
    bool log_line = !L->quiet && (a->logging_steps > 0 && ((step + 1) % a->logging_steps == 0 ||
                                                           step + 1 == a->max_steps || step == t->start_step));
    if (log_line) {
        fprintf(stderr, "%sstep %ld/%ld  loss %.4f  grad_norm %.3f  lr %.3e  %.0f tok/s  ETA %s\n",
                L->tty ? "\r\033[K" : "", step + 1, a->max_steps,
                L->log_loss_n ? L->log_loss_sum / L->log_loss_n : s->loss, s->gnorm, s->lr, tokens / s->dt, etab);
        L->log_loss_sum = 0;
        L->log_loss_n = 0;
    } else if (L->tty) {
        fprintf(stderr, "\r\033[Kstep %ld/%ld  loss %.4f  %.0f tok/s  ETA %s", step + 1, a->max_steps, s->loss,
                tokens / s->dt, etab);
    }
}

// One optimizer step. 0 done, 1 rolled back (*step set to continue after the checkpoint), -1 error (rc).
static int train_step(pt_trainer *t, loop_state *L, long *step, int *rc) {
    const pt_train_args *a = &t->a;
    step_state s = {.step = *step};
    pt_trainer_heartbeat(t, s.step + 1, "compute");
    const double t0 = pt_now_s();
    pt_comm_get_stats(&s.cs0);
    if (forward_backward(t, &s) != 0) return -1;
    if (!isfinite(s.loss) || !isfinite(s.gnorm)) {  // checked before the update: the weights stay finite
        long back = 0;
        const int v = pt_nonfinite_step(t, s.step, s.loss, s.gnorm, &s.skip_reason, &back, rc);
        if (v == PT_NF_FAIL) return -1;
        if (v == PT_NF_ROLLED_BACK) {
            *step = back - 1;  // the loop's step++ continues at checkpoint step + 1
            return 1;
        }
    }
    s.lr = a->learning_rate * pt_lr_multiplier(&t->sched, s.step, a->warmup_steps, a->max_steps);
    if (pt_fault_lr_scale(a->backend) != 1.0) s.lr *= pt_fault_lr_scale(a->backend);
    if (!s.skip_reason && pt_audit_after_backward(L->audit, t, s.step + 1, s.row_len, s.loss, s.gnorm) != 0) return -1;
    if (!s.skip_reason) t->ops->update(t, s.step + 1, s.gnorm, s.lr);
    if (!s.skip_reason && pt_audit_after_update(L->audit, t, s.step + 1) != 0) return -1;
    t->be->ops->synchronize(t->be);
    s.dt = pt_now_s() - t0;
    pt_metrics_step r;
    build_record(t, &s, &r);
    if (!s.skip_reason && s.step > t->start_step) {  // the first step warms up
        L->step_time_sum += s.dt;
        L->step_time_n++;
    }
    if (save_due(t, L, s.step) && save_step(t, L, s.step, &r, rc) != 0) return -1;
    if (t->metrics) pt_metrics_write(t->metrics, &r);  // a failed write does not stop training
    pt_trainer_heartbeat(t, s.step + 1, "done");
    pt_fault_after_step(s.step + 1);  // test-only kill/hang faults (train/faults.h), rank-aware
    progress(t, L, &s, r.tokens);
    return 0;
}

// Ctrl-C or SIGTERM on a run started by hand: rank 0 says where the run stopped and how to go on, then the
// process dies of the signal as it did without the handler (a shell sees 130 or 143). A supervised worker is
// left alone: its supervisor tears it down and restarts it. The handler reads only these, which the loop
// writes between steps, and calls only async-signal-safe functions.
static const int g_int_signals[2] = {SIGINT, SIGTERM};
static struct sigaction g_int_old[2];
static bool g_int_caught[2];

static size_t put_str(char *b, size_t n, size_t cap, const char *s) {
    while (*s && n + 1 < cap) b[n++] = *s++;
    return n;
}

static size_t put_long(char *b, size_t n, size_t cap, long v) {
    char d[24];
    int k = 0;
    do d[k++] = (char)('0' + v % 10), v /= 10; while (v > 0 && k < 23);
    while (k > 0 && n + 1 < cap) b[n++] = d[--k];
    return n;
}

static void on_interrupt(int sig) {
    if (g_int_rank == 0) {
        char b[400];
        const size_t cap = sizeof b;
        size_t n = put_str(b, 0, cap, g_int_tty ? "\r\033[K" : "");
        n = put_str(b, n, cap, "portatrain: interrupted at step ");
        n = put_long(b, n, cap, g_int_step);
        n = put_str(b, n, cap, " of ");
        n = put_long(b, n, cap, g_int_max);
        if (g_int_ckpt >= 0) {
            n = put_str(b, n, cap, "; resume with: portatrain train ... --resume-from-checkpoint latest (the same "
                                   "flags; it continues from step ");
            n = put_long(b, n, cap, g_int_ckpt);
            n = put_str(b, n, cap, ")\n");
        } else
            n = put_str(b, n, cap, "; no checkpoint was written yet (--save-steps), so a rerun starts from step 0\n");
        ssize_t w = write(2, b, n);
        (void)w;
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void catch_interrupts(const pt_trainer *t, bool tty) {
    if (getenv("PT_SUPERVISED_WORKER")) return;
    g_int_rank = t->rank, g_int_tty = tty, g_int_step = (sig_atomic_t)t->start_step;
    g_int_max = (sig_atomic_t)t->a.max_steps;
    g_int_ckpt = t->a.resume_from_checkpoint ? (sig_atomic_t)t->start_step : -1;
    for (int k = 0; k < 2; k++) {
        // a signal ignored on entry (a background job of a script, nohup) stays ignored
        if (sigaction(g_int_signals[k], NULL, &g_int_old[k]) != 0 || g_int_old[k].sa_handler == SIG_IGN) continue;
        struct sigaction sa = {.sa_handler = on_interrupt, .sa_flags = SA_RESTART};
        sigemptyset(&sa.sa_mask);
        g_int_caught[k] = sigaction(g_int_signals[k], &sa, NULL) == 0;
    }
}

static void release_interrupts(void) {
    for (int k = 0; k < 2; k++)
        if (g_int_caught[k]) sigaction(g_int_signals[k], &g_int_old[k], NULL), g_int_caught[k] = false;
}

int pt_train_loop(pt_trainer *t, int *rc) {
    loop_state L = {.quiet = t->a.quiet || t->rank != 0, .t_start = pt_now_s(), .loss_first = NAN,
                    .loss_last = NAN, .loss_min = INFINITY, .auto_next = t->start_step + PT_SAVE_AUTO_PROBE};
    L.tty = isatty(2) && !L.quiet;
    catch_interrupts(t, L.tty);
    if (pt_audit_open(t, &L.audit) != 0) { release_interrupts(); return -1; }
    int err = 0;
    for (long step = t->start_step; step < t->a.max_steps && !err; step++) {
        if (train_step(t, &L, &step, rc) < 0) err = -1;
        else g_int_step = (sig_atomic_t)(step + 1);
    }
    pt_audit_free(L.audit);
    release_interrupts();
    if (err) return -1;
    if (L.tty) fprintf(stderr, "\r\033[K");
    t->loss_first = L.loss_first, t->loss_last = L.loss_last, t->loss_min = L.loss_min;
    t->t_start = L.t_start;
    return 0;
}
