#include "engine/trainer.h"

#include "engine/pipeline.h"

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
    int rank;
    MPI_Comm_rank(comm, &rank);
    /* option and device checks are the same on every rank: no agreement needed */
    RP_TRY(rp_train_options_check(o, err));
    RP_TRY(check_device(o, lg, rank, err));
    return rp_pipeline_train(o, comm, lg, err);
}
