#include "engine/trainer.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/dataset.h"
#include "engine/params.h"
#include "engine/progress.h"
#include "engine/step.h"
#include "io/config.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/lr.h"

/* Make a status collective: every rank learns whether any rank failed. The
 * failing rank keeps its message; the others name the lowest failing rank. */
static rp_status agree(rp_status s, MPI_Comm comm, rp_error *err)
{
    int rank, mine = s == RP_OK ? INT32_MAX : 0, first;
    MPI_Comm_rank(comm, &rank);
    if (s != RP_OK)
        mine = rank;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
    if (first == INT32_MAX)
        return RP_OK;
    int code = (int)s;
    MPI_Bcast(&code, 1, MPI_INT, first, comm);
    if (s == RP_OK)
        rp_error_set(err, (rp_status)code, "rank %d failed (see its message)", first);
    return (rp_status)code;
}

/* Threads per rank: --threads, else OMP_NUM_THREADS, else the node's cores
 * shared evenly among the ranks on the node. */
static int choose_threads(const rp_train_options *o, MPI_Comm comm)
{
    if (o->threads > 0)
        return o->threads;
    const char *env = getenv("OMP_NUM_THREADS");
    if (env && atoi(env) > 0)
        return atoi(env);
    MPI_Comm node;
    int local = 1;
    MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &local);
    MPI_Comm_free(&node);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int t = (int)(cores / local);
    return t > 0 ? t : 1;
}

static rp_status load_model(const rp_train_options *o, rp_params **pp, rp_error *err)
{
    rp_model_config cfg;
    char path[4096];
    if (o->model_dir) {
        snprintf(path, sizeof path, "%s/config.json", o->model_dir);
        RP_TRY(rp_config_load(path, &cfg, err));
    } else {
        RP_TRY(rp_config_load(o->init_config, &cfg, err));
    }
    RP_TRY(rp_params_create(&cfg, o->dtype, pp, err));
    if (o->model_dir)
        return rp_params_load_dir(*pp, o->model_dir, err);
    rp_params_init_random(*pp, o->seed);
    return RP_OK;
}

typedef struct step_io {
    int32_t *inputs, *targets;
    uint8_t *mask;
} step_io;

/* Run this rank's microbatches of step k; returns the local loss sum. */
static rp_status run_step(const rp_train_options *o, rp_params *p, rp_step_buffers *buf,
                          const rp_dataset *ds, step_io *io, int64_t k, int64_t M, int rank,
                          int size, float scale, double *loss_sum, rp_error *err)
{
    int64_t B = o->batch_size, S = o->seq_len, per = B / M;
    *loss_sum = 0.0;
    for (int64_t m = rank; m < M; m += size) {
        for (int64_t j = 0; j < per; j++) {
            int64_t sample = rp_dataset_sample_of(ds, k, B, m * per + j);
            rp_dataset_fill(ds, sample, io->inputs + j * S, io->targets + j * S, io->mask + j * S);
        }
        double ls = 0.0;
        RP_TRY(rp_step_microbatch(p, buf, io->inputs, io->targets, io->mask, scale, &ls, err));
        *loss_sum += ls;
    }
    return RP_OK;
}

/* Counted targets of the whole step (every rank computes it: it is cheap and
 * is needed before the first microbatch to scale the loss). */
static int64_t step_counted(const rp_train_options *o, const rp_dataset *ds, step_io *io, int64_t k)
{
    int64_t n = 0, S = o->seq_len;
    for (int64_t j = 0; j < o->batch_size; j++)
        n += rp_dataset_fill(ds, rp_dataset_sample_of(ds, k, o->batch_size, j), io->inputs,
                             io->targets, io->mask);
    (void)S;
    return n;
}

static void allreduce_grads(rp_params *p, MPI_Comm comm)
{
    for (int l = 0; l < p->nlayers; l++) {
        size_t n = p->layers[l].numel;
        float *g = p->st[l].grad;
        /* MPI counts are int: reduce in slices. */
        for (size_t off = 0; off < n; off += (size_t)1 << 28) {
            size_t c = n - off < ((size_t)1 << 28) ? n - off : ((size_t)1 << 28);
            MPI_Allreduce(MPI_IN_PLACE, g + off, (int)c, MPI_FLOAT, MPI_SUM, comm);
        }
    }
}

