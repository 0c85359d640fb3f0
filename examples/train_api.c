/* train_api: roundpipe linked into an MPI program. The world's ranks split
 * in two: the first `ranks` of them train a model together through the
 * public API on their own communicator, the others go on with other work.
 * A step callback hands the program each step's metrics (on rank 0 of the
 * training communicator), which it prints.
 *
 *   mpirun -np 3 examples/train_api 2 config.json tokens.npy out-dir [option=value ...]
 *
 * The options after out-dir are set too (rp_train_config_set). MPI is
 * initialised with MPI_Init, which gives this program no thread support:
 * enough for one node, while several nodes need MPI_Init_thread with
 * MPI_THREAD_MULTIPLE (roundpipe(3)).
 */
#include <string.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include <roundpipe.h>

/* What the program keeps of the training: the step callback's notes. */
typedef struct progress_notes {
    long long steps;
    double last_loss;
} progress_notes;

/* Called by roundpipe after every step, on rank 0 of the training ranks. */
static void on_step(const rp_step_metrics *m, void *arg)
{
    progress_notes *notes = arg;
    notes->steps = (long long)m->step;
    notes->last_loss = m->loss;
    printf("train_api: step %lld loss %.9g lr %.9g grad_norm %.9g\n", (long long)m->step,
           m->loss, m->lr, m->grad_norm);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, rc = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc < 5) {
        if (rank == 0)
            fprintf(stderr, "usage: %s RANKS CONFIG.json TOKENS.npy OUT-DIR [OPTION=VALUE ...]\n",
                    argv[0]);
        MPI_Finalize();
        return 2;
    }
    int trainers = atoi(argv[1]);
    MPI_Comm comm;
    MPI_Comm_split(MPI_COMM_WORLD, rank < trainers ? 0 : 1, rank, &comm);
    if (rank < trainers) {
        rp_train_config *tc = NULL;
        rp_status s = rp_train_config_create(&tc);
        const char *opts[][2] = {{"init-config", argv[2]}, {"data", argv[3]},
                                 {"save", argv[4]},        {"seq-len", "16"},
                                 {"batch-size", "4"},      {"microbatches", "2"},
                                 {"steps", "3"},           {"lr", "1e-3"},
                                 {"seed", "5"},            {"progress", "none"}};
        for (size_t i = 0; s == RP_OK && i < sizeof opts / sizeof opts[0]; i++)
            s = rp_train_config_set(tc, opts[i][0], opts[i][1]);
        for (int i = 5; s == RP_OK && i < argc; i++) { /* option=value */
            char *eq = strchr(argv[i], '=');
            if (eq)
                *eq = '\0';
            s = rp_train_config_set(tc, argv[i], eq ? eq + 1 : NULL);
        }
        progress_notes notes = {0, 0.0};
        if (s == RP_OK)
            s = rp_train_config_set_step_callback(tc, on_step, &notes);
        if (s == RP_OK)
            s = rp_train(tc, comm);
        if (s == RP_OK && notes.steps > 0)
            printf("train_api: %lld steps, final loss %.9g\n", notes.steps, notes.last_loss);
        if (s != RP_OK) {
            fprintf(stderr, "rank %d: %s: %s\n", rank, rp_status_string(s),
                    rp_train_config_error(tc));
            rc = 1;
        }
        rp_train_config_destroy(&tc);
    }
    MPI_Comm_free(&comm);
    MPI_Finalize();
    return rc;
}
