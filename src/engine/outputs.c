/* The run's output files: checked before any work; the metrics log's write
 * errors, which must not go unnoticed (a full disk, /dev/full); the outputs
 * started before the steps (the log, the trace, the start-up line, the
 * progress display) and written after them (the model, the adapters, the
 * trace). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "engine/engine_impl.h"
#include "engine/checkpoints.h"
#include "engine/host_memory.h"
#include "engine/lora_run.h"
#include "engine/node_sums.h"
#include "engine/run_impl.h"
#include "engine/run_info.h"
#include "io/metrics.h"
#include "io/output_path.h"

rp_status rp_engine_outputs_check(const rp_train_options *o, rp_error *err)
{
    if (o->save_dir)
        RP_TRY(rp_output_dir_check("--save", o->save_dir, err));
    if (o->log_path)
        RP_TRY(rp_output_file_check("--log", o->log_path, err));
    if (o->trace)
        RP_TRY(rp_output_file_check("--trace", o->trace, err));
    if (o->save_merged)
        RP_TRY(rp_output_dir_check("--save-merged", o->save_merged, err));
    return RP_OK;
}

void rp_engine_log_written(rp_engine *e, int64_t step)
{
    if (!e->by_logger.log || e->by_logger.log_errno)
        return;
    errno = 0;
    if (fflush(e->by_logger.log) == 0 && !ferror(e->by_logger.log))
        return;
    e->by_logger.log_errno = errno ? errno : EIO;
    e->by_logger.log_failed_step = step;
    rp_log(e->lg, RP_LOG_ERROR, "--log %s: write failed at step %lld: %s; metrics from this step "
           "on are lost, training goes on (the model is still saved) and the run will end with "
           "an error", e->o->log_path, (long long)step, strerror(e->by_logger.log_errno));
}

rp_status rp_engine_log_close(rp_engine *e, rp_error *err)
{
    if (!e->by_logger.log)
        return RP_OK;
    errno = 0;
    int closed = fclose(e->by_logger.log) == 0;
    e->by_logger.log = NULL;
    if (!e->by_logger.log_errno && !closed)
        e->by_logger.log_errno = errno ? errno : EIO, e->by_logger.log_failed_step = e->steps;
    if (!e->by_logger.log_errno)
        return RP_OK;
    return rp_error_set(err, RP_ERR_IO, "--log %s: write failed at step %lld: %s (the log is "
                        "incomplete)", e->o->log_path, (long long)e->by_logger.log_failed_step,
                        strerror(e->by_logger.log_errno));
}

/* Outputs are written independently: the first failure becomes the run's
 * error, a later one is reported through the logger. */
static void keep_first(rp_engine *e, rp_status s, const rp_error *one, rp_status *out,
                       rp_error *err)
{
    if (s == RP_OK)
        return;
    if (*out == RP_OK) {
        *out = s;
        *err = *one;
    } else {
        rp_log(e->lg, RP_LOG_ERROR, "%s", one->msg);
    }
}

/* The host memory the run needs, as `roundpipe plan` prints it
 * (host_memory.h): the store and, with LoRA, where the frozen base lies. */
static void log_host_memory(rp_engine *e, const rp_model_config *cfg)
{
    rp_host_memory hm;
    rp_error err = {0};
    char text[512];
    if (rp_host_memory_count(cfg, e->o->dtype, e->pipelines, (int)e->microbatches,
                             e->tokens_per_micro, &e->plan, e->o->recompute == RP_RECOMPUTE_LAYER,
                             e->o->activation_dtype, e->kept_floats,
                             rp_kept_on_executor(e->device), e->base, &hm,
                             &err) != RP_OK) {
        rp_log(e->lg, RP_LOG_WARN, "host memory not counted: %s", err.msg);
        return;
    }
    hm.speculative_backup = e->speculative ? e->spec_backup_node_bytes : 0;
    rp_host_memory_format(&hm, text, sizeof text);
    rp_log(e->lg, RP_LOG_INFO, "%s", text);
}

/* The metrics log and its run description, the trace, the start-up line
 * and the progress display. */