static rp_status update(const rp_train_options *o, rp_params *p, int64_t k, double lr,
                        double *grad_norm, rp_error *err)
{
    double sumsq = 0.0;
    for (int l = 0; l < p->nlayers; l++)
        sumsq += rp_clip_sumsq(p->st[l].grad, p->layers[l].numel);
    float coef = 1.0f;
    RP_TRY(rp_clip_coef(sumsq, o->grad_clip, grad_norm, &coef, err));
    rp_adamw_params hp = {lr, o->beta1, o->beta2, o->eps, o->weight_decay};
    for (int l = 0; l < p->nlayers; l++) {
        rp_layer_state *ls = &p->st[l];
        for (int i = 0; i < ls->desc->nparams; i++) {
            const rp_param_desc *d = &ls->desc->params[i];
            rp_adamw_step(ls->master + d->offset, ls->grad + d->offset, ls->m + d->offset,
                          ls->v + d->offset, d->numel, k, &hp, d->decay, coef, NULL);
        }
        rp_params_sync_compute(p, l);
    }
    return RP_OK;
}

static rp_status check_device(const rp_train_options *o, const rp_logger *lg, int rank,
                              rp_error *err)
{
    if (o->device == RP_DEVICE_CPU)
        return RP_OK;
    rp_device_info info;
    rp_status s = rp_device_probe(RP_DEVICE_CUDA, &info, NULL);
    if (o->device == RP_DEVICE_AUTO) {
        if (rank == 0 && s == RP_OK)
            rp_log(lg, RP_LOG_WARN, "CUDA device found but the CUDA executor is not in this "
                                    "release: training on the CPU");
        return RP_OK;
    }
    return rp_error_set(err, RP_ERR_UNSUPPORTED,
                        "--device cuda: the CUDA executor is not implemented in this release "
                        "(use --device cpu)");
}

