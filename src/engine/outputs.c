/* The run's output files: checked before any work, and the metrics log's
 * write errors, which must not go unnoticed (a full disk, /dev/full). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "engine/engine_impl.h"
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
