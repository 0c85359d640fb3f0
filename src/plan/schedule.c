/* Job order and per-job device memory. */
#include "plan/schedule.h"

rp_job rp_schedule_job(const rp_plan *p, int j)
{
    rp_job job;
    if (j < p->nfwd) {
        job.kind = RP_JOB_FWD;
        job.stage = j;
        job.first = p->fwd[j].first;
        job.last = p->fwd[j].last;
    } else {
        job.stage = j - p->nfwd;
        job.kind = job.stage == 0 ? RP_JOB_TAIL : RP_JOB_BWD;
        job.first = p->bwd[job.stage].first;
        job.last = p->bwd[job.stage].last;
    }
    return job;
}

int rp_schedule_executor(const rp_plan *p, int gpus, int64_t iteration, int j, int group)
{
    int w = rp_schedule_width(p, gpus);
    int64_t c = iteration * rp_schedule_num_jobs(p) + j;
    return group * w + (int)(c % w);
}

rp_status rp_schedule_check(const rp_plan *p, int gpus, int microbatches, int *per_group,
                            rp_error *err)
{
    if (gpus < 1 || microbatches < 1)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "schedule: %d executors, %d microbatches "
                            "(need >= 1 each)", gpus, microbatches);
    int w = rp_schedule_width(p, gpus);
    if (w > gpus || gpus % w != 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "schedule: pipeline width %d does not divide %d executors", w, gpus);
    int groups = gpus / w;
    if (microbatches % groups != 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "schedule: %d microbatches do not split evenly over %d pipelines of "
                            "width %d",
                            microbatches, groups, w);
    *per_group = microbatches / groups;
    return RP_OK;
}

double rp_schedule_job_ms(const rp_cost_model *m, const rp_plan *p, const rp_job *job)
{
    if (job->kind == RP_JOB_FWD)
        return rp_cost_fwd_ms(m, job->first, job->last);
    double ms = rp_cost_bwd_ms(m, job->first, job->last);
    if (job->kind == RP_JOB_BWD)
        for (int l = job->first; l <= job->last; l++)
            if (rp_plan_is_kept(p, l))
                ms -= m->layers[l].fwd_ms; /* read where they lie: no recompute */
    return ms;
}

int64_t rp_schedule_pool_microbatches(const rp_plan *p, int gpus, int microbatches)
{
    return gpus > 0 ? (int64_t)microbatches * rp_schedule_width(p, gpus) / gpus : microbatches;
}

int64_t rp_schedule_kept_pool_bytes(const rp_cost_model *m, const rp_plan *p, int gpus,
                                    int microbatches)
{
    if (!m->keep_on_executor)
        return 0;
    int64_t bytes = 0;
    for (int l = 1; l < rp_plan_tail_first(p); l++)
        if (rp_plan_is_kept(p, l))
            bytes += m->layers[l].keep_device_bytes;
    return bytes * rp_schedule_pool_microbatches(p, gpus, microbatches);
}

/* One use of layer l: its dequantisation unless the scratch holds it. */
static double use(const rp_cost_model *m, int l, int *held)
{
    double ms = m->layers[l].dequant_ms;
    if (!(ms > 0) || *held == l)
        return 0.0;
    *held = l;
    return ms;
}

/* One microbatch of the job, in the order stage_compute.c uses its layers. */
static double microbatch_dequant(const rp_cost_model *m, const rp_plan *p, const rp_job *job,
                                 int *held)
{
    double ms = 0.0;
    int top = job->last; /* the last layer run forward */
    if (job->kind == RP_JOB_TAIL)
        top = job->last - 1; /* the head: never FP8, run with its backward */
    else if (job->kind == RP_JOB_BWD)
        while (top >= job->first && rp_plan_is_kept(p, top))
            top--;
    for (int l = job->first; l <= top; l++)
        ms += use(m, l, held);
    if (job->kind != RP_JOB_FWD)
        for (int l = job->last; l >= job->first; l--)
            ms += use(m, l, held);
    return ms;
}