rp_status rp_train_run(const rp_train_options *o, MPI_Comm comm, const rp_logger *lg,
                       rp_error *err)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    rp_status s = rp_train_options_check(o, err);
    if (s == RP_OK)
        s = check_device(o, lg, rank, err);
    RP_TRY(agree(s, comm, err));
    omp_set_num_threads(choose_threads(o, comm));

    rp_params *p = NULL;
    rp_dataset *ds = NULL;
    rp_step_buffers *buf = NULL;
    FILE *log = NULL;
    step_io io = {0};
    int64_t B = o->batch_size, S = o->seq_len, M = o->microbatches ? o->microbatches : B;

    s = load_model(o, &p, err);
    if (s == RP_OK)
        s = rp_dataset_open(o->data, o->loss_mask, S, p->cfg.vocab_size, &ds, err);
    if (s == RP_OK)
        s = rp_step_buffers_create(p, B / M, S, &buf, err);
    if (s == RP_OK) {
        io.inputs = malloc((size_t)(B / M * S) * sizeof(int32_t));
        io.targets = malloc((size_t)(B / M * S) * sizeof(int32_t));
        io.mask = malloc((size_t)(B / M * S));
        if (!io.inputs || !io.targets || !io.mask)
            s = rp_error_set(err, RP_ERR_NOMEM, "allocating token buffers");
    }
    if (s == RP_OK && rank == 0 && o->log_path && !(log = fopen(o->log_path, "w")))
        s = rp_error_set(err, RP_ERR_IO, "--log %s: cannot open for writing", o->log_path);
    s = agree(s, comm, err);

    int64_t n = s == RP_OK ? rp_dataset_samples(ds) : 0;
    int64_t steps = o->steps ? o->steps : (n + B - 1) / B;
    rp_lr_schedule sched = {o->schedule, o->lr, o->min_lr, o->warmup_steps, steps};
    if (s == RP_OK)
        s = agree(rp_lr_schedule_check(&sched, err), comm, err);
    if (s == RP_OK && rank == 0)
        rp_log(lg, RP_LOG_INFO,
               "%s: %lld layers, %.2fM parameters; %lld samples of %lld tokens; %lld steps of "
               "%lld samples in %lld microbatches on %d rank(s) x %d thread(s)",
               o->model_dir ? o->model_dir : o->init_config, (long long)p->cfg.num_hidden_layers,
               (double)p->total_numel / 1e6, (long long)n, (long long)S, (long long)steps,
               (long long)B, (long long)M, size, omp_get_max_threads());

    rp_progress pr;
    int live = o->progress == RP_PROGRESS_AUTO && isatty(STDERR_FILENO);
    rp_progress_start(&pr, (rank == 0 && o->progress != RP_PROGRESS_NONE) ? stderr : NULL, live,
                      o->progress_interval_s, steps);
    double last_loss = NAN;
    for (int64_t k = 1; s == RP_OK && k <= steps; k++) {
        double t0 = rp_now();
        int64_t counted = step_counted(o, ds, &io, k);
        double lr = rp_lr_at(&sched, k), loss_sum = 0.0, norm = 0.0;
        if (counted == 0) {
            /* Nothing to learn from: no update, so the step leaves no trace in
             * the optimizer state (torch would divide by zero here). */
            if (rank == 0)
                rp_log(lg, RP_LOG_WARN, "step %lld has no counted target (loss mask is 0 on "
                                        "all its targets): skipped", (long long)k);
            if (log)
                fprintf(log, "{\"step\":%lld,\"loss\":null,\"lr\":%.10g,\"grad_norm\":null,"
                             "\"tokens\":%lld,\"counted_tokens\":0,\"tokens_per_s\":0}\n",
                        (long long)k, lr, (long long)(B * S));
            continue;
        }
        rp_params_zero_grad(p);
        s = run_step(o, p, buf, ds, &io, k, M, rank, size, (float)(1.0 / (double)counted),
                     &loss_sum, err);
        s = agree(s, comm, err);
        if (s != RP_OK)
            break;
        if (size > 1) {
            allreduce_grads(p, comm);
            MPI_Allreduce(MPI_IN_PLACE, &loss_sum, 1, MPI_DOUBLE, MPI_SUM, comm);
        }
        double loss = loss_sum / (double)counted;
        s = update(o, p, k, lr, &norm, err);
        if (s == RP_OK && !isfinite(loss))
            s = rp_error_set(err, RP_ERR_NUMERIC, "step %lld: loss is %g", (long long)k, loss);
        if (s != RP_OK) {
            rp_error_prefix(err, "step %lld", (long long)k);
            break; /* every rank computed the same values: the failure is collective */
        }
        double dt = rp_now() - t0, tps = (double)(B * S) / (dt > 0 ? dt : 1e-9);
        last_loss = loss;
        if (log) {
            fprintf(log, "{\"step\":%lld,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,"
                         "\"tokens\":%lld,\"counted_tokens\":%lld,\"tokens_per_s\":%.1f}\n",
                    (long long)k, loss, lr, norm, (long long)(B * S), (long long)counted, tps);
            fflush(log);
        }
        rp_progress_update(&pr, k, loss, tps);
    }
    if (s == RP_OK)
        rp_progress_finish(&pr, steps, last_loss);
    if (log && fclose(log) != 0 && s == RP_OK)
        s = rp_error_set(err, RP_ERR_IO, "--log %s: write failed", o->log_path);

    if (s == RP_OK && o->save_dir) {
        rp_status ss = RP_OK;
        if (rank == 0)
            ss = rp_params_save_dir(p, o->save_dir, o->save_dtype_set ? o->save_dtype
                                                                      : p->loaded_dtype, err);
        s = agree(ss, comm, err);
        if (s == RP_OK && rank == 0)
            rp_log(lg, RP_LOG_INFO, "saved %s/model.safetensors", o->save_dir);
    }
    free(io.inputs);
    free(io.targets);
    free(io.mask);
    rp_step_buffers_destroy(&buf);
    rp_dataset_close(&ds);
    rp_params_destroy(&p);
    return s;
}
