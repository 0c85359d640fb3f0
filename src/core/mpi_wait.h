/* Waiting for a non-blocking MPI exchange at most a given time: polling
 * MPI_Test every millisecond on the monotonic clock (core/clock.h), so a
 * peer that stopped answering (SIGSTOP, a hung driver call) cannot hold
 * the caller. Used by the run's bounded agreements (engine/agree.c) and
 * the host store's creation while a run goes on (store/store.c).
 * Header-only. */
#ifndef RP_CORE_MPI_WAIT_H
#define RP_CORE_MPI_WAIT_H

#include <mpi.h>
#include <stdint.h>
#include <time.h>

#include "core/clock.h"

/* 1 when req completed within `seconds` (> 0), else 0 (req left pending);
 * seconds <= 0: as long as it takes (MPI_Wait; 1 unless MPI failed). */
static inline int rp_mpi_wait_within(MPI_Request *req, double seconds)
{
    if (seconds <= 0)
        return MPI_Wait(req, MPI_STATUS_IGNORE) == MPI_SUCCESS;
    const int64_t deadline = rp_clock_ns() + (int64_t)(seconds * 1e9);
    const struct timespec pause = {0, 1000000};
    int done = 0;
    while (MPI_Test(req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done &&
           rp_clock_ns() < deadline)
        nanosleep(&pause, NULL);
    return done;
}

#endif
