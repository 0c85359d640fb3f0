/* Stand-in driver for `roundpipe plan` / `roundpipe simulate` used by the
 * tests until the roundpipe dispatcher carries them. */
#include <stdio.h>
#include <string.h>

#include "cli/cmd_plan.h"

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "plan"))
        return rp_cli_plan(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "simulate"))
        return rp_cli_simulate(argc - 1, argv + 1);
    fprintf(stderr, "usage: rp-plan plan|simulate [options]\n");
    return 2;
}