rp_status rp_run_outputs_start(rp_engine *e, rp_run_state *r, MPI_Comm comm, rp_error *err)
{
    const rp_train_options *o = e->o;
    rp_status s = RP_OK;
    char plan_text[512];
    rp_plan_format(&e->plan, plan_text, sizeof plan_text);
    int root = e->nd.world_rank == 0;
    if (root && !o->save_dir && !o->checkpoint_dir)
        rp_log(e->lg, RP_LOG_INFO, "neither --save nor --checkpoint-dir given: nothing this run "
               "learns will be kept");
    /* a resumed run keeps the log's lines of the steps before it */
    char *kept = NULL;
    int64_t kept_steps = 0;
    if (root && o->log_path && e->resume_step > 0)
        s = rp_metrics_keep_steps(o->log_path, e->resume_step, &kept, &kept_steps, err);
    if (s == RP_OK && root && o->log_path && !(e->by_logger.log = fopen(o->log_path, "w")))
        s = rp_error_set(err, RP_ERR_IO, "--log %s: cannot open for writing: %s", o->log_path,
                         strerror(errno));
    if (s == RP_OK && e->by_logger.log && kept && kept[0]) {
        fputs(kept, e->by_logger.log);
        rp_log(e->lg, RP_LOG_INFO, "--log %s: kept the lines of steps 1-%lld, the resumed steps "
               "follow", o->log_path, (long long)kept_steps);
    }
    free(kept);
    if (s == RP_OK && e->by_logger.log) { /* the run's description beside the metrics */
        rp_run_info info = {.o = o,
                            .device = rp_device_kind_name(e->device),
                            .ranks = e->nd.world_size,
                            .nodes = e->nd.nodes,
                            .threads_per_rank = e->threads,
                            .layers = e->num_layers,
                            .parameters = r->shared->total_numel,
                            .plan = plan_text,
                            .deal = e->deal,
                            .executors = e->size,
                            .start_time = rp_wall_clock()};
        s = rp_run_info_write(&info, o->log_path, err);
    }
    if (s == RP_OK && o->trace)
        s = rp_trace_create(&e->trace, err);
    RP_TRY(rp_run_agree(e, s, comm, err));
    if (!root)
        return RP_OK;
    const rp_logger *lg = e->lg;
    rp_log(lg, RP_LOG_INFO,
           "%s: %lld blocks, %.2fM parameters; %lld samples of %lld tokens; %lld steps of "
           "%lld samples in %lld microbatches; %d executor(s) x %d thread(s); %d pipeline(s) "
           "of %lld microbatches; plan %s; executors: %s",
           o->model_dir ? o->model_dir : o->init_config, (long long)r->cfg.num_hidden_layers,
           (double)r->shared->total_numel / 1e6, (long long)rp_dataset_samples(e->ds),
           (long long)e->seq_len, (long long)e->steps, (long long)o->batch_size,
           (long long)e->batch_micro, e->size, e->threads, e->pipelines,
           (long long)e->micro_per_pipeline, plan_text, r->executors);
    log_host_memory(e, &r->cfg);
    if (e->nd.nodes > 1)
        rp_log(lg, RP_LOG_INFO, "%d nodes of %d ranks: node n runs microbatches n x %lld .. of "
               "each step, %d pipelines in all; gradients summed across nodes in pipeline order",
               e->nd.nodes, e->size, (long long)e->microbatches, e->nd.nodes * e->pipelines);
    /* A live line goes to standard output (a terminal, also under
     * mpirun), periodic lines to standard error. While the line is
     * live, rank 0's messages go through it so they never share a line. */
    int live = o->progress == RP_PROGRESS_AUTO && lg->stream && rp_progress_live_default();
    FILE *out = o->progress == RP_PROGRESS_NONE ? NULL : live ? stdout : stderr;
    rp_progress_start(&e->progress, out, live, o->progress_interval_s, e->resume_step, e->steps);
    if (live) {
        r->live_lg = *lg;
        r->live_lg.sink = rp_progress_log_sink;
        r->live_lg.sink_arg = &e->progress;
        e->lg = &r->live_lg;
    }
    return RP_OK;
}

/* The outputs, the model first: a failure writing one never prevents the
 * others. The first failure is returned, later ones are logged. */
