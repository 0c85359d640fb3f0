/* `roundpipe plan` and `roundpipe simulate`. Each returns the process exit
 * code (0 ok, 1 failure, 2 bad usage) and prints errors to stderr. Neither
 * needs MPI. */
#ifndef RP_CLI_CMD_PLAN_H
#define RP_CLI_CMD_PLAN_H

int rp_cli_plan(int argc, char **argv);
int rp_cli_simulate(int argc, char **argv);

#endif
