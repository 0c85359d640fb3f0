/* Timeline of a run as Chrome trace JSON (opens in Perfetto and
 * chrome://tracing): one process per rank, one track per activity. Spans are
 * recorded in memory by any thread and gathered to rank 0 at the end. Spans
 * of one activity that overlap in time (the waits of several optimizer
 * threads) are written on extra tracks of that activity ("waits (optimizer)
 * #2", ...), so no track holds overlapping slices, which viewers drop. */
#ifndef RP_IO_TRACE_H
#define RP_IO_TRACE_H

#include <mpi.h>
#include <stdint.h>

#include "core/error.h"

typedef enum rp_trace_track {
    RP_TRACK_COMPUTE = 0,
    RP_TRACK_XFER_INPUT, RP_TRACK_XFER_WEIGHTS, RP_TRACK_XFER_PREFETCH, RP_TRACK_XFER_SAVE,
    RP_TRACK_XFER_GRAD,
    RP_TRACK_OPTIMIZER,
    RP_TRACK_WAIT,          /* the executor waiting for an event */
    RP_TRACK_OPTIMIZER_WAIT,
    RP_TRACK_STEP,          /* rank 0: one span per optimizer step, "step N" */
    RP_TRACK_CHECKPOINT,    /* rank 0: the checkpoint writer, a span per layer written */
    RP_TRACK_DEVICE,        /* the device's time of each layer call (engine/layer_clock.c) */
    RP_TRACK_COUNT
} rp_trace_track;

typedef struct rp_trace rp_trace;

/* A recorder; NULL trace pointers are valid everywhere and record nothing. */
rp_status rp_trace_create(rp_trace **out, rp_error *err);
void rp_trace_destroy(rp_trace **tr);

/* Nanoseconds on CLOCK_MONOTONIC (shared by the processes of a node). */
uint64_t rp_trace_now_ns(void);

/* Record a span [t0, t1) on a track (thread-safe). */
void rp_trace_span(rp_trace *tr, rp_trace_track track, const char *name, uint64_t t0_ns,
                   uint64_t t1_ns);

/* Collective over comm: gather every rank's spans and write `path` on rank 0
 * (temporary file + rename). Times are relative to the earliest span. */
rp_status rp_trace_write(rp_trace *tr, MPI_Comm comm, const char *path, rp_error *err);

#endif
