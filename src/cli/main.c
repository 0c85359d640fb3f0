/* The roundpipe command: dispatch to a subcommand. Only the CLI decides how
 * to die; the library returns statuses. */
#include "config.h"

#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/cmd_plan.h"
#include "roundpipe.h"

static const char usage[] =
    "usage: roundpipe <command> [options]\n"
    "commands:\n"
    "  train      fine-tune a model (run under mpirun/srun, one rank per device)\n"
    "  plan       print the stage plan for a model and settings\n"
    "  simulate   run the planner and schedule on a modelled machine\n"
    "  topology   print which GPUs share a PCIe link (this machine or an hwloc XML)\n"
    "  version    print the version (--verbose: build, libraries, machine, GPU)\n"
    "  help       this text\n"
    "'roundpipe <command> --help' lists a command's options; see roundpipe(1).\n";

static int run_with_mpi(int (*fn)(int, char **), int argc, char **argv)
{
    /* several nodes exchange messages from the engine's threads
     * (engine/node_sums.h); a lesser level is reported then */
    int provided = MPI_THREAD_SINGLE;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rc = fn(argc, argv), all = rc;
    /* Every rank agrees on the exit code (the trainer's failures are
     * collective, so no rank is left blocked). */
    MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    rc = all;
    MPI_Finalize();
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "train") == 0)
        return run_with_mpi(rp_cli_train, argc - 1, argv + 1);
    if (strcmp(cmd, "plan") == 0)
        return rp_cli_plan(argc - 1, argv + 1);
    if (strcmp(cmd, "simulate") == 0)
        return rp_cli_simulate(argc - 1, argv + 1);
    if (strcmp(cmd, "topology") == 0)
        return rp_cli_topology(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0)
        return rp_cli_version(argc - 1, argv + 1);
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        fputs(usage, stdout);
        return 0;
    }
    fprintf(stderr, "roundpipe: unknown command '%s'\n%s", cmd, usage);
    return 2;
}
