/* `roundpipe train`: parse the options, run the trainer on MPI_COMM_WORLD. */
#include "cli/commands.h"

#include <getopt.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/report.h"
#include "core/args.h"
#include "core/log.h"
#include "engine/trainer.h"
#include "io/checkpoint.h"

static const char train_usage_head[] =
    "usage: mpirun -np G roundpipe train (--model DIR | --init-config FILE) --data FILE.npy [options]\n";

/* The option table's rows (engine/train_set.c) as getopt_long's array. */
#define TRAIN_OPTIONS_MAX 96

static rp_status parse_train(int argc, char **argv, rp_train_options *o, int *help, rp_error *err)
{
    size_t n;
    const rp_option *rows = rp_train_option_rows(&n);
    struct option train_options[TRAIN_OPTIONS_MAX + 2];
    if (n > TRAIN_OPTIONS_MAX)
        return rp_error_set(err, RP_ERR_INTERNAL, "%zu train options, room for %d", n,
                            TRAIN_OPTIONS_MAX);
    rp_options_getopt(rows, n, 0, train_options);
    optind = 1;
    opterr = 0;
    for (;;) {
        int idx = -1, c = getopt_long(argc, argv, ":h", train_options, &idx);
        if (c == -1)
            break;
        if (c == 0)
            RP_TRY(rp_option_set(&rows[idx], o, optarg, err));
        else if (c == 'h') {
            *help = 1;
            return RP_OK;
        } else if (c == ':')
            return rp_error_set(err, RP_ERR_INVALID_ARG, "%s needs a value", argv[optind - 1]);
        else
            return rp_arg_unknown_option(argv[optind - 1], rows, n, err);
    }
    if (optind < argc)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "unexpected argument '%s'", argv[optind]);
    return rp_train_options_check(o, err);
}

static volatile sig_atomic_t g_checkpoints; /* the run has --checkpoint-dir */

static void on_signal(int sig)
{
    /* SIGUSR1 and SIGTERM with checkpoints: the step in progress ends and a
     * checkpoint is written, once; any other signal, or a second one, stops
     * at once */
    if (g_checkpoints && (sig == SIGUSR1 || sig == SIGTERM) && !rp_checkpoint_requested())
        rp_request_checkpoint(sig);
    else
        rp_interrupt(sig);
}

/* SIGINT, SIGTERM and SIGUSR1 ask the run to stop: at once, removing its
 * temporary files and shared memory, saying where it stopped and exiting
 * 128 + the signal; or, with --checkpoint-dir, SIGUSR1 and SIGTERM after
 * the step in progress, with a checkpoint, exiting 0. */
static void catch_interrupts(int checkpoints)
{
    g_checkpoints = checkpoints;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
}

/* What a run stopped at once keeps, for the line that says so: the newest
 * complete checkpoint. */
static void kept(const rp_train_options *o, char *out, size_t cap)
{
    char newest[4096] = "";
    rp_error err = {0};
    if (!o->checkpoint_dir)
        snprintf(out, cap, "no checkpoint (no --checkpoint-dir)");
    else if (rp_checkpoint_latest(o->checkpoint_dir, newest, sizeof newest, &err) == RP_OK &&
             newest[0])
        snprintf(out, cap, "%s (continue with the same command and --resume auto)", newest);
    else
        snprintf(out, cap, "no checkpoint (none was written yet)");
}

/* How long a failed rank waits for the others to compare errors (report.h):
 * after a failure they agree within a step's time, and a job that ends must
 * not sit for the run's --timeout; a rank a signal stopped has less, as
 * mpirun kills its ranks about a second after it forwards SIGTERM. */
#define REPORT_WAIT_S 10.0
#define REPORT_WAIT_SIGNALLED_S 0.5

int rp_cli_train(int argc, char **argv)
{
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    rp_train_options o;
    rp_train_options_default(&o);
    rp_error err = {0};
    int help = 0;
    if (parse_train(argc, argv, &o, &help, &err) != RP_OK) {
        if (rank == 0)
            fprintf(stderr, "roundpipe train: %s\n(try 'roundpipe train --help')\n", err.msg);
        return 2;
    }
    if (help) {
        if (rank == 0) {
            size_t n;
            const rp_option *rows = rp_train_option_rows(&n);
            fputs(train_usage_head, stdout);
            rp_options_usage(stdout, rows, n);
            fputs("See roundpipe(1).\n", stdout);
        }
        return 0;
    }
    rp_logger lg = {.stream = stderr, .level = RP_LOG_INFO, .rank = rank};
    catch_interrupts(o.checkpoint_dir != NULL);
    rp_status s = rp_train_run(&o, MPI_COMM_WORLD, &lg, &err);
    if (s == RP_OK)
        return 0;
    if (s == RP_ERR_PEER_LOST) {
        /* the communicator is unusable: no collective can end the job */
        fprintf(stderr, "[roundpipe %d] error: %s (%s)\n", rank, err.msg, rp_status_string(s));
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* one line per failure (report.h); the ranks a signal stopped say so
     * in one line, the lowest's, with what the run keeps */
    int sig = rp_interrupted();
    char line[RP_ERROR_MSG_MAX + 4400];
    if (sig) {
        char what[4200];
        kept(&o, what, sizeof what);
        snprintf(line, sizeof line, "%s (%s); kept: %s",
                 s == RP_ERR_INTERRUPTED ? err.msg : "interrupted",
                 sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM"
                                          : sig == SIGUSR1 ? "SIGUSR1" : "signal", what);
        rp_cli_report(MPI_COMM_WORLD, 0, "interrupted", line, REPORT_WAIT_SIGNALLED_S);
        return 128 + sig; /* as a shell reports a process its signal ended */
    }
    snprintf(line, sizeof line, "error: %s (%s)", err.msg, rp_status_string(s));
    rp_cli_report(MPI_COMM_WORLD, err.echo, line, line, REPORT_WAIT_S);
    return 1;
}
