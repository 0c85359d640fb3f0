/* Making a status collective (run_impl.h): used by the run's set-up, its
 * plan, its checkpoints and its outputs, so it is a file of its own, below
 * them all. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mpi_wait.h"
#include "engine/run_impl.h"

rp_status rp_run_wait_peers(rp_engine *e, MPI_Request *req, const char *what, rp_error *err)
{
    if (rp_mpi_wait_within(req, e->o->timeout_s))
        return RP_OK;
    e->peer_lost = 1;
    return rp_error_set(err, RP_ERR_PEER_LOST, "rank %d, %s: other ranks did not answer within "
                        "--timeout %g s: ending the job", e->nd.world_rank, what,
                        e->o->timeout_s);
}

/* Make a status collective: every rank learns whether any rank failed. A
 * failing rank keeps its message and its own status (the word the CLI
 * prints beside the message); the others name the lowest failing rank and
 * return its status.
 * A rank that failed (a deadline passed, a file was bad) waits at most
 * --timeout for the others to join the agreement, so a rank that stopped
 * answering (SIGSTOP, stuck in a driver) cannot hang the job: the status
 * becomes RP_ERR_PEER_LOST, and no collective may be called on comm after
 * that (the CLI ends the job with MPI_Abort). A pending interrupt
 * (rp_interrupt) counts as a failure, so a start-up stops at the next
 * agreement. Every rank uses the non-blocking reduction: blocking and
 * non-blocking collectives do not match each other.
 * A rank that did not fail waits for the others as long as they take
 * (the node leader may be loading or writing a model meanwhile), except in
 * rp_run_agree_within, for the exchanges every rank reaches within about
 * an iteration of the others (the re-plan after the first steps): there
 * it too waits at most --timeout, so a rank stopped just before such an
 * exchange ends the job instead of hanging it. */
static rp_status agree(rp_engine *e, rp_status s, MPI_Comm comm, const char *bounded,
                       rp_error *err)
{
    if (e->peer_lost)
        return RP_ERR_PEER_LOST;
    if (s == RP_OK && rp_interrupted())
        s = rp_error_set(err, RP_ERR_INTERRUPTED, "interrupted before step %lld",
                         (long long)(e->it_first > 0 ? e->it_first : 1));
    int mine = s == RP_OK ? INT32_MAX : e->nd.world_rank, first = INT32_MAX;
    MPI_Request req;
    MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm, &req);
    if (s == RP_OK && bounded) {
        RP_TRY(rp_run_wait_peers(e, &req, bounded, err));
    } else if (s == RP_OK) {
        MPI_Wait(&req, MPI_STATUS_IGNORE);
    } else if (!rp_mpi_wait_within(&req, e->o->timeout_s)) {
        e->peer_lost = 1;
        char own[RP_ERROR_MSG_MAX];
        snprintf(own, sizeof own, "%s", err->msg);
        return rp_error_set(err, RP_ERR_PEER_LOST, "%.900s; then other ranks did not answer "
                            "within --timeout %g s: ending the job", own, e->o->timeout_s);
    }
    if (first == INT32_MAX)
        return RP_OK;
    int code = (int)s;
    MPI_Bcast(&code, 1, MPI_INT, first, comm);
    if (s != RP_OK)
        return s;
    return rp_error_echo(err, (rp_status)code, "rank %d failed (see its message)", first);
}

rp_status rp_run_agree(rp_engine *e, rp_status s, MPI_Comm comm, rp_error *err)
{
    return agree(e, s, comm, NULL, err);
}

rp_status rp_run_agree_within(rp_engine *e, rp_status s, MPI_Comm comm, const char *what,
                              rp_error *err)
{
    return agree(e, s, comm, what, err);
}

void rp_fault_stall(const char *where, int world_rank)
{
    const char *f = getenv("RP_FAULT_STALL");
    char want[64];
    snprintf(want, sizeof want, "%s:%d", where, world_rank);
    if (f && strcmp(f, want) == 0)
        raise(SIGSTOP); /* as a rank stopped from outside (SIGSTOP, a hung driver call) */
}
