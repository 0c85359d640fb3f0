/* One error line per failure, from the rank that found it. */
#ifndef RP_CLI_REPORT_H
#define RP_CLI_REPORT_H

#include <mpi.h>

/* Print "[roundpipe R] LINE" on this rank unless another rank prints it.
 * The ranks' failures are compared by their keys (the error's message, or
 * one key for every rank a signal stopped): of the ranks holding a failure
 * of their own, the lowest with a given key prints; echoes (a failure
 * another rank found, told here: "rank 3 failed (see its message)") print
 * nothing. They compare hashes of the keys with a non-blocking all-gather
 * bounded by wait_s, so a rank that never gets there (hung, killed) holds
 * nobody: past it every rank prints its own line, echo or not. When no rank
 * holds a failure of its own, rank 0 prints its echo: a failure is never
 * silent. */
void rp_cli_report(MPI_Comm comm, int echo, const char *key, const char *line, double wait_s);

#endif