rp_status rp_run_outputs_write(rp_engine *e, rp_run_state *r, rp_status trained, MPI_Comm comm,
                               rp_error *err)
{
    const rp_train_options *o = e->o;
    rp_status out = RP_OK;
    int root = e->nd.world_rank == 0; /* every node holds the same model: node 0's */
    const int say = rp_engine_tells_work(e); /* a long save's lines (rank 0 is root) */
    if (trained == RP_OK && o->save_dir && e->stopped_early && root)
        rp_log(e->lg, RP_LOG_INFO, "--save %s not written: the run stopped early (its checkpoint "
               "holds the model)", o->save_dir);
    if (trained == RP_OK && o->save_dir && !e->stopped_early) {
        rp_error one = {0};
        rp_status st = RP_OK;
        /* several nodes keep the masters by slices (unless they are the compute copy) */
        if (e->nd.nodes > 1 && r->shared->compute_dtype != RP_F32)
            st = rp_run_agree(e, rp_node_collect(e, 0, 0, &one), comm, &one);
        if (root && st == RP_OK && e->lora)
            st = rp_lora_save_adapter(r->shared, o, &one);
        else if (root && st == RP_OK) {
            rp_work_lines lines;
            char what[4300];
            snprintf(what, sizeof what, "saving %s/model.safetensors", o->save_dir);
            st = rp_params_save_dir(r->shared, o->save_dir,
                                    o->save_dtype_set ? o->save_dtype : r->shared->loaded_dtype,
                                    e->model_config_text, e->companions,
                                    rp_work_lines_start(&lines, e->lg, say, what), &one);
        }
        st = rp_run_agree(e, st, comm, &one);
        if (st == RP_OK && root)
            rp_log(e->lg, RP_LOG_INFO, "saved %s/%s%s", o->save_dir,
                   e->lora ? "adapter_model.safetensors (PEFT)" : "model.safetensors",
                   !e->lora && rp_companions_count(e->companions)
                       ? " with the model's tokenizer and generation files" : "");
        keep_first(e, st, &one, &out, err);
    }
    if (trained == RP_OK && o->save_merged && !e->stopped_early) {
        rp_error one = {0};
        rp_status st = RP_OK;
        rp_dtype dt = o->save_dtype_set ? o->save_dtype : rp_frozen_base_file_dtype(e->base);
        if (root) {
            rp_work_lines lines;
            char what[4300];
            snprintf(what, sizeof what, "saving %s/model.safetensors", o->save_merged);
            st = rp_lora_save_merged(r->shared, e->base, o, dt, e->model_config_text,
                                     e->companions, rp_work_lines_start(&lines, e->lg, say, what),
                                     &one);
        }
        st = rp_run_agree(e, st, comm, &one);
        if (st == RP_OK && root)
            rp_log(e->lg, RP_LOG_INFO, "saved the merged model to %s/model.safetensors",
                   o->save_merged);
        keep_first(e, st, &one, &out, err);
    }
    if (trained == RP_OK && o->trace && !e->peer_lost) {
        rp_error one = {0};
        rp_status st = rp_run_agree(e, rp_trace_write(e->trace, comm, o->trace, &one), comm, &one);
        if (st == RP_OK && root)
            rp_log(e->lg, RP_LOG_INFO, "trace written to %s", o->trace);
        keep_first(e, st, &one, &out, err);
    }
    if (trained == RP_OK && o->checkpoint_dir) { /* one not written, said when it failed */
        rp_error one = {0};
        rp_status st = rp_run_agree(e, rp_checkpoint_failures(e, &one), comm, &one);
        keep_first(e, st, &one, &out, err);
    }
    {
        rp_error one = {0};
        rp_status st = e->by_logger.log ? rp_engine_log_close(e, &one) : RP_OK;
        /* agreed after a training that succeeded, as the outputs above: the
         * ranks without the log learn that it failed now, not when the
         * CLI's report gives up waiting for them */
        if (trained == RP_OK)
            st = rp_run_agree(e, st, comm, &one);
        keep_first(e, st, &one, &out, err);
    }
    return trained == RP_OK ? out : trained;
}
