#include "config.h"

#include "engine/trainer.h"

#include <stdint.h>
#include <stdlib.h>

#include "core/unproven.h"
#include "engine/checkpoints.h"
#include "engine/node_sums.h"
#include "engine/run_impl.h"
#include "model/layers.h"

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

/* The compute dtype follows the device: CUDA executors compute in bf16
 * only, so --dtype fp32 there is refused, never silently changed (for
 * --device cuda already by rp_train_options_check; here when --device auto
 * chose CUDA); CPU executors compute in --dtype (default fp32). */
static rp_status check_dtype(const rp_train_options *o, rp_device_kind kind, rp_dtype *dtype,
                             rp_error *err)
{
    if (kind != RP_DEVICE_CUDA) {
        *dtype = o->dtype_set ? o->dtype : RP_F32;
        return RP_OK;
    }
    if (o->dtype_set && o->dtype != RP_BF16)
        return rp_train_options_refuse_dtype(o, RP_ERR_UNSUPPORTED, err);
    *dtype = RP_BF16;
    return RP_OK;
}

/* Every rank must have resolved the same device: failures and a mixed
 * outcome of --device auto (a GPU on some nodes only) end the run on every
 * rank before the collective engine starts. */
static rp_status agree_device(rp_status s, rp_device_kind kind, MPI_Comm comm, rp_error *err)
{
    int rank, mine[3], all[3];
    MPI_Comm_rank(comm, &rank);
    mine[0] = s == RP_OK ? -1 : rank; /* MAX: a rank that failed */
    mine[1] = s == RP_OK ? (int)kind : 0;
    mine[2] = s == RP_OK ? -(int)kind : -(int)RP_DEVICE_CUDA;
    MPI_Allreduce(mine, all, 3, MPI_INT, MPI_MAX, comm);
    if (all[0] >= 0) {
        int code = (int)s;
        MPI_Bcast(&code, 1, MPI_INT, all[0], comm);
        if (s == RP_OK)
            rp_error_echo(err, (rp_status)code, "rank %d failed (see its message)", all[0]);
        return (rp_status)code;
    }
    if (all[1] != -all[2])
        return rp_error_set(err, RP_ERR_UNSUPPORTED,
                            "--device auto: some ranks found a usable GPU and some did not "
                            "(this rank: %s); choose --device cpu or cuda",
                            rp_device_kind_name(kind));
    return RP_OK;
}

/* The environment's switches that lay out a block's buffers and choose its
 * kernels (the CUDA paths RP_ALLOW_UNPROVEN_CUDA and RP_DISABLE_CUDA_PATHS
 * leave on, RP_TEST_FUSED_GATE_UP) are read
 * on each rank, and what one rank's forward job saves another rank's
 * backward job reads: every rank must read the same, or a rank would read
 * another's buffers in a layout it does not use. mpirun passes a variable
 * to the ranks of other nodes only when told (-x NAME). */
static rp_status agree_switches(MPI_Comm comm, rp_error *err)
{
    const char *allow = getenv("RP_ALLOW_UNPROVEN_CUDA"), *off = getenv("RP_DISABLE_CUDA_PATHS"),
               *fused = getenv("RP_TEST_FUSED_GATE_UP");
    rp_error ignored = {0};
    /* a switch that does not parse: all ones, which no mask is (then the
     * option check stops every rank alike) */
    uint64_t mine = rp_unproven_check(&ignored) == RP_OK ? rp_unproven_mask() : UINT32_MAX;
    mine = mine << 1 | (uint64_t)rp_block_test_fused_gate_up();
    /* the most of mine and of ~mine (the least's complement), in one call */
    uint64_t both[2] = {mine, ~mine}, all[2];
    MPI_Allreduce(both, all, 2, MPI_UINT64_T, MPI_MAX, comm);
    if (all[0] == ~all[1])
        return RP_OK;
    return rp_error_set(err, RP_ERR_INVALID_ARG,
                        "RP_ALLOW_UNPROVEN_CUDA, RP_DISABLE_CUDA_PATHS or RP_TEST_FUSED_GATE_UP "
                        "is not the same on every rank (this rank: RP_ALLOW_UNPROVEN_CUDA=%s, "
                        "RP_DISABLE_CUDA_PATHS=%s, RP_TEST_FUSED_GATE_UP=%s): they lay out each "
                        "block's buffers, which jobs on other ranks read; set them alike on every "
                        "rank (mpirun -x NAME)",
                        allow ? allow : "(unset)", off ? off : "(unset)",
                        fused ? fused : "(unset)");
}

rp_status rp_train_resolve(const rp_train_options *o, MPI_Comm comm, const rp_logger *lg,
                           rp_train_options *resolved, rp_error *err)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    RP_TRY(agree_switches(comm, err));
    /* option checks are the same on every rank: no agreement needed */
    RP_TRY(rp_train_options_check(o, err));
    rp_device_kind kind = RP_DEVICE_CPU;
    *resolved = *o;
    rp_status s = check_device(o, lg, rank, &kind, err);
    if (s == RP_OK)
        s = check_dtype(o, kind, &resolved->dtype, err);
    RP_TRY(agree_device(s, kind, comm, err));
    resolved->device = kind;
    /* the residual stream in the dtype the device computes in by default
     * (CUDA: bf16), fp32 on the CPU (its golden contract) */
    if (!o->activation_dtype_set)
        resolved->activation_dtype = kind == RP_DEVICE_CUDA ? RP_BF16 : RP_F32;
    return RP_OK;
}

rp_status rp_train_run(const rp_train_options *given, MPI_Comm comm, const rp_logger *lg,
                       rp_error *err)
{
    rp_train_options resolved;
    RP_TRY(rp_train_resolve(given, comm, lg, &resolved, err));
    rp_nodes nd;
    RP_TRY(rp_nodes_split(comm, resolved.ranks_per_node, &nd, err));
    resolved.nodes = nd.nodes;
    rp_checkpoint_lock *lock = NULL; /* held for the run: before --resume auto reads it */
    rp_resume resume;
    rp_status rs = rp_checkpoint_dir_lock(&resolved, comm, &lock, err);
    if (rs == RP_OK)
        rs = rp_checkpoint_resolve(&resolved, comm, lg, &resume, err);
    if (rs != RP_OK) {
        rp_checkpoint_lock_release(&lock);
        rp_nodes_free(&nd);
        return rs;
    }
    const rp_train_options *o = &resolved;
    rp_engine E, *e = &E;
    rp_run_state R, *r = &R;
    rp_run_init(e, r, o, &resume, &nd, lg);
    rp_status s = rp_run_set_up(e, r, comm, err);
    if (s == RP_OK)
        s = rp_run_outputs_start(e, r, comm, err);
    if (s == RP_OK) {
        s = rp_run_steps(e, comm, err);
        if (s == RP_OK && (o->ranks_per_node > 0 || e->nd.nodes > 1))
            rp_node_report(e, comm, (e->stopped_early ? e->it_last : e->steps) - e->resume_step);
        s = rp_run_outputs_write(e, r, s, comm, err);
    }
    rp_run_tear_down(e, r);
    rp_checkpoint_lock_release(&lock);
    return s;
}
