/* Making a status collective (run_impl.h): used by the run's set-up, its
 * plan, its checkpoints and its outputs, so it is a file of its own, below
 * them all. */
#include <mpi.h>

#include "engine/run_impl.h"

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
 * non-blocking collectives do not match each other. */
rp_status rp_run_agree(rp_engine *e, rp_status s, MPI_Comm comm, rp_error *err)
{
    if (e->peer_lost)
        return RP_ERR_PEER_LOST;
    if (s == RP_OK && rp_interrupted())
        s = rp_error_set(err, RP_ERR_INTERRUPTED, "interrupted before step %lld",
                         (long long)(e->it_first > 0 ? e->it_first : 1));
    int mine = s == RP_OK ? INT32_MAX : e->nd.world_rank, first = INT32_MAX, done = 0;
    MPI_Request req;
    MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm, &req);
    if (s == RP_OK) {
        MPI_Wait(&req, MPI_STATUS_IGNORE);
    } else {
        double deadline = rp_event_deadline(e->o->timeout_s);
        const struct timespec pause = {0, 1000000};
        while (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done &&
               rp_event_now() < deadline)
            nanosleep(&pause, NULL);
        if (!done) {
            e->peer_lost = 1;
            char own[RP_ERROR_MSG_MAX];
            snprintf(own, sizeof own, "%s", err->msg);
            return rp_error_set(err, RP_ERR_PEER_LOST, "%.900s; then other ranks did not answer "
                                "within --timeout %g s: ending the job", own, e->o->timeout_s);
        }
    }
    if (first == INT32_MAX)
        return RP_OK;
    int code = (int)s;
    MPI_Bcast(&code, 1, MPI_INT, first, comm);
    if (s != RP_OK)
        return s;
    return rp_error_echo(err, (rp_status)code, "rank %d failed (see its message)", first);
}
