/* Subcommands of the roundpipe tool. Each returns the process exit code. */
#ifndef RP_CLI_COMMANDS_H
#define RP_CLI_COMMANDS_H

int rp_cli_train(int argc, char **argv); /* needs MPI initialised */
int rp_cli_topology(int argc, char **argv);
int rp_cli_version(int argc, char **argv);

#endif
