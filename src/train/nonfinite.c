// --nan-policy (docs/RECOVERY.md): what a step whose loss or gradient norm is
// not finite does. Checked before the update, so the weights never become
// non-finite: stop, skip the batch, or roll back to the newest checkpoint and
// go on from there (a batch that fails again after its rollback is skipped).
#include "train/trainer_ctx.h"
#include "util/common.h"
#include "util/fileio.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const policy_name[] = {"stop", "skip", "rollback"};

// Restores the newest valid checkpoint in-process and truncates metrics.jsonl
// to it. Returns the restored step, 0 when there is no checkpoint to go back to
// (nothing changed), -1 on error (the model may be partly restored: the caller
// must stop).
static long rollback(pt_trainer *t, long fault_step) {
    const pt_train_args *a = &t->a;
    char *lp = pt_path_join(a->output_dir, "latest");
    const bool any = pt_file_exists(lp);
    free(lp);
    if (!any) return 0;
    ckpt *c = ckpt_open_resume(a->output_dir, "latest");
    if (!c) return 0;
    if (ckpt_step(c) >= fault_step) {  // a stale checkpoint of another run in this output dir
        pt_warn("%s is not older than step %ld; not rolling back to it", ckpt_dir(c), fault_step);
        ckpt_close(c);
        return 0;
    }
    const long back = pt_trainer_resume(t, c);
    if (back < 0) {
        ckpt_close(c);
        return -1;
    }
    const cJSON *mr = cJSON_GetObjectItemCaseSensitive(ckpt_state(c), "metrics_record");
    int rc = 0;
    if (t->metrics) {  // rank 0
        pt_metrics_close(t->metrics);
        t->metrics = pt_metrics_open(a->output_dir, back, cJSON_IsString(mr) ? mr->valuestring : NULL);
        if (!t->metrics) {
            pt_prefix_error("cannot reopen after the rollback: ");
            rc = -1;
        }
    }
    if (!a->quiet && rc == 0) pt_info("rolled back to %s", ckpt_dir(c));
    ckpt_close(c);
    return rc ? -1 : back;
}

// Stops the run when the policy says so (or its --nan-max-count is spent): true with the error set.
static bool must_stop(pt_trainer *t, long step, double loss, double gnorm, const char *what, bool again) {
    const pt_train_args *a = &t->a;
    if (a->nan_policy == PT_NAN_STOP)
        pt_set_error("step %ld: non-finite %s (loss %g, grad norm %g) before the optimizer step; stopped "
                     "(--nan-policy stop): no update and no checkpoint after step %ld", step + 1, what, loss, gnorm,
                     step);
    else if (!again && t->nf.handled >= a->nan_max_count)
        pt_set_error("step %ld: non-finite %s (loss %g, grad norm %g); --nan-max-count %d non-finite steps already "
                     "handled (--nan-policy %s), stopped before the update", step + 1, what, loss, gnorm,
                     a->nan_max_count, policy_name[a->nan_policy]);
    else
        return false;
    return true;
}

// --nan-policy rollback, once per failing step: PT_NF_ROLLED_BACK, PT_NF_SKIP (nothing to roll back to) or
// PT_NF_FAIL.
static int roll_back(pt_trainer *t, long step, double loss, double gnorm, const char *what, long *back_out) {
    pt_nonfinite *nf = &t->nf;
    const double tr = pt_now_s();
    if (nf->n_rolled < 64) nf->rolled[nf->n_rolled++] = step + 1;
    const long back = rollback(t, step + 1);
    if (back < 0) {
        pt_prefix_error("step %ld: rollback after a non-finite %s failed: ", step + 1, what);
        return PT_NF_FAIL;
    }
    if (back == 0) {
        if (t->rank == 0)
            pt_warn("step %ld: non-finite %s and no checkpoint to roll back to; skipping the batch instead (the "
                    "weights are those of step %ld either way)", step + 1, what, step);
        return PT_NF_SKIP;
    }
    if (t->rank == 0)
        pt_warn("step %ld: non-finite %s (loss %g, grad norm %g); rolled back to step %ld (%d of --nan-max-count "
                "%d); the batch of step %ld is skipped if it fails again", step + 1, what, loss, gnorm, back,
                nf->handled, t->a.nan_max_count, step + 1);
    nf->rb_first = back;
    nf->rb_from = step + 1;
    nf->rb_time = pt_now_s() - tr;
    *back_out = back;
    return PT_NF_ROLLED_BACK;
}

int pt_nonfinite_step(pt_trainer *t, long step, double loss, double gnorm, const char **skip_reason, long *back,
                      int *rc) {
    const pt_train_args *a = &t->a;
    pt_nonfinite *nf = &t->nf;
    const char *what = !isfinite(loss) ? "loss" : "gradient norm";
    *skip_reason = !isfinite(loss) ? "nonfinite_loss" : "nonfinite_grad_norm";
    bool again = false;  // this step already caused a rollback: skip it now
    for (int i = 0; i < nf->n_rolled; i++) again |= nf->rolled[i] == step + 1;
    if (must_stop(t, step, loss, gnorm, what, again)) {
        *rc = PT_TRAIN_NONFINITE;
        t->collective_error = true;  // loss and norm are global: every rank stops here
        return PT_NF_FAIL;
    }
    if (!again) nf->handled++;
    if (a->nan_policy == PT_NAN_ROLLBACK && !again) return roll_back(t, step, loss, gnorm, what, back);
    if (again) {
        if (t->rank == 0) pt_warn("step %ld: non-finite %s again after the rollback; batch skipped, no update", step + 1, what);
    } else if (t->rank == 0) {
        pt_warn("step %ld: non-finite %s (loss %g, grad norm %g); batch skipped, no update (--nan-policy %s, %d of "
                "--nan-max-count %d)", step + 1, what, loss, gnorm, policy_name[a->nan_policy], nf->handled,
                a->nan_max_count);
    }
    return PT_NF_SKIP;
}
