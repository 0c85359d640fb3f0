#include "config.h"

#include "engine/trainer.h"

#include "engine/pipeline.h"

/* Resolve --device: cpu, or cuda when this build has the CUDA executor and
 * a device is usable (auto falls back to the CPU). */
static rp_status check_device(const rp_train_options *o, const rp_logger *lg, int rank,
                              rp_device_kind *kind, rp_error *err)
{
    *kind = RP_DEVICE_CPU;
    if (o->device == RP_DEVICE_CPU)
        return RP_OK;
    rp_device_info info;
    rp_error probe = {0};
    rp_status s = rp_device_probe(RP_DEVICE_CUDA, &info, &probe);
#ifdef RP_HAVE_CUDA_EXECUTOR
    if (s == RP_OK) {
        *kind = RP_DEVICE_CUDA;
        return RP_OK;
    }
    if (o->device == RP_DEVICE_AUTO) {
        if (rank == 0)
            rp_log(lg, RP_LOG_INFO, "--device auto: %s; training on the CPU", probe.msg);
        return RP_OK;
    }
    return rp_error_set(err, s, "--device cuda: %s", probe.msg);
#else
    (void)s, (void)lg, (void)rank;
    if (o->device == RP_DEVICE_AUTO)
        return RP_OK;
    return rp_error_set(err, RP_ERR_UNSUPPORTED,
                        "--device cuda: this roundpipe was built without the CUDA executor "
                        "(configure --with-cuda); use --device cpu");
#endif
}

rp_status rp_train_run(const rp_train_options *o, MPI_Comm comm, const rp_logger *lg,
                       rp_error *err)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    /* option and device checks are the same on every rank: no agreement needed */
    RP_TRY(rp_train_options_check(o, err));
    rp_device_kind kind;
    RP_TRY(check_device(o, lg, rank, &kind, err));
    return rp_pipeline_train(o, kind, comm, lg, err);
}
