/* Helper for test_event_deadlock_exit.sh: a two-stage "pipeline" whose
 * producer (rank 0) signals iteration 1 of fwd_out[stage 0, microbatch 0]
 * and then stops; every rank waits for iteration 2 with the deadline given
 * in argv[1] seconds. Like the roundpipe command it reports the wait's one
 * message on stderr and exits 1. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/event.h"
#include "store/store.h"

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    double timeout = argc > 1 ? atof(argv[1]) : 1.0;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    rp_event_dims d = {{0}, {0}};
    d.count[RP_EV_FWD_OUT] = 1;
    d.micro[RP_EV_FWD_OUT] = 1;
    rp_error err = {0};
    rp_store_layout *l = NULL;
    rp_store *st = NULL;
    rp_events *ev = NULL;
    size_t off = 0;
    rp_status s = rp_store_layout_create(&l, &err);
    if (s == RP_OK)
        s = rp_store_layout_add(l, "events", rp_events_bytes(&d), RP_STORE_ALIGN_LINE, &off, &err);
    if (s == RP_OK)
        s = rp_store_create(MPI_COMM_WORLD, l, NULL, &st, &err);
    if (s == RP_OK)
        s = rp_events_create(rp_store_at(st, off, rp_events_bytes(&d)), rp_events_bytes(&d), &d, rank,
                             &ev, &err);
    rp_event_name e = {RP_EV_FWD_OUT, 0, 0};
    if (s == RP_OK) {
        if (rank == 0)
            rp_event_signal(ev, e, 1);
        s = rp_event_wait(ev, e, 2, rp_event_deadline(timeout), "F1 (iteration 2)", &err);
    }
    if (s != RP_OK)
        fprintf(stderr, "roundpipe: %s\n", err.msg);
    rp_events_destroy(&ev);
    rp_store_destroy(&st);
    rp_store_layout_destroy(&l);
    MPI_Finalize();
    return s == RP_OK ? 0 : 1;
}