void rp_schedule_job_dequant(const rp_cost_model *m, const rp_plan *p, const rp_job *job,
                             double *first_ms, double *later_ms)
{
    int held = -1;
    *first_ms = microbatch_dequant(m, p, job, &held);
    *later_ms = microbatch_dequant(m, p, job, &held);
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* A job's own workspace: the largest of its layers' (each call uses it
 * alone). */
static int64_t job_workspace_bytes(const rp_cost_model *m, const rp_job *job)
{
    int64_t bytes = 0;
    for (int l = job->first; l <= job->last; l++)
        bytes = max64(bytes, m->layers[l].workspace_bytes);
    return bytes;
}

/* What a job takes of the executor's scratch, which it uses alone
 * (engine/executor.c lays it out so, reused job after job): its own
 * workspace and its gradients (TAIL/BWD). */
static int64_t job_scratch_bytes(const rp_cost_model *m, const rp_job *job)
{
    int64_t grads = job->kind == RP_JOB_FWD ? 0 : rp_cost_grad_bytes(m, job->first, job->last);
    return grads + job_workspace_bytes(m, job);
}

/* What a tail or backward job keeps on the device for its layers'
 * backward: a slot per layer (one at a time in a backward job under
 * --recompute layer), but for the kept layers an executor reads where
 * they lie, the host store or its pool (engine/executor.c sizes it so). */
static int64_t job_saved_bytes(const rp_cost_model *m, const rp_plan *p, const rp_job *job)
{
    int64_t bytes = 0;
    const int one = job->kind == RP_JOB_BWD && m->saved_by_layer; /* one at a time */
    for (int l = job->first; l <= job->last; l++)
        if (!((m->keep_in_place || m->keep_on_executor) && job->kind == RP_JOB_BWD &&
              rp_plan_is_kept(p, l)))
            bytes = one ? max64(bytes, m->layers[l].act_bytes) : bytes + m->layers[l].act_bytes;
    return bytes;
}

int64_t rp_schedule_job_bytes(const rp_cost_model *m, const rp_plan *p, int gpus,
                              int microbatches, int j, int64_t workspace)
{
    int n = rp_schedule_num_jobs(p), w = rp_schedule_width(p, gpus);
    rp_job job = rp_schedule_job(p, j), next = rp_schedule_job(p, (j + w) % n);
    int64_t bytes = rp_cost_weight_bytes(m, job.first, job.last);
    /* the next job on this executor prefetches into the second buffer; when
     * the executor runs only this job, the next copy is this stage again
     * (none with one buffer: the upload waits for this job to end) */
    if (!m->single_weight_buffer)
        bytes += rp_cost_weight_bytes(m, next.first, next.last);
    /* the stage's input and output of one microbatch (for backward: the
     * saved input, the incoming and the outgoing gradient) */
    int64_t io = job.first > 0 ? m->layers[job.first - 1].out_bytes : 0;
    for (int l = job.first; l <= job.last; l++)
        io = max64(io, m->layers[l].out_bytes);
    if (job.kind == RP_JOB_FWD)
        bytes += rp_cost_max_act_bytes(m, job.first, job.last) + 2 * io;
    else
        bytes += job_saved_bytes(m, p, &job) + 3 * io;
    return bytes + job_scratch_bytes(m, &job) + workspace +
           rp_schedule_kept_pool_bytes(m, p, gpus, microbatches);
}

int64_t rp_schedule_peak_parts(const rp_cost_model *m, const rp_plan *p, int gpus,
                               int microbatches, int64_t workspace, rp_peak_parts *parts)
{
    /* the executor allocates once for all its jobs (engine/executor.c):
     * two weight buffers of the largest stage, a scratch that holds any
     * job's gradients and own workspace (the largest job's sum, not the
     * largest gradients plus the largest workspace: a job uses it alone),
     * what the largest tail or backward stage keeps for its backward (at
     * least one layer's), a buffer per layer of the longest stage plus two
     * for its input and the gradient flowing down, the workspace every
     * job shares, and the pool of kept activations on executors that keep
     * them */
    rp_peak_parts q = {0};
    int64_t keep = 0, slot = 0, job_peak = -1;
    int keep_job = -1;
    q.layers = 1;
    q.weights_job = q.scratch_job = q.saved_job = q.saved_layer = q.io_layer = -1;
    for (int l = 0; l < m->num_layers; l++) {
        if (m->layers[l].act_bytes > slot) {
            slot = m->layers[l].act_bytes;
            q.saved_layer = l;
        }
        if (m->layers[l].out_bytes > q.out) {
            q.out = m->layers[l].out_bytes;
            q.io_layer = l;
        }
    }
    for (int j = 0; j < rp_schedule_num_jobs(p); j++) {
        rp_job job = rp_schedule_job(p, j);
        int64_t w = rp_cost_weight_bytes(m, job.first, job.last);
        if (w > q.weights) {
            q.weights = w;
            q.weights_job = j;
        }
        int64_t sc = job_scratch_bytes(m, &job);
        if (sc > q.scratch) {
            q.scratch = sc;
            q.scratch_job = j;
            q.scratch_workspace = job_workspace_bytes(m, &job);
        }
        if (job.kind != RP_JOB_FWD) {
            int64_t k = job_saved_bytes(m, p, &job);
            if (k > keep) {
                keep = k;
                keep_job = j;
            }
        }
        if (job.last - job.first + 1 > q.layers)
            q.layers = job.last - job.first + 1;
        int64_t b = rp_schedule_job_bytes(m, p, gpus, microbatches, j, workspace);
        if (b > job_peak) {
            job_peak = b;
            q.worst_job = j;
        }
    }
    if (q.layers > m->num_layers - 1)
        q.layers = m->num_layers - 1 > 0 ? m->num_layers - 1 : 1;
    /* a backward stage's sum, or one layer's slot when that is larger */
    q.saved = max64(keep, slot);
    if (keep >= slot)
        q.saved_job = keep_job;
    q.workspace = workspace;
    q.kept_pool = rp_schedule_kept_pool_bytes(m, p, gpus, microbatches);
    q.weight_buffers = m->single_weight_buffer ? 1 : 2;
    q.total = q.weight_buffers * q.weights + q.scratch + q.saved +
              (int64_t)(q.layers + 2) * q.out + workspace + q.kept_pool;
    if (parts)
        *parts = q;
    return q.total;
}

int64_t rp_schedule_peak_bytes(const rp_cost_model *m, const rp_plan *p, int gpus,
                               int microbatches, int64_t workspace, int *worst)
{
    rp_peak_parts q;
    int64_t total = rp_schedule_peak_parts(m, p, gpus, microbatches, workspace, &q);
    if (worst)
        *worst = q.worst_job;
    return total;
}
